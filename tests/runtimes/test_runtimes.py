"""The built-in adapters for real (torch-cpu, ort-cpu on the zoo's mlp) and the registry's contract."""

from __future__ import annotations

import numpy as np
import pytest

from harness.artifacts import ArtifactCache, onnx_for_model
from harness.data import make_feed
from harness.errors import UsageError
from harness.model import get_model
from harness.precision import Precision
from harness.runtimes import Runtime, RuntimeOptions, get_runtime, runtime_names


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return ArtifactCache(tmp_path_factory.mktemp("cache"))


def test_registry_lists_builtins_and_rejects_unknown_names():
    assert {"torch-cpu", "ort-cpu"} <= set(runtime_names())
    with pytest.raises(UsageError, match="valid runtimes: torch-cpu, ort-cpu"):
        get_runtime("tensorrt-9")


def test_unsupported_precision_is_a_reason_not_an_error():
    verdict = get_runtime("ort-cpu").supports(get_model("mlp"), Precision.BF16)
    assert not verdict and "ort-cpu does not run bf16" in verdict.reason


@pytest.mark.parametrize("name", ["torch-cpu", "ort-cpu"])
def test_adapter_runs_mlp_and_matches_plain_torch(name, cache):
    import torch

    spec = get_model("mlp")
    feed = make_feed(spec, {"batch": 3}, seed=0)
    with torch.inference_mode():
        expected = spec.build()(torch.from_numpy(feed["x"])).numpy()
    with get_runtime(name)(spec, Precision.FP32, RuntimeOptions(threads=1, cache=cache)) as rt:
        assert rt.setup_s is not None and rt.setup_s >= 0
        out = rt.infer(feed)
        assert set(out) == {"logits"} and out["logits"].shape == (3, 10)
        np.testing.assert_allclose(out["logits"], expected, rtol=1e-4, atol=1e-5)
        call = rt.bind(feed)
        call()  # the timed callable runs without conversion work
        assert rt.details()["threads"] == 1


def test_ort_uses_the_cached_onnx_export_with_a_dynamic_batch_axis(cache):
    import onnx

    spec = get_model("mlp")
    first = onnx_for_model(spec, cache)
    second = onnx_for_model(spec, cache)
    assert second.cache_hit and second.path == first.path
    model = onnx.load(str(second.path))
    onnx.checker.check_model(model)
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param  # symbolic batch
    with get_runtime("ort-cpu")(spec, Precision.FP32, RuntimeOptions(threads=1, cache=cache)) as rt:
        assert rt.artifact.cache_hit and rt.artifact.path == first.path
        for b in (1, 5):
            assert rt.infer(make_feed(spec, {"batch": b}, 0))["logits"].shape == (b, 10)


def test_infer_before_activation_and_missing_inputs_are_clear_errors(cache):
    spec = get_model("mlp")
    rt = get_runtime("ort-cpu")(spec, Precision.FP32, RuntimeOptions(threads=1, cache=cache))
    with pytest.raises(RuntimeError, match="context manager"):
        rt.infer({"x": np.zeros((1, 256), np.float32)})
    with rt:
        with pytest.raises(ValueError, match="lacks inputs"):
            rt.infer({"wrong": np.zeros((1, 256), np.float32)})


def test_new_runtime_needs_only_the_hooks():
    class Doubler(Runtime):
        name = "doubler-test"

        def _activate(self):
            self.ready = True

        def _infer(self, prepared):
            return {"logits": prepared["x"] * 2}

    with Doubler(get_model("mlp"), Precision.FP32, RuntimeOptions(threads=1)) as rt:
        out = rt.infer({"x": np.ones((1, 256), np.float32)})
    assert out["logits"].sum() == 512


@pytest.mark.parametrize("name, precision, recipe", [
    ("ort-cpu", "fp16", "fp16: onnxconverter-common float16, keep_io_types"),
    ("ort-cpu", "int8", "int8: ORT static QDQ, per-channel"),
    ("torch-cpu", "bf16", "bf16: torch.autocast(cpu, bfloat16)"),
    ("torch-cpu", "int8", "int8: torch.ao dynamic quantisation of nn.Linear (qint8), 3 layers, 100% of 0.4M"),
    ("torch-cpu", "fp32", "fp32"),
])
def test_lower_precisions_run_near_fp32_and_say_what_ran(name, precision, recipe, cache):
    from harness.accuracy import compare

    spec = get_model("mlp")
    feed = make_feed(spec, {"batch": 8}, seed=0)
    with get_runtime("torch-cpu")(spec, Precision.FP32, RuntimeOptions(threads=1, cache=cache)) as rt:
        ref = rt.infer(feed)
    with get_runtime(name)(spec, Precision(precision), RuntimeOptions(threads=1, cache=cache)) as rt:
        assert rt.recipe.startswith(recipe), rt.recipe
        out = rt.infer(feed)
        assert out["logits"].dtype == np.float32
    res = compare(ref, out, spec.tolerance(Precision(precision)), classification=True)
    assert res, res.message
    if precision != "fp32":
        assert res.worst()["max_abs"] > 0  # something really changed


def test_torch_cpu_runs_fp16_requests_as_bf16_and_ort_has_no_bf16():
    torch_cpu, ort_cpu = get_runtime("torch-cpu"), get_runtime("ort-cpu")
    assert torch_cpu.case_precision(Precision.FP16) is Precision.BF16
    assert torch_cpu.case_precision(Precision.INT8) is Precision.INT8
    assert ort_cpu.case_precision(Precision.FP16) is Precision.FP16
    assert not torch_cpu.supports(get_model("mlp"), Precision.FP16)
    assert {Precision.FP32, Precision.FP16, Precision.INT8} == ort_cpu.precisions


def test_torch_int8_on_a_cnn_says_convolutions_stay_fp32():
    from torch import nn

    from harness.runtimes.torch_eager import quantize_linear_dynamic

    cnn = nn.Sequential(nn.Conv2d(3, 64, 3), nn.Flatten(), nn.LazyLinear(10))
    cnn(__import__("torch").zeros(1, 3, 8, 8))
    _, recipe = quantize_linear_dynamic(cnn.eval())
    assert "1 layer, 93% of 24.8k parameters; other layers (e.g. Conv2d) stay FP32" in recipe
    _, recipe = quantize_linear_dynamic(nn.Sequential(nn.Conv2d(3, 4, 3)).eval())
    assert "nothing was quantised, this row is FP32 compute" in recipe


def test_ort_onnx_pair_is_fp32_and_the_file_it_runs(cache):
    spec = get_model("mlp")
    with get_runtime("ort-cpu")(spec, Precision.FP32, RuntimeOptions(threads=1, cache=cache)) as rt:
        assert rt.onnx_pair() is None  # nothing to compare
    with get_runtime("ort-cpu")(spec, Precision.FP16, RuntimeOptions(threads=1, cache=cache)) as rt:
        fp32, lowp = rt.onnx_pair()
        assert fp32 == onnx_for_model(spec, cache).path and lowp == rt.artifact.path != fp32
    with get_runtime("torch-cpu")(spec, Precision.INT8, RuntimeOptions(threads=1, cache=cache)) as rt:
        assert rt.onnx_pair() is None


def test_availability_is_derived_from_requirements_installed_and_importing(monkeypatch):
    """A runtime's availability comes from its declared requirements: installed at an allowed version, and their
    modules import (a broken install is said so, with the install command); then its device check."""
    import sys

    from harness.runtimes.base import Runtime

    class Needs(Runtime):
        name = "needs-tabulate"
        requirements = ("tabulate>=0.1",)
        install = "pip install tabulate"

        def _activate(self): ...

        def _infer(self, prepared): ...

    assert Needs.availability()
    monkeypatch.setitem(sys.modules, "tabulate", None)  # installed, but `import tabulate` fails
    verdict = Needs.availability()
    assert not verdict and "tabulate is installed but `import tabulate` fails" in verdict.reason
    assert verdict.reason.endswith("; install it with: pip install tabulate")
    monkeypatch.setattr(Needs, "requirements", ("tabulate>=999",))
    verdict = Needs.availability()
    assert not verdict and verdict.reason.startswith("tabulate>=999 is not installed in this interpreter")
