"""tensorrt: native TensorRT (Python API): ONNX -> cached engine -> execute_async_v3 on a CUDA stream."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from harness.artifacts import onnx_fp32
from harness.artifacts.trt_engine import EngineFlags, TrtEngineFromOnnx, exact_profiles, profile_ranges
from harness.errors import ModelError, install_hint
from harness.measure.cuda import DEVICE_RESIDENT, CudaEventTimer, torch_cuda_reason
from harness.precision import Precision
from harness.runtimes.base import Availability, Runtime

INSTALL = install_hint("tensorrt")
MAX_EXACT_PROFILES = 8  # up to this many run shapes get one exact profile each; beyond, one range profile
CALIBRATION_BATCHES = 16  # seeded calibration feeds when the model defines none

_TORCH_DTYPES = {"FLOAT": "float32", "HALF": "float16", "BF16": "bfloat16", "INT8": "int8", "INT32": "int32",
                 "INT64": "int64", "BOOL": "bool", "UINT8": "uint8"}


@dataclass
class _Prepared:
    """One feed on the device: the profile serving its shape, input and output buffers (torch CUDA tensors)."""

    profile: int
    inputs: dict[str, Any]
    outputs: dict[str, Any]


class TensorRT(Runtime):
    """A TensorRT engine built from the model's ONNX export, executed with device buffers on our stream.

    Precisions: FP32; FP16 (builder flag on TensorRT 10, the FP16 ONNX model on TensorRT 11, which removed the
    flag); INT8 from the precision pipeline's QDQ model (`int8_source = "qdq"`, explicit quantization), or an
    IInt8EntropyCalibrator2 fed by the model's calibration feeds (`"entropy"`, TensorRT 10 only, also used
    when no QDQ model can be had). Optimisation profiles: one exact profile per run shape (up to
    MAX_EXACT_PROFILES), else one profile over the run's range. The engine is a cached artifact
    (TrtEngineFromOnnx): its build time is `artifact_build_s`, part of `setup_s` only on a cache miss.
    """

    reactivate_between_repeats: ClassVar[bool] = False  # activation is a compile/build: keep it
    module: ClassVar[str | None] = "tensorrt"
    name: ClassVar[str] = "tensorrt"
    requirements: ClassVar[tuple[str, ...]] = ("tensorrt>=10.1",)  # the extra `tensorrt`
    install: ClassVar[str] = INSTALL
    distribution: ClassVar[str | None] = "tensorrt"
    variant_hooks: ClassVar[frozenset[str]] = frozenset({"onnx-export", "onnx-graph"})
    device: ClassVar[str] = "cuda"
    precisions: ClassVar[frozenset[Precision]] = frozenset({Precision.FP32, Precision.FP16, Precision.INT8})
    timing_scope: ClassVar[str] = DEVICE_RESIDENT
    description: ClassVar[str] = "TensorRT engine from the ONNX export, execute_async_v3, device buffers"
    warmup_floor_s: ClassVar[float] = 1.0
    memory_sources: ClassVar[frozenset[str]] = frozenset({"nvml", "torch"})
    int8_source: ClassVar[str] = "qdq"

    @classmethod
    def device_check(cls) -> Availability:
        reason = torch_cuda_reason()
        return Availability(False, f"CUDA not available: {reason}") if reason else Availability(True)

    # ------------------------------------------------------------------ build
    def _activate(self) -> None:
        import tensorrt as trt
        import torch

        self._trt, self._torch = trt, torch
        self._stream = torch.cuda.Stream()
        onnx_artifact, flags = self._onnx_and_flags(trt)
        shapes = tuple(self.options.shapes)
        exact = exact_profiles(self.model, shapes) if shapes else []
        self._profiles = exact if 0 < len(exact) <= MAX_EXACT_PROFILES else [profile_ranges(self.model, shapes)]
        step = TrtEngineFromOnnx(onnx_artifact, self.options.cache, flags, tuple(self._profiles),
                                 label=f"{self.model.name}-{self.precision.value}",
                                 calibration=self._calibration_feeds if flags.int8_source == "entropy" else None)
        self._flags = flags
        self.artifact = step()
        self._logger = trt.Logger(trt.Logger.WARNING)
        self._runtime = trt.Runtime(self._logger)
        self._engine = self._runtime.deserialize_cuda_engine(self.artifact.path.read_bytes())
        if self._engine is None:
            raise ModelError(f"{self.artifact.path}: TensorRT could not deserialize the cached engine "
                             f"(delete the folder to rebuild it)")
        self._context = self._engine.create_execution_context()
        names = [self._engine.get_tensor_name(i) for i in range(self._engine.num_io_tensors)]
        is_input = {n: self._engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT for n in names}
        self._input_names = [n for n in names if is_input[n]]
        self._output_names = [n for n in names if not is_input[n]]
        self._current: _Prepared | None = None
        self._profile = 0  # a fresh context uses profile 0

    def _onnx_and_flags(self, trt: Any) -> tuple[Any, EngineFlags]:
        """The ONNX model to parse and the builder flags for this precision and TensorRT version."""
        fp32 = onnx_fp32(self.model, self.options)
        has_flag = hasattr(trt.BuilderFlag, "FP16")  # removed in TensorRT 11 (strong typing only)
        if self.precision is Precision.FP32:
            return fp32, EngineFlags(strongly_typed=not has_flag)
        if self.precision is Precision.FP16:
            if has_flag:
                return fp32, EngineFlags(fp16=True)
            return self._precision_onnx(Precision.FP16), EngineFlags(fp16=True, strongly_typed=True)
        if self.int8_source == "qdq":
            try:
                return self._precision_onnx(Precision.INT8), EngineFlags(int8=True, int8_source="qdq",
                                                                         strongly_typed=not has_flag)
            except ImportError:
                if not hasattr(trt, "IInt8EntropyCalibrator2"):
                    raise
                # no QDQ pipeline in this install: calibrate the FP32 model instead (recorded in details)
        return fp32, EngineFlags(int8=True, int8_source="entropy")

    def _precision_onnx(self, precision: Precision) -> Any:
        from harness.artifacts import onnx_for_precision  # the precision pipeline's FP16 / QDQ ONNX artifacts

        return onnx_for_precision(self.model, precision, self.options)

    def _calibration_feeds(self) -> Iterable[Mapping[str, np.ndarray]]:
        """The model's calibration feeds, else seeded feeds at the run's smallest shape."""
        if self.model.calibration is not None:
            return [dict(f) for f in self.model.calibration()]
        from harness.data import make_feed

        lo = {d: r[0] for d, r in _dim_bounds(self._profiles[0], self.model).items()}
        return [make_feed(self.model, lo, seed=10_000 + i) for i in range(CALIBRATION_BATCHES)]

    # ------------------------------------------------------------------ run
    def _prepare(self, feed: Mapping[str, np.ndarray]) -> _Prepared:
        torch = self._torch
        shapes = {n: tuple(feed[n].shape) for n in self._input_names}
        profile = self._profile_for(shapes)
        ctx = self._context
        self._use_profile(profile)
        inputs = {}
        for n in self._input_names:
            dtype = getattr(torch, _TORCH_DTYPES[self._engine.get_tensor_dtype(n).name])
            inputs[n] = torch.from_numpy(np.ascontiguousarray(feed[n])).to("cuda").to(dtype).contiguous()
            ctx.set_input_shape(n, shapes[n])
        outputs = {}
        for n in self._output_names:
            dtype = getattr(torch, _TORCH_DTYPES[self._engine.get_tensor_dtype(n).name])
            outputs[n] = torch.empty(tuple(ctx.get_tensor_shape(n)), dtype=dtype, device="cuda")
        torch.cuda.synchronize()  # copies done before any clock starts
        prepared = _Prepared(profile, inputs, outputs)
        self._bind(prepared)
        return prepared

    def _profile_for(self, shapes: Mapping[str, tuple[int, ...]]) -> int:
        for i, ranges in enumerate(self._profiles):
            if all(n not in ranges or _within(shapes[n], ranges[n]) for n in shapes):
                return i
        raise ModelError(f"tensorrt: input shapes {dict(shapes)} are outside the engine's optimisation profiles "
                         f"{self._profiles}: the run's shapes decide the profiles at activation")

    def _use_profile(self, profile: int) -> None:
        if self._profile != profile:
            self._context.set_optimization_profile_async(profile, self._stream.cuda_stream)
            self._profile = profile

    def _bind(self, prepared: _Prepared) -> None:
        ctx = self._context
        self._use_profile(prepared.profile)
        for n, t in prepared.inputs.items():
            ctx.set_input_shape(n, tuple(t.shape))
            ctx.set_tensor_address(n, int(t.data_ptr()))
        for n, t in prepared.outputs.items():
            ctx.set_tensor_address(n, int(t.data_ptr()))
        self._current = prepared

    def _infer(self, prepared: _Prepared) -> Mapping[str, Any]:
        if prepared is not self._current:
            self._bind(prepared)
        if not self._context.execute_async_v3(self._stream.cuda_stream):
            raise RuntimeError("tensorrt: execute_async_v3 returned False (see the TensorRT log)")
        return prepared.outputs

    def _to_numpy(self, value: Any) -> np.ndarray:
        return value.detach().float().cpu().numpy()

    def synchronize(self) -> None:
        self._stream.synchronize()

    def device_timer(self) -> CudaEventTimer:
        return CudaEventTimer(self._stream, self._torch)

    def _deactivate(self) -> None:
        self._current = None
        self._context = self._engine = self._runtime = None
        self._torch.cuda.empty_cache()

    def details(self) -> dict[str, Any]:
        out = super().details()
        if hasattr(self, "_flags"):
            engine = self._engine
            mem = getattr(engine, "device_memory_size_v2", None) or getattr(engine, "device_memory_size", None)
            out.update({"tensorrt": self._trt.__version__, "flags": self._flags.as_dict(),
                        "profiles": len(self._profiles), "engine_build_s": out.get("artifact_build_s"),
                        "engine_device_memory_mb": round(mem / 2**20, 2) if mem else None})
        return out


def _within(shape: tuple[int, ...], rng: tuple[tuple[int, ...], ...]) -> bool:
    lo, _, hi = rng
    return len(shape) == len(lo) and all(a <= s <= b for s, a, b in zip(shape, lo, hi))


def _dim_bounds(ranges: Mapping[str, tuple[tuple[int, ...], ...]], model: Any) -> dict[str, tuple[int, int]]:
    """Symbolic dim -> (min, max) read back from a profile."""
    out: dict[str, tuple[int, int]] = {}
    for t in model.inputs:
        if t.name not in ranges:
            continue
        lo, _, hi = ranges[t.name]
        for i, d in enumerate(t.shape):
            if isinstance(d, str):
                out[d] = (lo[i], hi[i])
    return out
