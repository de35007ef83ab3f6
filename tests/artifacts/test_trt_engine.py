"""TrtEngineFromOnnx with a fake tensorrt: cache keys, flags by version, profiles, calibration, errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpu_fakes import FakeTrt, fake_torch_for_trt
from harness.artifacts.cache import Artifact, ArtifactCache
from harness.artifacts.trt_engine import EngineFlags, TrtEngineFromOnnx, exact_profiles, profile_ranges
from harness.errors import ModelError
from harness.model import BATCH, SEQ, ModelSpec, TensorSpec

SPEC = ModelSpec(name="toy", build=lambda: None, inputs=(TensorSpec("x", (BATCH, 16)),), outputs=("y",))
TEXT = ModelSpec(name="toy-text", build=lambda: None, outputs=("y",),
                 inputs=(TensorSpec("ids", (BATCH, SEQ), "int64", 0, 100), TensorSpec("mask", (BATCH, SEQ), "int64")))
PROFILE = {"x": ((1, 16), (8, 16), (8, 16))}


def onnx_artifact(tmp_path: Path, key: str = "onnx-key-1") -> Artifact:
    path = tmp_path / "model.onnx"
    path.write_bytes(b"onnx")
    return Artifact(path, key, True, 0.0, {})


def step(tmp_path, trt=None, torch=None, flags=EngineFlags(), profiles=(PROFILE,), key="onnx-key-1", **kw):
    return TrtEngineFromOnnx(onnx_artifact(tmp_path, key), ArtifactCache(tmp_path / "cache"), flags, profiles,
                             label="toy-fp32", trt=trt or FakeTrt(), torch=torch or fake_torch_for_trt(), **kw)


def test_profile_ranges_cover_the_run_shapes():
    assert profile_ranges(SPEC, [{"batch": 1}, {"batch": 8}, {"batch": 4}]) == PROFILE
    ranges = profile_ranges(TEXT, [{"batch": 1, "seq": 32}, {"batch": 4, "seq": 128}])
    assert ranges["ids"] == ((1, 32), (4, 128), (4, 128)) and ranges["mask"] == ranges["ids"]
    assert profile_ranges(SPEC, ()) == {"x": ((1, 16), (8, 16), (8, 16))}  # default range when unknown


def test_exact_profiles_one_per_distinct_shape():
    profiles = exact_profiles(SPEC, [{"batch": 1}, {"batch": 8}, {"batch": 1}])
    assert profiles == [{"x": ((1, 16),) * 3}, {"x": ((8, 16),) * 3}]


def test_cache_key_changes_with_onnx_flags_version_gpu_and_profiles(tmp_path):
    base = step(tmp_path).key_parts()
    assert base["tensorrt"] == "10.13.0" and base["gpu"] == "NVIDIA H100 80GB HBM3"
    assert base["compute_capability"] == "9.0"
    variants = [
        step(tmp_path, key="onnx-key-2"),
        step(tmp_path, flags=EngineFlags(fp16=True)),
        step(tmp_path, trt=FakeTrt("10.14.1")),
        step(tmp_path, torch=fake_torch_for_trt("NVIDIA H200", (9, 0))),
        step(tmp_path, profiles=({"x": ((1, 16),) * 3},)),
    ]
    keys = {str(sorted(v.key_parts().items())) for v in variants}
    assert len(keys) == len(variants) and str(sorted(base.items())) not in keys


def test_build_sets_flags_and_profiles_and_caches_the_engine(tmp_path):
    trt = FakeTrt("10.13.0")
    first = step(tmp_path, trt=trt, flags=EngineFlags(fp16=True),
                 profiles=tuple(exact_profiles(SPEC, [{"batch": 1}, {"batch": 8}])))()
    assert not first.cache_hit and first.path.read_bytes() == b"ENGINE"
    record = trt.builds[0]
    assert record["flags"] == {trt.BuilderFlag.FP16} and record["network_flags"] == 0
    assert record["cleared"] == {trt.BuilderFlag.TF32}  # FP32 layers stay IEEE FP32
    assert record["profiles"] == [{"x": ((1, 16),) * 3}, {"x": ((8, 16),) * 3}]
    again = step(tmp_path, trt=trt, flags=EngineFlags(fp16=True),
                 profiles=tuple(exact_profiles(SPEC, [{"batch": 1}, {"batch": 8}])))()
    assert again.cache_hit and again.path == first.path and len(trt.builds) == 1


def test_tensorrt_11_builds_strongly_typed_without_precision_flags(tmp_path):
    trt = FakeTrt("11.4.0")
    step(tmp_path, trt=trt, flags=EngineFlags(fp16=True, strongly_typed=True))()
    assert trt.builds[0]["flags"] == set() and trt.builds[0]["network_flags"] == 1 << 1


def test_int8_entropy_calibration_feeds_every_batch(tmp_path):
    trt = FakeTrt("10.13.0")
    feeds = [{"x": np.full((2, 16), i, np.float32)} for i in range(5)]
    art = step(tmp_path, trt=trt, flags=EngineFlags(int8=True, int8_source="entropy"),
               calibration=lambda: feeds)()
    record = trt.builds[0]
    assert record["flags"] == {trt.BuilderFlag.INT8}
    assert record["calibrator"].batches == 5
    assert record["calibration_profile"] == {"x": ((2, 16),) * 3}
    assert art.meta["calibration_batches"] == 5


def test_int8_calibration_errors_are_clear(tmp_path):
    with pytest.raises(ModelError, match="needs calibration feeds"):
        step(tmp_path, flags=EngineFlags(int8=True, int8_source="entropy"), calibration=lambda: [])()
    mixed = [{"x": np.zeros((1, 16), np.float32)}, {"x": np.zeros((2, 16), np.float32)}]
    with pytest.raises(ModelError, match="share one shape"):
        step(tmp_path, flags=EngineFlags(int8=True, int8_source="entropy"), calibration=lambda: mixed)()
    with pytest.raises(ModelError, match="removed in TensorRT 11"):
        step(tmp_path, trt=FakeTrt("11.4.0"), flags=EngineFlags(int8=True, int8_source="entropy"),
             calibration=lambda: [{"x": np.zeros((1, 16), np.float32)}])()


def test_parser_and_builder_failures_name_the_file(tmp_path):
    with pytest.raises(ModelError, match=r"model\.onnx: TensorRT's ONNX parser refused.*UNSUPPORTED_NODE"):
        step(tmp_path, trt=FakeTrt(parse_ok=False))()
    with pytest.raises(ModelError, match="could not build an engine"):
        step(tmp_path, trt=FakeTrt(build_ok=False))()
    assert not list((tmp_path / "cache").glob("trt-engine/toy*"))  # nothing half-built is published
