"""ONNX Runtime: one adapter, the execution provider chosen by the registered subclass."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from harness.artifacts import onnx_for_precision, onnx_fp32
from harness.precision import Precision
from harness.runtimes.base import Availability, Runtime


class OnnxRuntime(Runtime):
    """InferenceSession with full graph optimisation and the run's intra-op thread count.

    Precisions (every EP subclass inherits them): fp32 runs the FP32 export; fp16 and int8 run the files
    onnx_for_precision builds from it (FP16 with FP32 I/O; INT8 static QDQ or dynamic). On the CPU EP an FP16
    graph runs mostly through Casts to FP32 (few FP16 CPU kernels: ORT inserts the Casts itself); INT8 QDQ
    Conv/MatMul/Gemm with per-channel weights fuse into QLinearConv/QLinearMatMul/QGemm kernels, dynamic
    MatMul runs as DynamicQuantizeLinear + MatMulInteger.
    """

    provider: ClassVar[str]
    precisions: ClassVar[frozenset[Precision]] = frozenset({Precision.FP32, Precision.FP16, Precision.INT8})
    provider_options: ClassVar[dict[str, Any]] = {}
    decodes: ClassVar[bool] = True
    variant_hooks: ClassVar[frozenset[str]] = frozenset({"onnx-export", "onnx-graph", "int8-recipe", "ort-session",
                                                         "fixed-axes"})
    generation_io_device: ClassVar[str] = "cpu"  # where the KV cache's OrtValues live between decode steps

    @classmethod
    def availability(cls) -> Availability:
        try:
            import onnxruntime as ort
        except ImportError as exc:
            return Availability(False, f"onnxruntime is not importable: {exc}")
        providers = ort.get_available_providers()
        if cls.provider not in providers:
            return Availability(False, f"{cls.provider} not available: onnxruntime {ort.__version__} "
                                       f"was built with {', '.join(providers)}")
        return Availability(True)

    conformance_precisions: ClassVar[frozenset[Precision]] = frozenset({Precision.FP32, Precision.FP16})

    @classmethod
    def conformance_providers(cls) -> list[tuple[str, dict[str, Any]]]:
        """Providers of a conformance session: `provider` (ONNX Runtime assigns nodes it lacks to CPU)."""
        return [(cls.provider, dict(cls.provider_options))]

    @classmethod
    def library_version(cls) -> str | None:
        import onnxruntime as ort

        return str(ort.__version__)

    @classmethod
    def onnx_runner(cls, model: bytes, threads: int) -> Any:
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        session = ort.InferenceSession(model, so, providers=cls.conformance_providers())
        active = session.get_providers()
        if not active or active[0] != cls.provider:
            raise RuntimeError(f"{cls.provider} not available: the session fell back to {active}")
        names = [o.name for o in session.get_outputs()]

        def run(feeds: Mapping[str, Any]) -> list[Any]:
            try:
                return session.run(names, dict(feeds))
            except RuntimeError as exc:  # the Python binding takes no ml_dtypes array (bfloat16, float8, int4)
                if "can't be converted to MLDataType" in str(exc):
                    raise UnsupportedModelError(f"onnxruntime's Python API refuses this input type: {exc}") from exc
                raise
        return run

    def _activate(self) -> None:
        import onnxruntime as ort

        self.artifact = onnx_for_precision(self.model, self.precision, self.options)
        self.recipe = str(self.artifact.meta.get("recipe") or self.precision)
        self._ort_version = ort.__version__
        self._fixed: dict[str, int] = {}
        self._inputs: list[Any] | None = None  # axes=fixed: the graph's inputs, read at the first shape
        self._session = None if self.options.fixed_axes else self._new_session({})

    def _setup_shape(self, feed: Mapping[str, Any]) -> None:
        """A deployment variant with fixed axes (axes=fixed): a session per input shape, every free dimension
        of the graph's inputs fixed to the feed's size (SessionOptions.add_free_dimension_override_by_name)."""
        if not self.options.fixed_axes:
            return
        from harness.model_files import UNNAMED_DIMS

        seen: dict[str, set[int]] = {}
        for i in self._graph_inputs():
            value = feed.get(i.name)
            for axis, dim in enumerate(i.shape):
                if isinstance(dim, str) and value is not None and axis < np.ndim(value):
                    seen.setdefault(dim, set()).add(int(np.shape(value)[axis]))
        # An override is by name and holds for every axis of that name: a marker of unnamed axes ("?", written by
        # paddle2onnx for each of them) or a name the feed gives two sizes would fix axes to another's size.
        # Those axes stay free (ORT has no override by input and axis).
        sizes = {dim: next(iter(s)) for dim, s in seen.items() if len(s) == 1 and dim not in UNNAMED_DIMS}
        self._session = None
        self._session = self._new_session(sizes)

    def _graph_inputs(self) -> list[Any]:
        """The graph's inputs with their free dimensions' names (read once per activation, not per shape)."""
        if self._inputs is None:
            import onnxruntime as ort

            so = ort.SessionOptions()
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
            so.log_severity_level = 3
            self._inputs = list(ort.InferenceSession(str(self.artifact.path), so,
                                                     providers=["CPUExecutionProvider"]).get_inputs())
        return self._inputs

    def _new_session(self, fixed: Mapping[str, int]) -> Any:
        import onnxruntime as ort

        so = self._session_options(fixed)
        session = ort.InferenceSession(str(self.artifact.path), so, providers=self._providers())
        active = session.get_providers()
        if not active or active[0] != self.provider:
            # onnxruntime falls back to CPU silently when a provider's libraries are missing.
            raise RuntimeError(f"{self.provider} not available: the session fell back to {active}")
        self._output_names = [o.name for o in session.get_outputs()]
        self._fixed = dict(fixed)
        return session

    def _session_options(self, fixed: Mapping[str, int]) -> Any:
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.intra_op_num_threads = self.options.threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.log_severity_level = 3
        for key, value in self.options.session:  # a deployment variant's knobs (harness.variants.ort_session)
            SESSION_KNOBS[key](so, value, self.options.threads)
        for dim, size in fixed.items():
            so.add_free_dimension_override_by_name(dim, size)
        return so

    def _profile(self, feed: Mapping[str, Any], runs: int) -> Any:
        """A second session with the same options and SessionOptions.enable_profiling (the timed session is
        never profiled), which also saves its optimized graph: one warm-up run, then `runs` runs. Each
        "Node" event's kernel time is mapped onto the source graph's nodes through the optimized graph
        (ort_profile_ops)."""
        import json
        import tempfile
        import time

        import onnx
        import onnxruntime as ort

        from harness.profile.layers import OpProfile

        with tempfile.TemporaryDirectory(prefix="harness-ort-profile-") as tmp:
            so = self._session_options(self._fixed)
            so.enable_profiling = True
            so.profile_file_prefix = str(Path(tmp) / "profile")
            so.optimized_model_filepath = str(Path(tmp) / "optimized.onnx")
            session = ort.InferenceSession(str(self.artifact.path), so, providers=self._providers())
            prepared = dict(feed)  # host feeds on every EP: the kernels' times are what is profiled
            session.run(self._output_names, prepared)  # first-run allocations, not counted
            t0 = time.perf_counter_ns()
            for _ in range(runs):
                session.run(self._output_names, prepared)
            wall_us = (time.perf_counter_ns() - t0) / 1e3 / runs
            events = json.loads(Path(session.end_profiling()).read_text())
            optimized = onnx.load(str(Path(tmp) / "optimized.onnx"), load_external_data=False)
        ops = ort_profile_ops(events, optimized, onnx.load(str(self.artifact.path), load_external_data=False), runs)
        return OpProfile(ops=ops, runs=runs, wall_us=wall_us, graph=self.artifact.path,
                         method=f"onnxruntime {ort.__version__} SessionOptions.enable_profiling on a second "
                                f"session ({self.provider}): the Node events' kernel time of the last {runs} runs")

    def session_options(self) -> dict[str, Any]:
        """The active session's options as ONNX Runtime reports them back (get_session_options)."""
        if self._session is None:
            return {}
        so = self._session.get_session_options()
        return {"graph_optimization_level": str(so.graph_optimization_level).rsplit(".", 1)[-1],
                "execution_mode": str(so.execution_mode).rsplit(".", 1)[-1],
                "enable_mem_pattern": bool(so.enable_mem_pattern), "enable_mem_reuse": bool(so.enable_mem_reuse),
                "intra_op_num_threads": int(so.intra_op_num_threads),
                "inter_op_num_threads": int(so.inter_op_num_threads),
                "intra_op_allow_spinning": _config_entry(so, SPIN_ENTRY, "1") != "0",
                **({"fixed_dimensions": dict(self._fixed)} if self._fixed else {})}

    def _provider_options(self) -> dict[str, Any]:
        """Options of `provider` at session creation; GPU subclasses add device, stream, precision flags."""
        return dict(self.provider_options)

    def _providers(self) -> list[tuple[str, dict[str, Any]]]:
        """The session's providers in priority order (`provider` first; CPU is always appended by ORT)."""
        return [(self.provider, self._provider_options())]

    def _infer(self, prepared: Mapping[str, Any]) -> Mapping[str, Any]:
        return dict(zip(self._output_names, self._session.run(self._output_names, prepared)))

    def _deactivate(self) -> None:
        self._session = None

    def decoder(self) -> Any:
        """The model's KV-cache ONNX export (harness.runtimes.decoding.ort_kv) on this provider, fed by IO
        binding on `generation_io_device`."""
        from harness.runtimes.decoding.ort_kv import OrtDecoder

        return OrtDecoder(self.model, self.precision, self.options.cache, self.options.threads,
                          providers=self._generation_providers(), io_device=self.generation_io_device)

    def _generation_providers(self) -> list[tuple[str, dict[str, Any]]]:
        return [(self.provider, dict(self.provider_options))]

    def onnx_pair(self) -> tuple[Path, Path] | None:
        if self.artifact is None or self.precision is Precision.FP32:
            return None
        return onnx_fp32(self.model, self.options).path, self.artifact.path

    def details(self) -> dict[str, Any]:
        return {**super().details(), "provider": self.provider,
                "onnxruntime": getattr(self, "_ort_version", None),
                **({"session_options": self.session_options()} if self.options.variant else {})}


def _level(so: Any, value: str, threads: int) -> None:
    import onnxruntime as ort

    levels = {"disabled": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED",
              "all": "ORT_ENABLE_ALL"}
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, levels[value])


def _execution_mode(so: Any, value: str, threads: int) -> None:
    import onnxruntime as ort

    so.execution_mode = ort.ExecutionMode.ORT_PARALLEL if value == "parallel" else ort.ExecutionMode.ORT_SEQUENTIAL
    if value == "parallel":
        # independent branches run on the inter-op pool: the run's threads, at least 2 (with one inter-op thread
        # ONNX Runtime quietly runs the session sequentially, as get_session_options() then reports)
        so.inter_op_num_threads = max(2, threads)


def _memory_pattern(so: Any, value: str, threads: int) -> None:
    so.enable_mem_pattern = so.enable_mem_reuse = value == "on"


def _spinning(so: Any, value: str, threads: int) -> None:
    so.add_session_config_entry(SPIN_ENTRY, "1" if value == "on" else "0")


SPIN_ENTRY = "session.intra_op.allow_spinning"


def _config_entry(so: Any, key: str, default: str) -> str:
    """A session config entry as set, else ONNX Runtime's default (an entry never set raises on reading)."""
    try:
        return str(so.get_session_config_entry(key))
    except RuntimeError:
        return default
# RuntimeOptions.session keys (harness.variants.ort_session) -> how each sets an ort.SessionOptions
SESSION_KNOBS = {"graph_optimization_level": _level, "execution_mode": _execution_mode,
                 "memory_pattern": _memory_pattern, "intra_op_spinning": _spinning}


LAYOUT_OPS = frozenset({"ReorderInput", "ReorderOutput", "MemcpyToHost", "MemcpyFromHost"})


def ort_profile_ops(events: Any, optimized: Any, source: Any, runs: int) -> tuple[Any, ...]:
    """ONNX Runtime's profile (the JSON list of trace events) as OpTimes on `source`'s nodes: each "Node"
    event named `<node>_kernel_time` within the last `runs` "model_run" events, averaged per run, credited to the
    source nodes its node of the `optimized` graph covers (harness.profile.layers.fused_covers: a fused node
    such as FusedConv, FusedMatMul, Attention or SkipLayerNormalization covers the nodes between its inputs and
    outputs, its op type named as the fusion; a node ONNX Runtime added, such as a layout reorder, is unmapped)."""
    from harness.profile.layers import OpTime, SourceGraph, fused_covers, renamed_output

    graph = SourceGraph.from_model(source)
    opt = optimized.graph
    kept = {t for n in opt.node for t in (*n.input, *n.output) if t} | {i.name for i in opt.input}
    kept |= {t.name for t in opt.initializer}
    # a node ORT renamed after the tensor it computes (NCHWc: "<tensor>_nchwc") keeps that tensor materialised
    kept |= {b for b in (renamed_output(graph, n.name) for n in opt.node) if b is not None}
    nodes = {n.name: n for n in opt.node}
    trace = events["traceEvents"] if isinstance(events, dict) else events
    run_spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in trace
                       if e.get("cat") == "Session" and e.get("name") == "model_run")[-runs:]

    def in_runs(ts: float) -> bool:
        return any(lo <= ts <= hi for lo, hi in run_spans)

    times: dict[str, float] = {}
    kinds: dict[str, str] = {}
    for e in trace:
        name = str(e.get("name", ""))
        if e.get("cat") != "Node" or not name.endswith("_kernel_time") or not in_runs(e.get("ts", -1)):
            continue
        node = name[: -len("_kernel_time")]
        times[node] = times.get(node, 0.0) + float(e.get("dur", 0))
        kinds[node] = str(e.get("args", {}).get("op_name", ""))
    n = max(1, len(run_spans))
    out = []
    for node, total in times.items():
        proto = nodes.get(node)
        op_type = kinds[node] or (proto.op_type if proto is not None else "")
        if op_type in LAYOUT_OPS:
            covers: tuple[str, ...] = ()  # a layout change ORT added: no source node computes it
        elif proto is not None:
            covers = fused_covers(graph, node, [t for t in proto.input if t], [t for t in proto.output if t], kept)
        else:
            covers = fused_covers(graph, node, (), (), kept)
        domain = proto.domain if proto is not None else ""
        kind = op_type if domain in ("", "ai.onnx", "com.microsoft") else f"{domain.rsplit('.', 1)[-1]}.{op_type}"
        fusion = kind if len(covers) > 1 or (covers and graph.op_types.get(covers[0]) != op_type) else ""
        out.append(OpTime(node, op_type, total / n, covers, fusion))
    return tuple(out)


class OrtCpu(OnnxRuntime):
    name: ClassVar[str] = "ort-cpu"
    distribution: ClassVar[str | None] = "onnxruntime"  # ort-cpu@1.20.0: the CPU build of that release
    provider: ClassVar[str] = "CPUExecutionProvider"
    description: ClassVar[str] = "ONNX Runtime, CPUExecutionProvider, ORT_ENABLE_ALL"


# ---------------------------------------------------------------------------------------------------------
# Accelerator execution providers. onnxruntime-gpu lists CUDA/TensorRT even where their libraries are absent
# and silently falls back to CPU, so availability creates a one-node session once per process and reports
# what the session said (the library it could not load).

import contextlib  # noqa: E402 - this section's imports kept with it
import os  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from dataclasses import dataclass  # noqa: E402

import numpy as np  # noqa: E402

from harness.errors import ModelError, UnsupportedModelError  # noqa: E402
from harness.measure.cuda import (DEVICE_RESIDENT, HOST_TO_HOST, CudaEventTimer,  # noqa: E402
                                  nvidia_driver_reason, torch_cuda_reason)
from harness.precision import Precision  # noqa: E402

_PROBES: dict[tuple[str, str], Availability] = {}
_PRELOADED = False
_MISSING_LIB = re.compile(r"([\w.+-]+\.so(?:\.[\w]+)*): cannot open shared object file")
_REQUIRES = re.compile(r"Require (cuDNN \d+(?:\.(?:\d+|\*))* and CUDA \d+(?:\.(?:\d+|\*))*)")


def _probe_model_bytes() -> bytes:
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "harness-probe",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model.SerializeToString()


@contextlib.contextmanager
def _captured_output() -> Iterator[list[str]]:
    """Capture what native code and Python print on fds 1 and 2 (onnxruntime logs fallbacks there)."""
    out: list[str] = []
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with tempfile.TemporaryFile() as tmp:
        try:
            os.dup2(tmp.fileno(), 1)
            os.dup2(tmp.fileno(), 2)
            yield out
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            tmp.seek(0)
            out.append(tmp.read().decode(errors="replace"))


def fallback_reason(provider: str, log: str, active: list[str], ort_version: str) -> str:
    """Why a session asked for `provider` ran on `active` instead, from onnxruntime's log."""
    reason = f"{provider} not available: onnxruntime {ort_version} lists it, but a session with it falls " \
             f"back to {', '.join(active) or 'nothing'}"
    missing = list(dict.fromkeys(_MISSING_LIB.findall(log)))
    if missing:
        reason += f": cannot load {', '.join(missing)}"
    requires = _REQUIRES.search(log)
    if requires:
        reason += f" (the provider requires {requires.group(1)})"
    elif "TensorRT libraries" in log and not missing:
        reason += ": TensorRT libraries not found"
    return reason


def preload_cuda_libraries() -> None:
    """Load the CUDA and cuDNN libraries of pip's nvidia-* packages before a CUDA or TensorRT session.

    onnxruntime-gpu finds libcublasLt/libcudnn only on the loader's path or where an imported torch loaded them;
    `onnxruntime.preload_dlls()` (1.21+) loads them from the nvidia site packages, which is where a pip-installed
    CUDA stack lives. Once per process; what it prints goes to the caller's capture."""
    global _PRELOADED
    if _PRELOADED:
        return
    _PRELOADED = True
    import onnxruntime as ort

    preload = getattr(ort, "preload_dlls", None)
    if preload is not None:
        with contextlib.suppress(Exception):  # a missing library is the session's reason to give, not ours
            preload()


def probe_provider(provider: str, options: Mapping[str, Any] | None = None) -> Availability:
    """Available only if a session created with `provider` keeps it (cached per process)."""
    key = (provider, repr(sorted((options or {}).items())))
    if key in _PROBES:
        return _PROBES[key]
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    active: list[str] = []
    error = ""
    with _captured_output() as log:
        preload_cuda_libraries()
        try:
            providers = [(provider, dict(options or {}))]
            session = ort.InferenceSession(_probe_model_bytes(), so, providers=providers)
            active = session.get_providers()
        except Exception as exc:  # noqa: BLE001 - a refusal is a reason, never a crash
            error = f"{type(exc).__name__}: {exc}"
    text = "".join(log)
    if active and active[0] == provider:
        verdict = Availability(True)
    elif error:
        first = error.splitlines()[0]
        verdict = Availability(False, f"{provider} not available: session creation failed: {first}")
    else:
        verdict = Availability(False, fallback_reason(provider, text, active, ort.__version__))
    _PROBES[key] = verdict
    return verdict


class OrtAccelerator(OnnxRuntime):
    """An ONNX Runtime execution provider other than CPU: in the build, and a probe session keeps it."""

    install_hint: ClassVar[str] = ""
    decodes: ClassVar[bool] = False  # the generation workload is wired for CPU and CUDA devices only

    @classmethod
    def availability(cls) -> Availability:
        verdict = super().availability()
        if not verdict:
            hint = f"; {cls.install_hint}" if cls.install_hint else ""
            return Availability(False, verdict.reason + hint)
        return probe_provider(cls.provider)


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


class OrtRocm(OrtAccelerator):
    name: ClassVar[str] = "ort-rocm"
    provider: ClassVar[str] = "ROCMExecutionProvider"
    device: ClassVar[str] = "rocm"
    description: ClassVar[str] = "ONNX Runtime, ROCMExecutionProvider (AMD GPUs)"
    install_hint: ClassVar[str] = "it needs an onnxruntime build with ROCm (AMD's onnxruntime-rocm wheels)"


class OrtCann(OrtAccelerator):
    name: ClassVar[str] = "ort-cann"
    provider: ClassVar[str] = "CANNExecutionProvider"
    device: ClassVar[str] = "npu"
    description: ClassVar[str] = "ONNX Runtime, CANNExecutionProvider (Huawei Ascend NPUs)"
    install_hint: ClassVar[str] = "it needs the onnxruntime-cann build and Huawei's CANN toolkit"


class OrtOpenVino(OrtAccelerator):
    name: ClassVar[str] = "ort-openvino"
    # onnxruntime-openvino provides the onnxruntime module too: it cannot sit beside the harness's onnxruntime-gpu
    requirements: ClassVar[tuple[str, ...]] = ("onnxruntime-openvino>=1.17",)
    distribution: ClassVar[str | None] = "onnxruntime-openvino"
    own_environment: ClassVar[bool] = True
    provider: ClassVar[str] = "OpenVINOExecutionProvider"
    device: ClassVar[str] = "cpu"  # the EP's default device_type is CPU
    description: ClassVar[str] = "ONNX Runtime, OpenVINOExecutionProvider (device_type CPU)"
    install_hint: ClassVar[str] = ("it needs the onnxruntime-openvino build (`pip install onnxruntime-openvino` "
                                   "in an environment without onnxruntime-gpu: both provide the onnxruntime "
                                   "module)")
