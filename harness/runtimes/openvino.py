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
    module: ClassVar[str | None] = "openvino"
    requirements: ClassVar[tuple[str, ...]] = ("openvino>=2024.4",)  # the extra `openvino`
    install: ClassVar[str] = INSTALL
    distribution: ClassVar[str | None] = "openvino"
    variant_hooks: ClassVar[frozenset[str]] = frozenset({"onnx-export", "onnx-graph", "int8-recipe"})
    precisions: ClassVar[frozenset[Precision]] = frozenset(_HINTS)
    description: ClassVar[str] = "OpenVINO Runtime, CPU plugin, ONNX frontend, latency/throughput hint"

    @classmethod
    def device_check(cls) -> Availability:
        import openvino as ov

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
        import openvino.properties.hint as hints

        self._compiled = self._request = None
        self._ov_model.reshape({name: list(np.shape(arr)) for name, arr in feed.items()
                                if name in {t.name for t in self.model.inputs}})
        first = np.shape(feed[self.model.inputs[0].name])
        batch = int(first[0]) if first else 1
        mode = hints.PerformanceMode.LATENCY if batch == 1 else hints.PerformanceMode.THROUGHPUT
        self._mode = mode
        self._compiled = self._core.compile_model(self._ov_model, "CPU", self._compile_config())
        self._request = self._compiled.create_infer_request()
        self._output_names = [_port_name(p, i, self.model.outputs) for i, p in enumerate(self._compiled.outputs)]
        self._hint = mode.name
        self._ports = list(self._compiled.outputs)
        self._streams = int(self._compiled.get_property("NUM_STREAMS"))
        self._precision_used = self._compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name()

    def _compile_config(self) -> dict[Any, Any]:
        import openvino.properties as props
        import openvino.properties.hint as hints

        return {hints.performance_mode: self._mode, props.inference_num_threads: self.options.threads,
                hints.inference_precision: _ov_type(self._ov, _HINTS[self.precision][0])}

    def _infer(self, prepared: Mapping[str, Any]) -> Mapping[str, Any]:
        result = self._request.infer(prepared)
        return {name: result[port] for name, port in zip(self._output_names, self._ports)}

    def _deactivate(self) -> None:
        self._compiled = self._request = self._ov_model = None

    def _profile(self, feed: Mapping[str, np.ndarray], runs: int) -> Any:
        """A second compile of the same model and config with PERF_COUNT on (the timed one never counts): one
        warm-up inference, then `runs`, each one's get_profiling_info() summed per executed node; each node is
        mapped onto the ONNX nodes named by its runtime-model `originalLayersNames` (openvino_profile_ops)."""
        import time

        import openvino.properties as props

        from harness.profile.layers import OpProfile

        config = {**self._compile_config(), props.enable_profiling: True}
        compiled = self._core.compile_model(self._ov_model, "CPU", config)
        request = compiled.create_infer_request()
        request.infer(feed)  # first-inference work, not counted
        counts: dict[str, list[Any]] = {}
        t0 = time.perf_counter_ns()
        for _ in range(runs):
            request.infer(feed)
            for info in request.get_profiling_info():
                row = counts.setdefault(info.node_name, [info.node_type, info.exec_type, 0.0])
                row[2] += info.real_time.total_seconds() * 1e6
        wall_us = (time.perf_counter_ns() - t0) / 1e3 / runs
        runtime_ops = compiled.get_runtime_model().get_ordered_ops()
        original = {op.get_friendly_name(): _rt(op, "originalLayersNames") for op in runtime_ops}
        consumers = {op.get_friendly_name(): [i.get_node().get_friendly_name() for out in op.outputs()
                                              for i in out.get_target_inputs()] for op in runtime_ops}
        producers = {op.get_friendly_name(): [i.get_source_output().get_node().get_friendly_name()
                                              for i in op.inputs()] for op in runtime_ops}
        ops = openvino_profile_ops({k: (v[0], v[1], v[2] / runs) for k, v in counts.items()}, original,
                                   self._onnx.path, consumers, producers)
        return OpProfile(ops=ops, runs=runs, wall_us=wall_us, graph=self._onnx.path,
                         method=f"openvino {self._ov.__version__} PERF_COUNT on a second compile: "
                                f"get_profiling_info() real_time of {runs} inferences")

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


def _rt(op: Any, key: str) -> str:
    info = op.get_rt_info()
    try:
        return str(info[key].astype(str)) if key in info else ""
    except Exception:  # noqa: BLE001 - an rt_info value of another type
        return str(info[key]) if key in info else ""


def openvino_profile_ops(counts: Mapping[str, tuple[str, str, float]], original: Mapping[str, str],
                         onnx_path: Any, consumers: Mapping[str, list[str]] | None = None,
                         producers: Mapping[str, list[str]] | None = None) -> tuple[Any, ...]:
    """OpenVINO's per-node counts {node_name: (node_type, exec_type, microseconds per inference)} as OpTimes:
    each executed node credited to the ONNX nodes its `originalLayersNames` (`original`, comma-separated) name,
    by node name or output tensor name (SourceGraph.resolve); a node covering several is a fusion named by its
    type and kernel (e.g. "Convolution (brgconv_avx2_FP32)"). Nodes that did not run (0 us, e.g. inputs and
    constants) are left out. A node whose names match no ONNX node is a piece of an ONNX node OpenVINO's frontend
    decomposed (LayerNormalization -> MVN + scale and shift): it is credited to the ONNX nodes between what its
    nearest mapped producers compute and what its nearest mapped consumer reads (`producers`, `consumers`:
    runtime-model node -> the nodes it reads / that read it), else to that consumer's nodes, the decomposition
    named; a Reorder or Convert OpenVINO added stays unmapped."""
    from harness.profile.layers import OpTime, SourceGraph

    graph = SourceGraph.from_model(onnx_path)

    def own(name: str) -> tuple[str, ...]:
        names = [n.strip() for n in (original.get(name) or name).split(",") if n.strip()]
        return tuple(dict.fromkeys(r for r in (graph.resolve(n) for n in names) if r is not None))

    def nearest(name: str, edges: Mapping[str, list[str]] | None) -> tuple[str, ...]:
        todo, seen = list((edges or {}).get(name, ())), {name}
        while todo and len(seen) < 8:
            nxt = todo.pop(0)
            if nxt in seen:
                continue
            seen.add(nxt)
            found = own(nxt)
            if found:
                return found
            todo += (edges or {}).get(nxt, ())
        return ()

    def decomposed(name: str) -> tuple[str, ...]:
        after = nearest(name, consumers)
        if not after:
            return ()
        before = nearest(name, producers)
        computed = {t for n in before for t in graph.outputs[n]}
        read = [t for n in after for t in graph.inputs[n] if t in graph.producer and graph.producer[t] not in after]
        between = graph.between(computed, read, set()) if computed and read else ()
        return between if 0 < len(between) <= 4 and not set(between) & set(before) else after

    out = []
    for name, (node_type, exec_type, us) in counts.items():
        if us <= 0:
            continue
        covers, fusion = own(name), ""
        if len(covers) > 1:
            fusion = f"{node_type} ({exec_type})"
        if not covers and node_type not in ADDED_BY_OPENVINO:
            covers = decomposed(name)
            fusion = f"{node_type} (decomposed)" if covers else ""
        out.append(OpTime(name, node_type, us, covers, fusion))
    return tuple(out)


ADDED_BY_OPENVINO = frozenset({"Reorder", "Convert", "Transpose", "Reshape"})  # layout and precision: unmapped


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
