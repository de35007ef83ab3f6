"""openvino-cpu: OpenVINO Runtime on the ONNX export, compiled per static shape with a latency/throughput hint."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from harness.artifacts import onnx_fp32
from harness.errors import install_hint
from harness.model import ModelSpec
from harness.precision import Precision
from harness.errors import UnsupportedModelError
from harness.runtimes.base import Availability, Runtime

INSTALL = install_hint("openvino")
# Precision -> (INFERENCE_PRECISION_HINT, the CPU capability it needs). INT8 runs a QDQ graph at f32 hint.
_HINTS: dict[Precision, tuple[str, str]] = {
    Precision.FP32: ("f32", "FP32"), Precision.BF16: ("bf16", "BF16"), Precision.FP16: ("f16", "FP16"),
    Precision.INT8: ("f32", "INT8"),
}


class OpenVinoCpu(Runtime):
    """ov.Core().read_model(ONNX) reshaped to each case's static shape and compiled for "CPU".

    PERFORMANCE_HINT is LATENCY for batch 1 (single-stream) and THROUGHPUT for larger batches (offline),
    INFERENCE_NUM_THREADS the run's thread count, INFERENCE_PRECISION_HINT f32 unless the case asks for
    bf16/fp16 (only where the CPU reports the capability). INT8 compiles the precision step's QDQ ONNX file.
    """

    name: ClassVar[str] = "openvino-cpu"
    requirements: ClassVar[tuple[str, ...]] = ("openvino>=2024.4",)  # the extra `openvino`
    distribution: ClassVar[str | None] = "openvino"
    variant_hooks: ClassVar[frozenset[str]] = frozenset({"onnx-export", "onnx-graph", "int8-recipe"})
    precisions: ClassVar[frozenset[Precision]] = frozenset(_HINTS)
    description: ClassVar[str] = "OpenVINO Runtime, CPU plugin, ONNX frontend, latency/throughput hint"

    @classmethod
    def availability(cls) -> Availability:
        try:
            import openvino as ov
        except ImportError as exc:
            return Availability(False, f"openvino is not importable ({exc}); install it with: {INSTALL}")
        if "CPU" not in ov.Core().available_devices:
            return Availability(False, f"openvino {ov.__version__} has no CPU device")
        return Availability(True)

    conformance_precisions: ClassVar[frozenset[Precision]] = frozenset({Precision.FP32, Precision.FP16})

    @classmethod
    def library_version(cls) -> str | None:
        import openvino as ov

        return str(ov.__version__)

    @classmethod
    def onnx_runner(cls, model: bytes, threads: int) -> Any:
        """The ONNX frontend reads the model (from a temporary file), compiled for "CPU" at f32 precision."""
        import os
        import tempfile

        import openvino as ov

        core = ov.Core()
        fd, path = tempfile.mkstemp(suffix=".onnx")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(model)
            ov_model = core.read_model(path)
        finally:
            os.unlink(path)
        compiled = core.compile_model(ov_model, "CPU", {"INFERENCE_PRECISION_HINT": "f32",
                                                        "INFERENCE_NUM_THREADS": threads})
        request = compiled.create_infer_request()
        ports = list(compiled.outputs)
        inputs = list(compiled.inputs)

        def run(feeds: Mapping[str, Any]) -> list[Any]:
            packed = [f"{k} ({v.dtype})" for k, v in feeds.items() if getattr(v, "dtype", None) is not None
                      and v.dtype.name in _PACKED_4BIT]
            if packed:
                raise UnsupportedModelError(f"OpenVINO's Python API takes 4-bit inputs packed, not as the "
                                            f"unpacked numpy arrays ONNX's cases hold: {', '.join(packed)}")
            result = request.infer(_by_port(inputs, feeds))
            return [np.array(result[p]) for p in ports]
        return run

    @classmethod
    def supports(cls, model: ModelSpec, precision: Precision) -> Availability:
        verdict = super().supports(model, precision)
        if not verdict:
            return verdict
        precision = Precision(precision)
        capability = _HINTS[precision][1]
        if precision is not Precision.FP32:
            caps = _cpu_capabilities()
            if caps is not None and capability not in caps:
                return Availability(False, f"openvino-cpu {precision}: this CPU's OPTIMIZATION_CAPABILITIES "
                                           f"lack {capability} ({', '.join(caps)})")
        return Availability(True)

    def _activate(self) -> None:
        import openvino as ov

        self._ov = ov
        self._core = ov.Core()
        if self.precision is Precision.INT8:
            from harness.artifacts import onnx_for_precision

            self._onnx = onnx_for_precision(self.model, Precision.INT8, self.options)
        else:
            self._onnx = onnx_fp32(self.model, self.options)
        self.artifact = self._onnx
        if self.precision is Precision.INT8:
            self.recipe = f"{self._onnx.meta.get('recipe', 'int8: QDQ ONNX')} (compiled by OpenVINO CPU)"
        elif self.precision is not Precision.FP32:
            self.recipe = (f"{self.precision}: OpenVINO CPU INFERENCE_PRECISION_HINT={_HINTS[self.precision][0]} "
                           "over the FP32 ONNX")
        self._ov_model = self._core.read_model(str(self._onnx.path))
        self._compiled: Any = None
        self._hint = ""

    def _setup_shape(self, feed: Mapping[str, np.ndarray]) -> None:
        import openvino.properties as props
        import openvino.properties.hint as hints

        self._compiled = self._request = None
        self._ov_model.reshape({name: list(np.shape(arr)) for name, arr in feed.items()
                                if name in {t.name for t in self.model.inputs}})
        first = np.shape(feed[self.model.inputs[0].name])
        batch = int(first[0]) if first else 1
        mode = hints.PerformanceMode.LATENCY if batch == 1 else hints.PerformanceMode.THROUGHPUT
        config = {hints.performance_mode: mode, props.inference_num_threads: self.options.threads,
                  hints.inference_precision: _ov_type(self._ov, _HINTS[self.precision][0])}
        self._compiled = self._core.compile_model(self._ov_model, "CPU", config)
        self._request = self._compiled.create_infer_request()
        self._output_names = [_port_name(p, i, self.model.outputs) for i, p in enumerate(self._compiled.outputs)]
        self._hint = mode.name
        self._ports = list(self._compiled.outputs)
        self._streams = int(self._compiled.get_property("NUM_STREAMS"))
        self._precision_used = self._compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name()

    def _infer(self, prepared: Mapping[str, Any]) -> Mapping[str, Any]:
        result = self._request.infer(prepared)
        return {name: result[port] for name, port in zip(self._output_names, self._ports)}

    def _deactivate(self) -> None:
        self._compiled = self._request = self._ov_model = None

    def details(self) -> dict[str, Any]:
        out = {**super().details(), "performance_hint": getattr(self, "_hint", None) or None,
               "num_streams": getattr(self, "_streams", None),
               "inference_precision": getattr(self, "_precision_used", None)}
        if getattr(self, "_onnx", None) is not None and "recipe" in self._onnx.meta:
            out["onnx_recipe"] = self._onnx.meta["recipe"]  # what the precision step built (int8: QDQ ...)
        if hasattr(self, "_ov"):
            out["openvino"] = self._ov.__version__
        return out


_PACKED_4BIT = ("int4", "uint4", "float4_e2m1fn")


def _by_port(inputs: list[Any], feeds: Mapping[str, Any]) -> dict[int, Any]:
    """Feeds keyed by input index: by tensor name where a port has it, else by position. OpenVINO may drop a
    model input it folded away (CastLike's `like`) or move a name that also names an output (Identity)."""
    names = list(feeds)
    out: dict[int, Any] = {}
    for i, port in enumerate(inputs):
        found = next((n for n in names if n in port.get_names()), None)
        if found is None and len(inputs) == len(names):
            found = names[i]
        if found is not None:
            out[i] = feeds[found]
    return out


def _cpu_capabilities() -> list[str] | None:
    try:
        import openvino as ov

        return [str(c) for c in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")]
    except Exception:  # noqa: BLE001 - unknown capabilities: let compile_model decide
        return None


def _ov_type(ov: Any, name: str) -> Any:
    return {"f32": ov.Type.f32, "bf16": ov.Type.bf16, "f16": ov.Type.f16}[name]


def _port_name(port: Any, index: int, declared: tuple[str, ...]) -> str:
    """The model's declared output name for a compiled output port (by name where it matches, else order)."""
    names = port.get_names()
    for n in declared:
        if n in names:
            return n
    return declared[index] if index < len(declared) else port.get_any_name()
