"""The Runtime interface: a shared, guarded lifecycle; adapters write only the `_activate/_infer/...` hooks."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from harness.artifacts.cache import Artifact
from harness.artifacts.options import RuntimeOptions
from harness.model import ModelSpec
from harness.precision import Precision


@dataclass(frozen=True)
class Availability:
    """Whether a runtime (or a runtime x model x precision) can run; falsy with the reason when not."""

    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


def requirement_satisfied(requirement: str) -> bool:
    """Is `requirement` installed in this interpreter at a version it allows (markers that do not apply: yes)?"""
    from importlib import metadata

    from packaging.requirements import Requirement

    req = Requirement(requirement)
    if req.marker is not None and not req.marker.evaluate():
        return True
    try:
        have = metadata.version(req.name)
    except metadata.PackageNotFoundError:
        return False
    return req.specifier.contains(have, prereleases=True)


def requirement_import_error(requirements: tuple[str, ...]) -> str | None:
    """Why a required distribution, installed, does not import (its top-level modules, from the installed files:
    a broken install, a binary built for another platform), or None."""
    import importlib

    from packaging.requirements import Requirement

    provides = _modules_of_distributions()
    for text in requirements:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate():
            continue
        for module in provides.get(_canonical_name(req.name), ()):
            try:
                importlib.import_module(module)
            except Exception as exc:  # noqa: BLE001 - any failure to import is the reason, not a crash
                first = (str(exc).strip().splitlines() or [""])[0]
                return f"{req.name} is installed but `import {module}` fails ({type(exc).__name__}: {first})"
    return None


def _canonical_name(name: str) -> str:
    from packaging.utils import canonicalize_name

    return str(canonicalize_name(name))


_PROVIDES: dict[str, tuple[str, ...]] | None = None


def _modules_of_distributions() -> dict[str, tuple[str, ...]]:
    """Distribution (canonical name) -> the public top-level modules its installed files provide (read once)."""
    global _PROVIDES
    if _PROVIDES is None:
        from importlib import metadata

        out: dict[str, set[str]] = {}
        for module, dists in metadata.packages_distributions().items():
            if module.startswith("_") or not module.isidentifier():
                continue
            for dist in dists:
                out.setdefault(_canonical_name(dist), set()).add(module)
        _PROVIDES = {k: tuple(sorted(v)) for k, v in out.items()}
    return _PROVIDES


class Runtime(ABC):
    """Runs one model at one precision on one device. A context manager; heavy work only in activation.

    Public methods guard and validate; an adapter implements `_activate`, `_infer`, `_deactivate` and, where
    it needs to, `_prepare` (feed -> runtime-native inputs, outside the timed loop), `_setup_shape` (work
    specific to one input shape: a static-shape compile or engine), `_to_numpy`, `synchronize` (device sync
    before a clock is read) and `availability`.
    """

    name: ClassVar[str]
    device: ClassVar[str] = "cpu"
    precisions: ClassVar[frozenset[Precision]] = frozenset({Precision.FP32})
    # --repeats: re-activate (fresh session, thread pool, buffers) between measurement blocks. Runtimes whose
    # activation is a long compile or engine build keep one activation and only separate the blocks in time.
    reactivate_between_repeats: ClassVar[bool] = True
    timing_scope: ClassVar[str] = "host_to_host"  # what a timed call covers: inputs and outputs in host memory
    description: ClassVar[str] = ""
    warmup_floor_s: ClassVar[float] = 0.0  # GPU runtimes: at least this much warm-up (clocks, autotuning)
    # Extra memory figures the case's sampler records: "nvml" (GPU used memory), "torch" (CUDA allocator peaks)
    memory_sources: ClassVar[frozenset[str]] = frozenset()
    # the decoder capability: this runtime steps a causal LM with its KV cache (`decoder()`; --workload generate)
    decodes: ClassVar[bool] = False
    # deployment-variant knobs this runtime honours (harness.variants: a knob names the hook it needs):
    # "onnx-export" / "onnx-graph" (it runs the harness's FP32 ONNX: onnx_fp32 applies the export opset and graph
    # transforms), "int8-recipe" (its INT8 is onnx_for_precision's), "ort-session" (ONNX Runtime session knobs),
    # "fixed-axes" (free dimensions fixed per shape). Knobs needing none (threads, pruning) apply to every runtime.
    variant_hooks: ClassVar[frozenset[str]] = frozenset()
    # Its own environment (harness.envs): the pip requirements it needs beyond the harness's dependencies (the
    # optional extra's), the distribution a version pin `NAME@VERSION` applies to, and whether it always runs in
    # an environment of its own (its distribution replaces a module of the harness's, as onnxruntime-openvino
    # replaces onnxruntime). `pinned_version` is set on the runtime a `NAME@VERSION` name builds.
    requirements: ClassVar[tuple[str, ...]] = ()
    distribution: ClassVar[str | None] = None
    # the top-level module it imports: the distribution that provides it on an install (onnxruntime-gpu, onnxruntime,
    # onnxruntime-openvino for `onnxruntime`) is the release a run records and the nightly gate pins
    module: ClassVar[str | None] = None
    # It runs the model's torch module itself, built by `model.build()` at activation (no stored artifact): the
    # nightly gate rebuilds side A from the model's definition when that is unchanged since the baseline.
    runs_torch_module: ClassVar[bool] = False
    own_environment: ClassVar[bool] = False
    pinned_version: ClassVar[str | None] = None

    def __init__(self, model: ModelSpec, precision: Precision, options: RuntimeOptions) -> None:
        self.model = model
        self.precision = Precision(precision)
        self.options = options
        self.setup_s: float | None = None  # activation + current shape's setup: session creation, compile, build
        self.activation_s: float | None = None  # activation alone (shared by the shapes that reuse it)
        self.shape_setup_s: float | None = None  # `_setup_shape` time of the current input shape
        self.artifact: Artifact | None = None  # the file this runtime executes, if any
        # What actually runs at this precision (set by _activate), recorded as CaseResult.precision_recipe.
        self.recipe: str | None = "fp32" if self.precision is Precision.FP32 else None
        self._active = False
        self._shape_key: tuple[Any, ...] | None = None

    install: ClassVar[str] = ""  # how to install `requirements` (the extra's pip command), said when missing

    # ------------------------------------------------------------------ capability
    @classmethod
    def availability(cls) -> Availability:
        """Can this runtime run on this machine at all? Derived from `requirements` (each installed at a version
        it allows), then `device_check()` where the runtime needs a device or a build feature. Cheap enough to
        call once per process."""
        hint = f"; install it with: {cls.install}" if cls.install else ""
        missing = [r for r in cls.requirements if not requirement_satisfied(r)]
        if missing:
            return Availability(False, f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not installed "
                                       f"in this interpreter{hint}")
        broken = requirement_import_error(cls.requirements)
        if broken:
            return Availability(False, f"{broken}{hint}")
        return cls.device_check()

    @classmethod
    def device_check(cls) -> Availability:
        """What `requirements` cannot say: a device the library must see, a provider it must have been built
        with. Default: nothing more."""
        return Availability(True)

    @classmethod
    def supports(cls, model: ModelSpec, precision: Precision) -> Availability:
        """Can it run this model at this precision? (Unsupported = a skip with this reason, never an error.)"""
        if Precision(precision) not in cls.precisions:
            have = ", ".join(sorted(p.value for p in cls.precisions))
            return Availability(False, f"{cls.name} does not run {precision} (supported: {have})")
        return cls._supports_model(model)

    @classmethod
    def case_precision(cls, requested: Precision) -> Precision:
        """The precision a requested one runs as here (the matrix records this one), e.g. a CPU runtime
        without FP16 kernels maps fp16 to bf16. Default: unchanged."""
        return Precision(requested)

    @classmethod
    def _supports_model(cls, model: ModelSpec) -> Availability:
        return Availability(True)

    # ------------------------------------------------------------------ operator conformance (harness conform)
    # Precisions at which `onnx_runner` runs an arbitrary ONNX model (fp16: the harness's FP16 conversion of
    # it, harness.artifacts.fp16). Empty: this runtime takes no arbitrary ONNX model, conformance leaves it out.
    conformance_precisions: ClassVar[frozenset[Precision]] = frozenset()

    @classmethod
    def library_version(cls) -> str | None:
        """The version of the library behind this runtime (recorded with conformance runs); None: unknown."""
        return None

    @classmethod
    def onnx_runner(cls, model: bytes, threads: int) -> Callable[[Mapping[str, Any]], list[Any]]:
        """Load (and compile) one serialized ONNX model; returns feeds -> outputs in the graph's output order
        (numpy arrays; a list for a sequence, None for an absent optional). Raising here is the runtime
        refusing the model (operator, opset or type unsupported): conformance records it as unsupported, as
        it does an UnsupportedModelError from the callable (e.g. an input type the runtime's API refuses)."""
        raise NotImplementedError(f"{cls.name} runs no arbitrary ONNX model")

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> "Runtime":
        if not self._active:
            t0 = time.perf_counter()
            self._activate()
            self.setup_s = self.activation_s = time.perf_counter() - t0
            self.shape_setup_s, self._shape_key = None, None
            self._active = True
        return self

    def __exit__(self, *exc: object) -> None:
        if self._active:
            self._active = False
            self._deactivate()

    def infer(self, feed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One inference on a host feed; returns host numpy arrays keyed by output name."""
        self._check_active()
        missing = [t.name for t in self.model.inputs if t.name not in feed]
        if missing:
            raise ValueError(f"{self.name}: feed for model {self.model.name!r} lacks inputs {missing}")
        self._ensure_shape(feed)
        outputs = self._infer(self._prepare(feed))
        self.synchronize()
        return {k: self._to_numpy(v) for k, v in outputs.items()}

    def bind(self, feed: Mapping[str, np.ndarray]) -> Callable[[], object]:
        """A zero-argument callable running one inference on `feed`: the thing the timer times.

        Preparation (tensor conversion, device copies an adapter chooses to exclude) happens here, once.
        """
        self._check_active()
        self._ensure_shape(feed)
        prepared = self._prepare(feed)
        infer = self._infer
        return lambda: infer(prepared)

    def _ensure_shape(self, feed: Mapping[str, np.ndarray]) -> None:
        """Run `_setup_shape` when the feed's shapes differ from the last feed's; its time joins `setup_s`.

        Never inside the timed loop: `infer` (warm-up, accuracy) and `bind` call it, the bound callable does not.
        An adapter without `_setup_shape` keeps setup_s = its activation time.
        """
        if type(self)._setup_shape is Runtime._setup_shape:
            return
        key = tuple((k, tuple(np.shape(v)), str(getattr(v, "dtype", ""))) for k, v in sorted(feed.items()))
        if key == self._shape_key:
            return
        t0 = time.perf_counter()
        self._setup_shape(feed)
        self.shape_setup_s = time.perf_counter() - t0
        self._shape_key = key
        self.setup_s = (self.activation_s or 0.0) + self.shape_setup_s

    def synchronize(self) -> None:
        """Wait for the device; CPU runtimes return at once."""

    def device_timer(self) -> Any:
        """A DeviceTimer (harness.measure.cuda) bracketing each timed call on the device, or None (CPU)."""
        return None

    def caveat(self) -> str | None:
        """What a reader of this case's figures must know about how the runtime was set up, in one line (e.g. an
        untuned compiler: its latency is the floor of an untuned build), or None. Shown on the case line and
        stored as the case's reason and details["caveat"]."""
        return None

    def details(self) -> dict[str, Any]:
        """Adapter-specific facts recorded with each result (providers, threads, artifact, ...)."""
        out: dict[str, Any] = {"threads": self.options.threads}
        if self.artifact is not None:
            out["artifact"] = str(self.artifact.path)
            out["artifact_cache_hit"] = self.artifact.cache_hit
            out["artifact_build_s"] = round(self.artifact.build_s, 3)  # part of setup_s on a cache miss
        if self.activation_s is not None:
            out["activation_s"] = round(self.activation_s, 3)
        if self.shape_setup_s is not None:
            out["shape_setup_s"] = round(self.shape_setup_s, 3)  # per-shape compile/build, part of setup_s
        return out

    def onnx_pair(self) -> tuple[Path, Path] | None:
        """(FP32 ONNX, the ONNX this runtime executes) for layer-wise drift localisation; None: not an ONNX
        runtime, or nothing to compare (it runs the FP32 file itself)."""
        return None

    # ------------------------------------------------------------------ profiling (--profile)
    # Why this runtime gives no per-op profile (an adapter that can overrides `_profile` instead).
    cannot_profile: ClassVar[str] = "its adapter has no per-op profiler"

    @classmethod
    def can_profile(cls) -> bool:
        """Whether this runtime's adapter implements the profiled pass (`_profile`)."""
        return cls._profile is not Runtime._profile

    def profile(self, feed: Mapping[str, np.ndarray], runs: int) -> Any:
        """A profiled pass on `feed`: `runs` inferences under the runtime's own profiler, on a separate session
        or compile, or with hooks removed afterwards, so the timed loop (which has run before) never profiles.
        Returns an OpProfile (harness.profile.layers), its ops' times per inference mapped onto the ONNX graph
        `cost_graph()` gives; raises CannotProfile with the reason where the runtime has no profiler."""
        from harness.profile.layers import CannotProfile

        self._check_active()
        if not self.can_profile():
            raise CannotProfile(f"{self.name} cannot profile: {self.cannot_profile}")
        self._ensure_shape(feed)
        return self._profile(feed, max(1, int(runs)))

    def _profile(self, feed: Mapping[str, np.ndarray], runs: int) -> Any:
        raise NotImplementedError

    def cost_graph(self) -> Path:
        """The ONNX graph whose nodes this runtime's FLOPs, bytes and profile are counted on: the ONNX file it
        executes, else the model's FP32 export."""
        if self.artifact is not None and self.artifact.path.suffix == ".onnx":
            return self.artifact.path
        from harness.artifacts import onnx_fp32

        return onnx_fp32(self.model, self.options).path

    def decoder(self) -> Any:
        """A Decoder (harness.runtimes.decoding.base) of this model at this precision, for --workload generate. It owns its
        own module or session (this runtime need not be activated). Default: cannot generate (a skip)."""
        from harness.errors import UnsupportedModelError

        raise UnsupportedModelError(f"{self.name} cannot run the generation workload (no KV-cache decode loop "
                                    "in its adapter)")

    @property
    def artifact_path(self) -> Path | None:
        return self.artifact.path if self.artifact is not None else None

    # ------------------------------------------------------------------ adapter hooks
    @abstractmethod
    def _activate(self) -> None: ...

    @abstractmethod
    def _infer(self, prepared: Any) -> Mapping[str, Any]: ...

    def _deactivate(self) -> None:
        pass

    def _setup_shape(self, feed: Mapping[str, np.ndarray]) -> None:
        """Per-shape setup (static-shape compile, engine, per-shape artifact); runs once per new input shape."""

    def sets_up_per_shape(self) -> bool:
        """Whether these options make the runtime set its model up per input shape (one shape's state at a time, so
        calls of several shapes cannot alternate: the dynamic batcher refuses it). An adapter that defines
        `_setup_shape` does unless it says otherwise for its options."""
        return type(self)._setup_shape is not Runtime._setup_shape

    def _prepare(self, feed: Mapping[str, np.ndarray]) -> Any:
        return dict(feed)

    def _to_numpy(self, value: Any) -> np.ndarray:
        return np.asarray(value)

    def _check_active(self) -> None:
        if not self._active:
            raise RuntimeError(f"{self.name}: use the runtime as a context manager before inference")

