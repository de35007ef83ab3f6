"""The seed documents' runtimes for real on the zoo's mlp: openvino-cpu, litert-cpu, tvm-cpu, torch.compile,
TorchScript. A runtime whose extra is not installed skips with its install command (CI's .ci/extras runs these
tests in the extras' environments, where they must run)."""

from __future__ import annotations

import os
import re
import sys

import numpy as np
import pytest

from harness.artifacts import ArtifactCache
from harness.data import make_feed
from harness.model import BATCH, ModelSpec, TensorSpec, get_model
from harness.precision import Precision
from harness.runtimes import RuntimeOptions, get_runtime

SEED_RUNTIMES = ["openvino-cpu", "litert-cpu", "tvm-cpu", "torch-compile-cpu", "torchscript-cpu"]
EXTRA_MODULES = {"openvino-cpu": ("openvino", "openvino"), "litert-cpu": ("ai_edge_litert", "litert"),
                 "tvm-cpu": ("tvm", "tvm")}


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return ArtifactCache(tmp_path_factory.mktemp("cache"))


def _available(name: str):
    """The runtime class, or a skip with its reason; a failure where CI requires it (HARNESS_REQUIRE_RUNTIMES)."""
    cls = get_runtime(name)
    verdict = cls.availability()
    if not verdict:
        if name in os.environ.get("HARNESS_REQUIRE_RUNTIMES", "").split(","):
            pytest.fail(f"{name} is required here (HARNESS_REQUIRE_RUNTIMES) but unavailable: {verdict.reason}")
        pytest.skip(verdict.reason)
    return cls


def _expected(spec: ModelSpec, feed: dict) -> np.ndarray:
    import torch

    with torch.inference_mode():
        return spec.build()(torch.from_numpy(feed["x"])).numpy()


@pytest.mark.e2e
@pytest.mark.parametrize("name", SEED_RUNTIMES)
def test_runs_mlp_per_shape_with_setup_recorded_outside_the_timed_call(name, cache):
    cls = _available(name)
    spec = get_model("mlp")
    with cls(spec, Precision.FP32, RuntimeOptions(threads=1, cache=cache)) as rt:
        activation_s = rt.setup_s
        for batch in (1, 3):
            feed = make_feed(spec, {"batch": batch}, seed=0)
            out = rt.infer(feed)
            assert out["logits"].shape == (batch, 10)
            np.testing.assert_allclose(out["logits"], _expected(spec, feed), rtol=1e-4, atol=1e-5)
            shape_setup_s = rt.shape_setup_s
            assert shape_setup_s is not None and rt.setup_s == pytest.approx(activation_s + shape_setup_s)
            call = rt.bind(feed)
            assert rt.shape_setup_s == shape_setup_s  # same shape: no second compile
            call()
            details = rt.details()
            assert details["threads"] == 1 and details["shape_setup_s"] == round(shape_setup_s, 3)


@pytest.mark.parametrize("name", list(EXTRA_MODULES))
def test_missing_extra_is_a_skip_with_the_install_command(name, monkeypatch):
    module, extra = EXTRA_MODULES[name]
    for key in [k for k in sys.modules if k == module or k.startswith(module + ".")] + [module]:
        monkeypatch.setitem(sys.modules, key, None)  # `import module(.sub)` now raises ImportError
    verdict = get_runtime(name).availability()
    assert not verdict and f'pip install -c constraints/cpu.txt -e ".[{extra}]"' in verdict.reason


def test_openvino_hint_follows_the_scenario_and_precision_hint_is_explicit(cache):
    cls = _available("openvino-cpu")
    spec = get_model("mlp")
    with cls(spec, Precision.FP32, RuntimeOptions(threads=1, cache=cache)) as rt:
        rt.infer(make_feed(spec, {"batch": 1}, 0))
        assert rt.details()["performance_hint"] == "LATENCY" and rt.details()["inference_precision"] == "f32"
        rt.infer(make_feed(spec, {"batch": 4}, 0))
        assert rt.details()["performance_hint"] == "THROUGHPUT"


def test_openvino_int8_runs_the_qdq_artifact_within_its_tolerance(cache):
    from harness.accuracy import compare

    cls = _available("openvino-cpu")
    spec = get_model("mlp")
    feed = make_feed(spec, {"batch": 4}, 0)
    with cls(spec, Precision.INT8, RuntimeOptions(threads=1, cache=cache)) as rt:
        out = rt.infer(feed)
        assert rt.recipe.startswith("int8: ORT static QDQ") and rt.artifact.path.suffix == ".onnx"
    verdict = compare({"logits": _expected(spec, feed)}, out, spec.tolerance(Precision.INT8), classification=True)
    assert verdict, verdict.message
    assert verdict.worst()["rel_l2"] > 1e-4  # really quantised, not the FP32 graph


@pytest.mark.parametrize("precision,recipe", [(Precision.INT8, "int8-dynamic"), (Precision.FP16, "fp16-weights")])
def test_litert_quantisation_recipes_stay_within_their_tolerance(precision, recipe, cache):
    from harness.accuracy import compare

    cls = _available("litert-cpu")
    spec = get_model("mlp")
    feed = make_feed(spec, {"batch": 4}, 0)
    with cls(spec, precision, RuntimeOptions(threads=1, cache=cache)) as rt:
        out = rt.infer(feed)
        assert rt.details()["recipe"] == recipe and rt.artifact.path.suffix == ".tflite"
    verdict = compare({"logits": _expected(spec, feed)}, out, spec.tolerance(precision), classification=True)
    assert verdict, verdict.message


def test_litert_skips_onnx_only_models():
    onnx_only = ModelSpec(name="onnx-only", onnx_path="model.onnx", inputs=(TensorSpec("x", (BATCH, 4)),),
                          outputs=("y",))
    verdict = get_runtime("litert-cpu").supports(onnx_only, Precision.FP32)
    assert not verdict and "ONNX-only" in verdict.reason


def test_tvm_caches_one_compiled_library_per_shape_and_says_untuned(cache):
    cls = _available("tvm-cpu")
    spec = get_model("mlp")
    feed = make_feed(spec, {"batch": 2}, 0)
    paths = []
    for _ in range(2):
        with cls(spec, Precision.FP32, RuntimeOptions(threads=1, cache=cache)) as rt:
            rt.infer(feed)
            paths.append((rt.artifact.path, rt.artifact.cache_hit))
            assert rt.details()["tuning"] == "untuned" and rt.details()["target"]["kind"] == "llvm"
    assert paths[0][0] == paths[1][0] and paths[0][0].suffix == ".so" and paths[1][1]


def test_tvm_conformance_runs_a_one_node_case_and_reports_refusals_as_unsupported():
    """`harness conform --runtimes tvm-cpu`'s per-case step: compiled in memory, an op TVM's Relax ONNX frontend
    lacks is unsupported with TVM's own message."""
    cls = _available("tvm-cpu")
    from onnx import TensorProto, helper

    from harness.workloads.conform.worker import run_case

    def case(op: str, shape: list[int], x: np.ndarray, y: np.ndarray) -> dict:
        graph = helper.make_graph([helper.make_node(op, ["x"], ["y"])], f"test_{op.lower()}",
                                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape[:len(y.shape)])])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
        return run_case({"runtime": cls, "precision": "fp32", "model": model.SerializeToString(),
                         "inputs": {"x": x}, "expected": [y], "rtol": 1e-3, "atol": 1e-7, "threads": 1})

    assert cls.conformance_precisions == {Precision.FP32} and cls.library_version()
    x = np.array([[-1.0, 0.5], [2.0, -3.0]], dtype=np.float32)
    assert case("Relu", [2, 2], x, np.maximum(x, 0))["status"] == "passed"
    wrong = case("Relu", [2, 2], x, np.maximum(x, 0) + 1)
    assert wrong["status"] == "failed" and wrong["max_abs"] == 1.0
    clip = helper.make_graph([helper.make_node("Clip", ["x", "lo", "hi"], ["y"])], "test_clip",
                             [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in
                              (("x", [2, 2]), ("lo", []), ("hi", []))],
                             [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])])
    scalars = {"x": x, "lo": np.array(-1.5, np.float32), "hi": np.array(1.0, np.float32)}  # 0-d feeds stay 0-d
    clipped = run_case({"runtime": cls, "precision": "fp32", "inputs": scalars, "expected": [np.clip(x, -1.5, 1)],
                        "model": helper.make_model(clip, opset_imports=[helper.make_opsetid("", 17)],
                                                   ir_version=8).SerializeToString(),
                        "rtol": 1e-3, "atol": 1e-7, "threads": 1})
    assert clipped["status"] == "passed", clipped
    refused = case("Det", [2, 2], x, np.array(np.linalg.det(x), dtype=np.float32))
    assert refused["status"] == "unsupported" and refused["phase"] == "load"
    assert "not supported for frontend ONNX: Det" in refused["reason"]


def test_compile_mode_is_a_validated_run_option(tmp_path):
    from harness.options import parse_run_options
    from harness.errors import UsageError

    base = {"models": "mlp", "runtimes": "torch-compile-cpu", "out": str(tmp_path)}
    config = parse_run_options({**base, "compile_mode": "max-autotune-no-cudagraphs"})
    assert config.artifacts.compile_mode == "max-autotune-no-cudagraphs"
    assert parse_run_options(base).artifacts.compile_mode == "default"
    with pytest.raises(UsageError, match="valid modes: default"):
        parse_run_options({**base, "compile_mode": "fastest"})


@pytest.mark.e2e
def test_torch_compile_records_its_mode_and_one_compile_per_shape(cache):
    cls = _available("torch-compile-cpu")
    spec = get_model("mlp")
    with cls(spec, Precision.FP32, RuntimeOptions(threads=1, cache=cache, compile_mode="default")) as rt:
        for batch in (2, 5, 5):
            rt.infer(make_feed(spec, {"batch": batch}, 0))
        details = rt.details()
    assert details["compile_mode"] == "default" and details["compiles"] == 2 and not details["dynamic"]


def test_every_runtime_extra_is_documented_and_exercised_by_ci():
    from pathlib import Path

    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

    root = Path(__file__).resolve().parents[2]
    extras = set(tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    readme, ci = (root / "README.md").read_text(), root / ".ci" / "extras"
    guide = (root / "docs" / "runtimes.md").read_text()  # the set-up per runtime, linked from the README
    assert "docs/runtimes.md#optional-runtimes" in readme and "## Optional runtimes" in guide
    assert os.access(ci, os.X_OK)
    # each optional runtime runs in an environment of its own built from its extra's requirements (harness.envs,
    # tests/envs): the README's command names it, the guide gives its extra, CI runs it through that path
    run_line = next(ln for ln in readme.splitlines() if ln.startswith("harness run --models mlp --runtimes"))
    assert "docs/environments.md" in readme
    for extra in ("openvino", "litert", "tvm"):
        assert extra in extras
        assert f"{extra}-cpu" in run_line
        assert f"`{extra}-cpu`" in guide
        assert re.search(rf'\[{extra}\]', guide), extra
        assert f"{extra}-cpu" in ci.read_text()
