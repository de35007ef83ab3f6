"""CUDA-device execution providers (CUDA, TensorRT) on a CUDA stream the harness owns, IOBinding keeping feeds
on the device."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from harness.errors import ModelError
from harness.measure.cuda import (
    DEVICE_RESIDENT,
    HOST_TO_HOST,
    CudaEventTimer,
    nvidia_driver_reason,
    torch_cuda_reason,
)
from harness.precision import Precision
from harness.runtimes.base import Availability
from harness.runtimes.onnxruntime.providers import OrtAccelerator, _captured_output, preload_cuda_libraries


@dataclass
class _Bound:
    """One feed resident on the device: its IOBinding (inputs copied, outputs bound to device memory)."""

    binding: Any
    values: tuple[Any, ...]


class OrtCudaBase(OrtAccelerator):
    """CUDA-device EPs (CUDA, TensorRT) on cuda:0, on a CUDA stream the harness owns.

    The session computes on a torch-created stream (`user_compute_stream`) so that CUDA events recorded on it
    bracket exactly the model's kernels. With `io_binding`, `_prepare` copies the inputs to the device once
    (outside the timed loop) and binds the outputs to device memory: a timed call is the model only.
    """

    distribution: ClassVar[str | None] = "onnxruntime-gpu"
    device: ClassVar[str] = "cuda"
    ort_device: ClassVar[str] = "cuda"  # OrtValue / IOBinding device type of the bound inputs and outputs
    io_binding: ClassVar[bool] = True
    timing_scope: ClassVar[str] = DEVICE_RESIDENT
    warmup_floor_s: ClassVar[float] = 1.0
    memory_sources: ClassVar[frozenset[str]] = frozenset({"nvml"})
    decodes: ClassVar[bool] = True
    variant_hooks: ClassVar[frozenset[str]] = frozenset({"onnx-export", "onnx-graph", "int8-recipe", "ort-session",
                                                         "fixed-axes"})
    generation_io_device: ClassVar[str] = "cuda"

    @classmethod
    def availability(cls) -> Availability:
        verdict = super().availability()
        driver = nvidia_driver_reason()
        if not verdict and driver:
            return Availability(False, f"{verdict.reason}; {driver}")
        return verdict

    def _activate(self) -> None:
        self._torch: Any = None
        self._stream: Any = None
        if torch_cuda_reason() is None:  # torch's CUDA gives us a stream and events; ORT runs without it too
            import torch

            self._torch = torch
            self._stream = torch.cuda.Stream()
        with _captured_output():
            preload_cuda_libraries()
        t0 = time.perf_counter()
        super()._activate()
        self._session_s = time.perf_counter() - t0

    def _provider_options(self) -> dict[str, Any]:
        opts = {**super()._provider_options(), "device_id": "0"}
        if self._stream is not None:
            opts["user_compute_stream"] = str(self._stream.cuda_stream)
        return opts

    def _generation_providers(self) -> list[tuple[str, dict[str, Any]]]:
        return [(self.provider, {**self.provider_options, "device_id": "0"})]

    def _prepare(self, feed: Mapping[str, np.ndarray]) -> Any:
        host = super()._prepare(feed)
        if not self.io_binding:
            return host
        import onnxruntime as ort

        binding = self._session.io_binding()
        values = []
        for name, arr in host.items():
            value = ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(arr), self.ort_device, 0)
            binding.bind_ortvalue_input(name, value)
            values.append(value)
        for name in self._output_names:
            binding.bind_output(name, self.ort_device, 0)
        binding.synchronize_inputs()
        return _Bound(binding, tuple(values))

    def _infer(self, prepared: Any) -> Mapping[str, Any]:
        if not isinstance(prepared, _Bound):
            return super()._infer(prepared)
        self._session.run_with_iobinding(prepared.binding)
        return dict(zip(self._output_names, prepared.binding.get_outputs()))

    def _to_numpy(self, value: Any) -> np.ndarray:
        if hasattr(value, "numpy") and not isinstance(value, np.ndarray):
            return np.asarray(value.numpy())  # an OrtValue in device memory: copied to the host here
        return np.asarray(value)

    def synchronize(self) -> None:
        if self._stream is not None:
            self._stream.synchronize()

    def device_timer(self) -> Any:
        return CudaEventTimer(self._stream, self._torch) if self._stream is not None else None

    def details(self) -> dict[str, Any]:
        return {**super().details(), "io_binding": self.io_binding,
                "user_compute_stream": getattr(self, "_stream", None) is not None}


# FP32 is IEEE FP32: the CUDA EP's TF32 GEMMs/convolutions off (see torch_cuda.ieee_fp32 for the measurement).
CUDA_EP_OPTIONS: dict[str, Any] = {"use_tf32": "0"}


class OrtCuda(OrtCudaBase):
    name: ClassVar[str] = "ort-cuda"
    provider: ClassVar[str] = "CUDAExecutionProvider"
    provider_options: ClassVar[dict[str, Any]] = CUDA_EP_OPTIONS
    description: ClassVar[str] = "ONNX Runtime, CUDAExecutionProvider, IOBinding: inputs/outputs on the device"


class OrtCudaH2H(OrtCudaBase):
    name: ClassVar[str] = "ort-cuda-h2h"
    provider: ClassVar[str] = "CUDAExecutionProvider"
    provider_options: ClassVar[dict[str, Any]] = CUDA_EP_OPTIONS
    io_binding: ClassVar[bool] = False
    timing_scope: ClassVar[str] = HOST_TO_HOST
    description: ClassVar[str] = "ONNX Runtime, CUDAExecutionProvider, numpy in and out: copies timed"


class OrtTrt(OrtCudaBase):
    """TensorRT EP: FP16/INT8 flags by precision, engine cache under the harness cache, build time apart.

    The optimisation profile covers the run's shapes (min/max over them, opt = the largest), so the engine
    is built at session creation, not in the first timed call. INT8 needs a QDQ model (explicit quantization).
    """

    decodes: ClassVar[bool] = False  # a KV cache growing every step would need a profile over its length

    reactivate_between_repeats: ClassVar[bool] = False  # activation is a compile/build: keep it
    name: ClassVar[str] = "ort-trt"
    provider: ClassVar[str] = "TensorrtExecutionProvider"
    precisions: ClassVar[frozenset[Precision]] = frozenset({Precision.FP32, Precision.FP16, Precision.INT8})
    description: ClassVar[str] = "ONNX Runtime, TensorrtExecutionProvider, engine cache, IOBinding"

    @property
    def engine_cache_dir(self) -> Path:
        return self.options.cache.root / "trt-ep"

    def _provider_options(self) -> dict[str, Any]:
        from harness.artifacts.trt_engine import profile_ranges

        cache = self.engine_cache_dir
        cache.mkdir(parents=True, exist_ok=True)
        opts = {**super()._provider_options(),
                "trt_fp16_enable": str(self.precision is Precision.FP16),
                "trt_int8_enable": str(self.precision is Precision.INT8),
                "trt_engine_cache_enable": "True", "trt_engine_cache_path": str(cache),
                "trt_timing_cache_enable": "True", "trt_timing_cache_path": str(cache)}
        ranges = profile_ranges(self.model, self.options.shapes)
        for i, key in enumerate(("trt_profile_min_shapes", "trt_profile_opt_shapes", "trt_profile_max_shapes")):
            opts[key] = ",".join(f"{name}:{'x'.join(map(str, r[i]))}" for name, r in ranges.items())
        return opts

    @classmethod
    def conformance_providers(cls) -> list[tuple[str, dict[str, Any]]]:
        return [(cls.provider, {"device_id": "0"}), ("CUDAExecutionProvider", {"device_id": "0", **CUDA_EP_OPTIONS})]

    def _providers(self) -> list[tuple[str, dict[str, Any]]]:
        """TensorRT first; nodes TensorRT cannot take run on CUDA (not CPU), as ONNX Runtime recommends."""
        cuda = {"device_id": "0", **CUDA_EP_OPTIONS}
        if self._stream is not None:
            cuda["user_compute_stream"] = str(self._stream.cuda_stream)
        return [*super()._providers(), ("CUDAExecutionProvider", cuda)]

    def _activate(self) -> None:
        before = set(self.engine_cache_dir.glob("*.engine")) if self.engine_cache_dir.is_dir() else set()
        super()._activate()
        built = set(self.engine_cache_dir.glob("*.engine")) - before
        self._engine_built = bool(built)
        if self.precision is Precision.INT8 and not _has_qdq(self.artifact.path):
            raise ModelError(f"{self.artifact.path}: ort-trt int8 needs a QDQ (QuantizeLinear/DequantizeLinear) "
                             f"model; this ONNX file has none")

    def details(self) -> dict[str, Any]:
        out = super().details()
        if hasattr(self, "_engine_built"):
            opts = self._provider_options()
            out.update({"trt_engine_cache": str(self.engine_cache_dir), "trt_engine_built": self._engine_built,
                        # session creation, which builds the engine on a cache miss: apart from inference
                        "trt_engine_build_s": round(self._session_s, 3) if self._engine_built else 0.0,
                        "trt_fp16_enable": opts["trt_fp16_enable"], "trt_int8_enable": opts["trt_int8_enable"],
                        "trt_profile": {k: opts[k] for k in opts if k.startswith("trt_profile_")}})
        return out


def _has_qdq(path: Path) -> bool:
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    return any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in model.graph.node)


