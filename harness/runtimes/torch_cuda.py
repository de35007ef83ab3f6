"""torch-cuda: PyTorch eager on a CUDA GPU (FP32, FP16 via module.half(), BF16), inputs on the device."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from harness.measure.cuda import DEVICE_RESIDENT, CudaEventTimer, torch_cuda_reason
from harness.model import ModelSpec
from harness.precision import Precision
from harness.runtimes.base import Availability
from harness.runtimes.torch_eager import TorchEager

_DTYPES = {Precision.FP32: "float32", Precision.FP16: "float16", Precision.BF16: "bfloat16"}


def ieee_fp32(torch: Any) -> str:
    """FP32 means IEEE FP32 on the GPU too: TF32 off for cuBLAS matmuls and cuDNN convolutions.

    PyTorch lets cuDNN use TF32 (10-bit mantissa) for FP32 convolutions by default on Ampere and later, and
    onnxruntime's CUDA EP does the same for its GEMMs and convolutions (`use_tf32`): on an H200 that put
    resnet18's FP32 outputs at rel_l2 3.5e-4 from the CPU reference, over the FP32 tolerance (1e-4); with TF32
    off, 7.3e-7. TF32 is a precision choice of its own, not FP32.

    Through the legacy allow_tf32 flags, not the fp32_precision API of torch >= 2.9: torch.export (the ONNX
    export of a later ort-* case in the same worker) reads the legacy cuDNN flag, and once the new API has set
    cuDNN's conv precision that read raises ("a mix of the legacy and new APIs"); measured with torch 2.13.
    Returns the setting, for the case's details.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the legacy setters are deprecated in favour of fp32_precision
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    return "ieee (TF32 off: cuda.matmul.allow_tf32 and cudnn.allow_tf32 False)"


class TorchCuda(TorchEager):
    """Eager PyTorch on cuda:0 under inference mode.

    Inputs are copied to the device once, outside the timed loop (`_prepare`); floating-point inputs are cast
    to the precision's dtype. A timed call launches the module on the current stream and waits for it
    (`torch.cuda.synchronize()`); outputs stay on the device (copied back only for the accuracy check).
    """

    name: ClassVar[str] = "torch-cuda"
    device: ClassVar[str] = "cuda"
    torch_device: ClassVar[str] = "cuda"
    precisions: ClassVar[frozenset[Precision]] = frozenset({Precision.FP32, Precision.FP16, Precision.BF16})
    timing_scope: ClassVar[str] = DEVICE_RESIDENT
    description: ClassVar[str] = "PyTorch eager on CUDA, torch.inference_mode(), inputs on the device"
    warmup_floor_s: ClassVar[float] = 1.0
    memory_sources: ClassVar[frozenset[str]] = frozenset({"nvml", "torch"})

    @classmethod
    def availability(cls) -> Availability:
        reason = torch_cuda_reason()
        return Availability(False, f"CUDA not available: {reason}") if reason else Availability(True)

    @classmethod
    def supports(cls, model: ModelSpec, precision: Precision) -> Availability:
        if Precision(precision) is Precision.INT8:
            return Availability(False, "torch-cuda does not run int8: eager PyTorch has no INT8 CUDA kernels for "
                                       "a float module (its quantized backends are CPU-only); INT8 on the GPU "
                                       "is measured by tensorrt and ort-trt")
        return super().supports(model, precision)

    def _activate(self) -> None:
        import torch

        self._fp32_math = ieee_fp32(torch)
        super()._activate()
        self._dtype = getattr(self._torch, _DTYPES[self.precision])
        self._autocast = contextlib.nullcontext  # the module itself is cast: no autocast on the GPU path
        if self.precision is Precision.FP16:
            self._module = self._module.half()
            self.recipe = "fp16: module.half(), floating-point inputs cast to float16"
        elif self.precision is Precision.BF16:
            self._module = self._module.to(self._dtype)
            self.recipe = "bf16: module.to(torch.bfloat16), floating-point inputs cast to bfloat16"
        self._stream = self._torch.cuda.current_stream()
        self._torch.cuda.synchronize()

    def _prepare(self, feed: Mapping[str, np.ndarray]) -> dict[str, Any]:
        out = super()._prepare(feed)
        for k, v in out.items():
            if v.is_floating_point() and v.dtype != self._dtype:
                out[k] = v.to(self._dtype)
        self._torch.cuda.synchronize()  # the copies are done before any clock starts
        return out

    def synchronize(self) -> None:
        self._torch.cuda.synchronize()

    def device_timer(self) -> CudaEventTimer:
        return CudaEventTimer(self._stream, self._torch)

    def _deactivate(self) -> None:
        super()._deactivate()
        self._torch.cuda.empty_cache()  # the next case's memory figures start from a released pool

    def details(self) -> dict[str, Any]:
        out = super().details()
        if hasattr(self, "_torch"):
            cuda = self._torch.cuda
            out.update({"gpu": cuda.get_device_name(), "cuda": self._torch.version.cuda,
                        "dtype": _DTYPES[self.precision], "fp32_math": getattr(self, "_fp32_math", None)})
        return out
