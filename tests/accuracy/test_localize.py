"""Layer-wise drift localisation: a deliberately broken weight is found at the node that consumes it."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from harness.accuracy import localize as localize_module
from harness.accuracy.localize import localize
from harness.artifacts import ArtifactCache, onnx_for_model, onnx_for_precision
from harness.artifacts.cache import Artifact
from harness.config import RunConfig
from harness.data import make_feed
from harness.execution import CaseRunner
from harness.measure.timer import TimingPolicy
from harness.model import get_model
from harness.precision import Precision, Tolerance
from harness.results.schema import CaseId
from harness.runtimes import RuntimeOptions

WEIGHT = "net.2.weight"  # the mlp's second Linear


def config(tmp_path, **kw):
    return RunConfig.build(models=("mlp",), runtimes=("ort-cpu", "torch-cpu"), threads=1,
                     timing=TimingPolicy(min_time_s=0.01, min_iters=3, warmup_iters=1),
                     cache_dir=tmp_path / "cache", out_dir=tmp_path / "out", **kw)


@pytest.fixture
def broken_fp16(tmp_path):
    """The mlp's FP16 ONNX with one weight (an initializer of one node) scaled by 3; its consumer's name."""
    spec = get_model("mlp")
    good = onnx_for_precision(spec, Precision.FP16, RuntimeOptions(1, ArtifactCache(tmp_path / "cache")))
    model = onnx.load(str(good.path))
    init = next(i for i in model.graph.initializer if i.name == WEIGHT)
    init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) * np.float16(3), WEIGHT))
    consumer = next(n for n in model.graph.node if WEIGHT in n.input)
    path = tmp_path / "broken" / "model.onnx"
    path.parent.mkdir()
    onnx.save(model, str(path))
    return Artifact(path, "broken", False, 0.0, {"recipe": good.meta["recipe"] + " (weight scaled by test)"}), consumer


@pytest.mark.e2e
def test_broken_weight_fails_the_case_and_localisation_names_the_changed_node(tmp_path, monkeypatch, broken_fp16):
    artifact, consumer = broken_fp16
    monkeypatch.setattr("harness.runtimes.onnxruntime.session.onnx_for_precision", lambda *a, **k: artifact)
    phases = []
    r = CaseRunner().run(CaseId("mlp", "ort-cpu", "fp16", 4, None, "cpu"), config(tmp_path), phases.append)
    assert r.status == "failed" and "rel_l2=" in r.reason
    assert phases[-1] == "localize"
    loc = r.localization
    assert loc.trigger == "failure" and "error" not in loc.as_dict() and loc.checked >= 4
    assert loc.tolerance == {"max_rel_l2": 2e-2, "min_cosine": 0.999}
    first = loc.first_bad[0]
    assert (first.node, first.op_type) == (consumer.name, "Gemm")
    assert first.rel_l2 > 1.0 and 0 < first.cosine <= 1 and first.max_abs > 0
    bad_nodes = [f.node for f in loc.first_bad]
    assert "node_linear" not in bad_nodes and "node_relu" not in bad_nodes  # upstream layers are fine
    assert r.precision_recipe.endswith("(weight scaled by test)")


def test_localisation_checks_in_chunks_and_agrees_with_one_chunk(tmp_path, monkeypatch, broken_fp16):
    artifact, consumer = broken_fp16
    spec = get_model("mlp")
    fp32 = onnx_for_model(spec, ArtifactCache(tmp_path / "cache")).path
    feed = make_feed(spec, {"batch": 2}, 0)
    sizes = []
    real = localize_module._run_with_outputs

    def spy(model, names, feed, threads):
        sizes.append(len(names))
        return real(model, names, feed, threads)

    monkeypatch.setattr(localize_module, "_run_with_outputs", spy)
    tol = Tolerance(max_rel_l2=1e-2)
    small = localize(fp32, artifact.path, feed, tol, chunk=2, max_findings=10)
    assert max(sizes) == 2 and len(sizes) == 2 * 3  # 5 tensors in chunks of 2, both graphs
    sizes.clear()
    whole = localize(fp32, artifact.path, feed, tol, chunk=64, max_findings=10)
    assert sizes == [5, 5]
    assert small.first_bad == whole.first_bad and small.checked == whole.checked == 5
    assert [f.node for f in whole.first_bad] == [consumer.name, "node_relu_1", "node_linear_2"]
    assert localize(fp32, artifact.path, feed, tol, max_findings=1).first_bad[0].node == consumer.name
    sizes.clear()
    cut = localize(fp32, artifact.path, feed, tol, chunk=2, budget_s=0.0)  # one chunk, then out of time
    assert sizes == [2, 2] and cut.checked == 2 and cut.truncated.startswith("time budget of 0 s reached")


def test_int8_localisation_on_request_compares_dequantised_values(tmp_path):
    r = CaseRunner().run(CaseId("mlp", "ort-cpu", "int8", 2, None, "cpu"), config(tmp_path, localize=True))
    assert r.status == "passed", r.reason
    assert r.precision_recipe.startswith("int8: ORT static QDQ")
    loc = r.localization
    assert loc.trigger == "request" and loc.first_bad == [] and loc.checked >= 3
    fp32 = CaseRunner().run(CaseId("mlp", "ort-cpu", "fp32", 2, None, "cpu"), config(tmp_path, localize=True))
    assert fp32.status == "passed" and fp32.localization is None  # nothing below FP32 to localise


def test_a_localisation_failure_is_recorded_never_the_case_error(tmp_path, monkeypatch, broken_fp16):
    artifact, _ = broken_fp16
    monkeypatch.setattr("harness.runtimes.onnxruntime.session.onnx_for_precision", lambda *a, **k: artifact)

    def boom(*a, **k):
        raise RuntimeError("localiser exploded")

    monkeypatch.setattr(localize_module, "localize", boom)
    r = CaseRunner().run(CaseId("mlp", "ort-cpu", "fp16", 2, None, "cpu"), config(tmp_path))
    assert r.status == "failed" and r.samples_ns
    assert r.localization.error == "RuntimeError: localiser exploded" and r.localization.first_bad == []


def test_command_line_tolerance_reaches_the_case_and_torch_has_no_graph_to_localise(tmp_path):
    c = config(tmp_path, tolerance_overrides={"bf16": {"max_rel_l2": 1e-9, "floor": 0.0}})
    r = CaseRunner().run(CaseId("mlp", "torch-cpu", "bf16", 2, None, "cpu"), c)
    assert r.status == "failed" and "> 1e-09" in r.reason
    assert r.accuracy["tolerance"]["max_rel_l2"] == 1e-9 and r.accuracy["tolerance"]["min_cosine"] == 0.995
    assert r.precision_recipe == "bf16: torch.autocast(cpu, bfloat16) over the FP32 module"
    assert "no low-precision ONNX graph" in r.localization.error
    ok = CaseRunner().run(CaseId("mlp", "ort-cpu", "fp32", 2, None, "cpu"), c)
    assert ok.status == "passed" and ok.precision_recipe == "fp32" and ok.localization is None
