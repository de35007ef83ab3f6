"""GPU runtimes: availability reasons, provider options, engine flags and the IOBinding path without a GPU;
the real GPU runs at the bottom are skipped here with each runtime's reason and run on a CUDA machine."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from gpu_fakes import FakeTrt
from harness.artifacts import ArtifactCache
from harness.artifacts.trt_engine import EngineFlags
from harness.data import make_feed
from harness.model import get_model
from harness.precision import Precision
from harness.runtimes import RuntimeOptions, get_runtime, runtime_names
from harness.runtimes import onnxruntime as ortmod
from harness.runtimes.base import Availability

GPU_RUNTIMES = ("torch-cuda", "ort-cuda", "ort-cuda-h2h", "ort-trt", "tensorrt")
OTHER_EPS = ("ort-rocm", "ort-cann", "ort-openvino")

CUBLAS_LOG = (
    "[E:onnxruntime:Default, provider_bridge_ort.cc:2458 operator()] ... Failed to load library "
    "/x/onnxruntime/capi/libonnxruntime_providers_cuda.so with error: libcublasLt.so.13: cannot open shared "
    "object file: No such file or directory\n[W:onnxruntime:Default, onnxruntime_pybind_state.cc:1295 "
    "CreateExecutionProviderFactoryInstance] Failed to create CUDAExecutionProvider. Require cuDNN 9.* and "
    "CUDA 13.*. Please install all dependencies"
)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return ArtifactCache(tmp_path_factory.mktemp("cache"))


def test_every_gpu_runtime_and_ep_is_one_registry_line():
    names = runtime_names()
    assert set(GPU_RUNTIMES + OTHER_EPS) <= set(names)
    for name in GPU_RUNTIMES:
        cls = get_runtime(name)
        assert cls.device == "cuda" and cls.warmup_floor_s >= 1.0 and "nvml" in cls.memory_sources
    assert get_runtime("ort-cuda").timing_scope == "device_resident"
    assert get_runtime("ort-cuda-h2h").timing_scope == "host_to_host"
    assert get_runtime("torch-cpu").warmup_floor_s == 0.0 and not get_runtime("ort-cpu").memory_sources


def test_fallback_reason_names_the_missing_library_and_requirements():
    reason = ortmod.fallback_reason("CUDAExecutionProvider", CUBLAS_LOG, ["CPUExecutionProvider"], "1.31.1")
    assert reason == ("CUDAExecutionProvider not available: onnxruntime 1.31.1 lists it, but a session with it "
                      "falls back to CPUExecutionProvider: cannot load libcublasLt.so.13 (the provider requires "
                      "cuDNN 9.* and CUDA 13.*)")


def test_probe_of_a_working_provider_is_available_and_cached():
    ortmod._PROBES.pop(("CPUExecutionProvider", "[]"), None)
    assert ortmod.probe_provider("CPUExecutionProvider")
    assert ("CPUExecutionProvider", "[]") in ortmod._PROBES


def _gpu_here() -> bool:
    from harness.measure.cuda import nvidia_driver_reason

    return nvidia_driver_reason() is None


@pytest.mark.skipif(_gpu_here(), reason="this machine has an NVIDIA driver: the CPU-only reasons do not apply")
def test_cpu_machine_reasons_are_precise():
    import onnxruntime as ort

    torch_cuda = get_runtime("torch-cuda").availability()
    assert not torch_cuda and torch_cuda.reason.startswith("CUDA not available: ")
    for name, provider in (("ort-cuda", "CUDAExecutionProvider"), ("ort-trt", "TensorrtExecutionProvider")):
        verdict = get_runtime(name).availability()
        assert not verdict and verdict.reason.startswith(f"{provider} not available: ")
        if provider in ort.get_available_providers():  # listed, yet the session falls back (onnxruntime-gpu)
            assert "falls back to CPUExecutionProvider" in verdict.reason and "cannot load lib" in verdict.reason
        assert "no NVIDIA driver" in verdict.reason
    trt = get_runtime("tensorrt").availability()
    assert not trt
    try:
        import tensorrt  # noqa: F401
    except ImportError:
        assert 'pip install -c constraints/cpu.txt -e ".[tensorrt]"' in trt.reason


@pytest.mark.parametrize("name, provider, hint", [("ort-rocm", "ROCMExecutionProvider", "ROCm"),
                                                  ("ort-cann", "CANNExecutionProvider", "onnxruntime-cann"),
                                                  ("ort-openvino", "OpenVINOExecutionProvider",
                                                   "onnxruntime-openvino")])
def test_other_execution_providers_say_what_is_missing(name, provider, hint):
    import onnxruntime as ort

    verdict = get_runtime(name).availability()
    if provider in ort.get_available_providers() and verdict:
        pytest.skip(f"{provider} works here")
    assert not verdict and verdict.reason.startswith(f"{provider} not available")
    if provider not in ort.get_available_providers():
        assert hint in verdict.reason


def test_torch_cuda_precisions_and_int8_reason():
    cls, mlp = get_runtime("torch-cuda"), get_model("mlp")
    for p in (Precision.FP32, Precision.FP16, Precision.BF16):
        assert cls.supports(mlp, p)
    verdict = cls.supports(mlp, Precision.INT8)
    assert not verdict and "no INT8 CUDA kernels" in verdict.reason and "tensorrt" in verdict.reason


# --------------------------------------------------------------------------------------------- ort-trt
def _trt_ep(precision: Precision, cache: ArtifactCache):
    rt = get_runtime("ort-trt")(get_model("mlp"), precision,
                                RuntimeOptions(threads=1, cache=cache, shapes=({"batch": 1}, {"batch": 8})))
    rt._stream = SimpleNamespace(cuda_stream=1234)
    return rt


@pytest.mark.parametrize("precision, fp16, int8", [(Precision.FP32, "False", "False"),
                                                    (Precision.FP16, "True", "False"),
                                                    (Precision.INT8, "False", "True")])
def test_ort_trt_provider_options(precision, fp16, int8, cache):
    opts = _trt_ep(precision, cache)._provider_options()
    assert opts["trt_fp16_enable"] == fp16 and opts["trt_int8_enable"] == int8
    assert opts["trt_engine_cache_enable"] == "True"
    assert opts["trt_engine_cache_path"] == str(cache.root / "trt-ep") and (cache.root / "trt-ep").is_dir()
    assert opts["trt_profile_min_shapes"] == "x:1x256" and opts["trt_profile_max_shapes"] == "x:8x256"
    assert opts["user_compute_stream"] == "1234" and opts["device_id"] == "0"


def test_qdq_detection(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])]
    inits = [helper.make_tensor("s", TensorProto.FLOAT, [], [0.1]), helper.make_tensor("z", TensorProto.INT8, [], [0])]
    graph = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])], inits)
    onnx.save(helper.make_model(graph), tmp_path / "qdq.onnx")
    assert ortmod._has_qdq(tmp_path / "qdq.onnx")


# --------------------------------------------------------------------------------------------- IOBinding path
class OrtBoundCpu(ortmod.OrtCudaBase):
    """The ort-cuda IOBinding code path, bound to CPU memory: runs here for real."""

    name = "ort-bound-cpu-test"
    provider = "CPUExecutionProvider"
    device = "cpu"
    ort_device = "cpu"

    def _provider_options(self):
        return {}


def test_iobinding_path_matches_plain_session_run(cache):
    spec = get_model("mlp")
    feed = make_feed(spec, {"batch": 3}, 0)
    with get_runtime("ort-cpu")(spec, Precision.FP32, RuntimeOptions(threads=1, cache=cache)) as plain:
        expected = plain.infer(feed)["logits"]
    with OrtBoundCpu(spec, Precision.FP32, RuntimeOptions(threads=1, cache=cache)) as rt:
        prepared = rt._prepare(feed)
        assert isinstance(prepared, ortmod._Bound)  # inputs copied once, outputs bound
        raw = rt._infer(prepared)
        assert not isinstance(raw["logits"], np.ndarray)  # an OrtValue: no copy inside the timed call
        np.testing.assert_allclose(rt.infer(feed)["logits"], expected, rtol=1e-5, atol=1e-6)
        rt.bind(feed)()
        assert rt.details()["io_binding"] is True


# --------------------------------------------------------------------------------------------- native tensorrt
@pytest.fixture
def trt_runtime(monkeypatch, cache):
    from harness.runtimes import tensorrt as trtmod

    monkeypatch.setattr(trtmod, "onnx_fp32", lambda *a, **k: "fp32.onnx")

    def make(precision: Precision, precision_onnx=None):
        rt = trtmod.TensorRT(get_model("mlp"), precision, RuntimeOptions(threads=1, cache=cache))
        if precision_onnx is not None:
            monkeypatch.setattr(rt, "_precision_onnx", precision_onnx)
        return rt

    return make


def test_tensorrt_10_flags(trt_runtime):
    trt = FakeTrt("10.13.0")
    assert trt_runtime(Precision.FP32)._onnx_and_flags(trt) == ("fp32.onnx", EngineFlags())
    onnx, flags = trt_runtime(Precision.FP16)._onnx_and_flags(trt)
    assert onnx == "fp32.onnx" and flags.fp16 and not flags.strongly_typed
    onnx, flags = trt_runtime(Precision.INT8, lambda p: f"{p.value}.qdq.onnx")._onnx_and_flags(trt)
    assert onnx == "int8.qdq.onnx" and flags.int8 and flags.int8_source == "qdq"


def test_tensorrt_int8_falls_back_to_entropy_calibration_without_a_qdq_pipeline(trt_runtime):
    def no_pipeline(p):
        raise ImportError("cannot import name 'onnx_for_precision'")

    onnx, flags = trt_runtime(Precision.INT8, no_pipeline)._onnx_and_flags(FakeTrt("10.13.0"))
    assert onnx == "fp32.onnx" and flags.int8_source == "entropy"
    with pytest.raises(ImportError):  # TensorRT 11 has no calibrator: the QDQ model is the only way
        trt_runtime(Precision.INT8, no_pipeline)._onnx_and_flags(FakeTrt("11.4.0"))


def test_tensorrt_11_uses_precision_models_strongly_typed(trt_runtime):
    trt = FakeTrt("11.4.0")
    onnx, flags = trt_runtime(Precision.FP16, lambda p: f"{p.value}.onnx")._onnx_and_flags(trt)
    assert onnx == "fp16.onnx" and flags.strongly_typed
    assert trt_runtime(Precision.FP32)._onnx_and_flags(trt)[1].strongly_typed


# --------------------------------------------------------------------------------------------- on a GPU
GPU_CASES = [("torch-cuda", Precision.FP32), ("torch-cuda", Precision.FP16), ("torch-cuda", Precision.BF16),
             ("ort-cuda", Precision.FP32), ("ort-cuda-h2h", Precision.FP32), ("ort-trt", Precision.FP32),
             ("ort-trt", Precision.FP16), ("tensorrt", Precision.FP32), ("tensorrt", Precision.FP16)]


@pytest.mark.slow
@pytest.mark.parametrize("name, precision", GPU_CASES, ids=[f"{n}-{p.value}" for n, p in GPU_CASES])
def test_gpu_runtime_runs_mlp_and_times_on_the_device(name, precision, cache):
    from harness.measure.timer import Timer, TimingPolicy

    cls = get_runtime(name)
    verdict: Availability = cls.availability()
    if not verdict:
        pytest.skip(verdict.reason)
    spec = get_model("mlp")
    opts = RuntimeOptions(threads=1, cache=cache, shapes=({"batch": 1}, {"batch": 4}))
    with get_runtime("torch-cpu")(spec, Precision.FP32, opts) as ref:
        expected = ref.infer(make_feed(spec, {"batch": 4}, 0))["logits"]
    with cls(spec, precision, opts) as rt:
        feed = make_feed(spec, {"batch": 4}, 0)
        out = rt.infer(feed)["logits"]
        tol = 1e-3 if precision is Precision.FP32 else 5e-2
        np.testing.assert_allclose(out, expected, rtol=tol, atol=tol)
        timer = rt.device_timer()
        assert timer is not None
        run = Timer().run(rt.bind(feed), TimingPolicy(warmup_iters=2, warmup_time_s=0, min_iters=5, min_time_s=0),
                          rt.synchronize, device_timer=timer)
        assert len(run.device_samples_ns) == 5 and all(d > 0 for d in run.device_samples_ns)


def test_ort_trt_falls_back_to_cuda_not_cpu(cache):
    providers = _trt_ep(Precision.FP32, cache)._providers()
    assert [p for p, _ in providers] == ["TensorrtExecutionProvider", "CUDAExecutionProvider"]
    assert providers[1][1]["user_compute_stream"] == "1234"


# --------------------------------------------------------------------------------------------- FP32 is IEEE
def test_fp32_on_cuda_is_ieee_not_tf32(cache):
    """TF32 off everywhere FP32 runs on the GPU (the H200 run: TF32 convolutions put resnet18's FP32 at rel_l2
    3.5e-4, over tolerance): torch's legacy allow_tf32 flags (export-safe); the CUDA EP's
    use_tf32 on ort-cuda, ort-cuda-h2h and ort-trt's CUDA fallback."""
    import torch

    from harness.runtimes.torch_cuda import ieee_fp32

    fake = SimpleNamespace(backends=SimpleNamespace(cuda=SimpleNamespace(matmul=SimpleNamespace(allow_tf32=True)),
                                                    cudnn=SimpleNamespace(allow_tf32=True)))
    assert ieee_fp32(fake).startswith("ieee")
    assert fake.backends.cuda.matmul.allow_tf32 is False and fake.backends.cudnn.allow_tf32 is False

    class Double(torch.nn.Module):
        def forward(self, x):
            return x * 2

    ieee_fp32(torch)  # the real flags: torch.export in the same process still works (the fp32_precision API
    torch.export.export(Double(), (torch.ones(2),))  # broke the next case's ONNX export on the H200)
    assert torch.backends.cudnn.allow_tf32 is False
    for name in ("ort-cuda", "ort-cuda-h2h"):
        rt = get_runtime(name)(get_model("mlp"), Precision.FP32, RuntimeOptions(threads=1, cache=cache))
        rt._stream = None
        assert rt._provider_options()["use_tf32"] == "0"
    providers = dict(_trt_ep(Precision.FP32, cache)._providers())
    assert providers["CUDAExecutionProvider"]["use_tf32"] == "0"
    assert dict(get_runtime("ort-cuda").conformance_providers())["CUDAExecutionProvider"]["use_tf32"] == "0"
