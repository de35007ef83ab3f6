"""ONNX Runtime: one adapter (session.py), the execution provider chosen by the registered subclass (cpu.py,
cuda.py, providers.py); profiler events mapped onto the graph (profile.py)."""

from harness.runtimes.onnxruntime.cpu import OrtCpu
from harness.runtimes.onnxruntime.cuda import (
    CUDA_EP_OPTIONS,
    OrtCuda,
    OrtCudaBase,
    OrtCudaH2H,
    OrtTrt,
    _Bound,
    _has_qdq,
)
from harness.runtimes.onnxruntime.profile import LAYOUT_OPS, ort_profile_ops
from harness.runtimes.onnxruntime.providers import (
    _PROBES,
    OrtAccelerator,
    OrtCann,
    OrtOpenVino,
    OrtRocm,
    fallback_reason,
    preload_cuda_libraries,
    probe_provider,
)
from harness.runtimes.onnxruntime.session import SESSION_KNOBS, SPIN_ENTRY, OnnxRuntime

__all__ = ["CUDA_EP_OPTIONS", "LAYOUT_OPS", "SESSION_KNOBS", "SPIN_ENTRY", "OnnxRuntime", "OrtAccelerator",
           "OrtCann", "OrtCpu", "OrtCuda", "OrtCudaBase", "OrtCudaH2H", "OrtOpenVino", "OrtRocm", "OrtTrt",
           "_Bound", "_PROBES", "_has_qdq", "fallback_reason", "ort_profile_ops", "preload_cuda_libraries",
           "probe_provider"]
