"""ONNX Runtime: the one adapter (sessions, options, the deployment variants' session knobs); the execution
provider is chosen by the registered subclass (cpu.py, providers.py, cuda.py)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from harness.artifacts import onnx_for_precision, onnx_fp32
from harness.errors import UnsupportedModelError
from harness.precision import Precision
from harness.runtimes.base import Availability, Runtime
from harness.runtimes.onnxruntime.profile import ort_profile_ops


class OnnxRuntime(Runtime):
    """InferenceSession with full graph optimisation and the run's intra-op thread count.

    Precisions (every EP subclass inherits them): fp32 runs the FP32 export; fp16 and int8 run the files
    onnx_for_precision builds from it (FP16 with FP32 I/O; INT8 static QDQ or dynamic). On the CPU EP an FP16
    graph runs mostly through Casts to FP32 (few FP16 CPU kernels: ORT inserts the Casts itself); INT8 QDQ
    Conv/MatMul/Gemm with per-channel weights fuse into QLinearConv/QLinearMatMul/QGemm kernels, dynamic
    MatMul runs as DynamicQuantizeLinear + MatMulInteger.
    """

    provider: ClassVar[str]
    module: ClassVar[str | None] = "onnxruntime"
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

    def sets_up_per_shape(self) -> bool:
        """Only the axes=fixed variant makes a session per input shape; one session takes every shape otherwise."""
        return bool(self.options.fixed_axes)

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
        if not self.options.idle_spinning:  # an A/B's two sessions: the idle one's pool must not spin
            _spinning(so, "off", self.options.threads)
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
                **({"session_options": self.session_options()}
                   if self.options.variant or not self.options.idle_spinning else {})}


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


