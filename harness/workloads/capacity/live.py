"""A matrix runtime behind the traffic replay, in this process: a configuration becomes a probe on the real clock,
its drift and memory measured when first opened (docs/recommend.md)."""

from __future__ import annotations

import functools

import dataclasses
import itertools
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from harness.artifacts.cache import ArtifactCache
from harness.artifacts.options import RuntimeOptions
from harness.config import BatcherPolicy
from harness.data import make_feed
from harness.errors import UsageError
from harness.measure.contention import WAIT_FRACTION_LIMIT, ContentionProbe, own_wait, snapshot
from harness.model import BATCH, SEQ, ModelSpec
from harness.precision import Precision
from harness.runtimes import get_runtime
from harness.runtimes.base import Runtime
from harness.traffic.replay import RealClock, ReplayRun, replay
from harness.traffic.spec import Request, TrafficSpec
from harness.workloads.capacity.recommend import Candidate
from harness.workloads.forward.batcher import batch_refusal

FEED_SEED = 0
KEEP_ACTIVE = 3  # the searches run side by side (recommend.SIDE_BY_SIDE), each on its live worker


def check_traffic(spec: ModelSpec, traffic: TrafficSpec) -> None:
    """The traffic's dimensions must be the model's symbolic ones (a UsageError naming the file otherwise)."""
    extra = sorted(traffic.dims - spec.symbolic_dims)
    if extra:
        have = ", ".join(sorted(spec.symbolic_dims)) or "none"
        raise UsageError(f"--traffic {traffic.source}: dimension(s) {', '.join(extra)} are not inputs of model "
                         f"{spec.name!r} (its symbolic dimensions: {have})")


class _Pool:
    """The active runtimes, least recently used closed first."""

    def __init__(self, keep: int = KEEP_ACTIVE) -> None:
        self.keep = keep
        self.active: OrderedDict[str, OpenConfig] = OrderedDict()

    def use(self, cfg: OpenConfig) -> None:
        self.active.pop(cfg.name, None)
        self.active[cfg.name] = cfg
        while len(self.active) > self.keep:
            _, old = self.active.popitem(last=False)
            old.close()

    def close(self) -> None:
        for cfg in list(self.active.values()):
            cfg.close()
        self.active.clear()


class LiveConfig:
    """One configuration opened in this process: its runtime, a bound call per shape, its drift and memory."""

    read_proc = staticmethod(snapshot)  # what each probe's contention probe reads (/proc; tests give a fake)

    def __init__(self, name: str, spec: ModelSpec, cls: type[Runtime], precision: Precision,
                 options: RuntimeOptions, batcher: BatcherPolicy | None, traffic: TrafficSpec, pool: _Pool,
                 reference: Callable[[], Mapping[str, np.ndarray]] | None,
                 contention_limit: float = WAIT_FRACTION_LIMIT) -> None:
        self.name, self.spec, self.cls, self.precision, self.options = name, spec, cls, precision, options
        self.batcher, self.traffic, self.pool, self.reference = batcher, traffic, pool, reference
        self.contention_limit = contention_limit
        self.runtime: Runtime | None = None
        self.bound: dict[tuple[tuple[str, int], ...], Callable[[], object]] = {}
        self.memory_mb: float | None = None
        self.drift: float | None = None
        self.per_shape = True  # the runtime's sets_up_per_shape(), read when it is opened

    def dims(self, requests: Sequence[Request]) -> dict[str, int]:
        out: dict[str, int] = {}
        if BATCH in self.spec.symbolic_dims:
            out[BATCH] = sum(int(r.dims.get(BATCH, 1)) for r in requests)
        for d in self.spec.symbolic_dims - {BATCH}:
            out[d] = max(int(r.dims.get(d, self._default(d))) for r in requests)
        return out

    def _default(self, dim: str) -> int:
        if dim == SEQ:
            return 128
        raise UsageError(f"--traffic {self.traffic.source}: model {self.spec.name!r} needs dimension {dim!r}; "
                         f"give it a histogram under [shapes]")

    def shapes(self) -> list[dict[str, int]]:
        """Every call shape the traffic can make (rows up to the batcher's max x each size of the other dims)."""
        per_dim: dict[str, list[int]] = {}
        reqs = self.traffic.schedule(requests=min(self.traffic.requests, 2000))
        for d in self.spec.symbolic_dims - {BATCH}:
            per_dim[d] = sorted({int(r.dims.get(d, self._default(d))) for r in reqs})
        max_rows = max(int(r.dims.get(BATCH, 1)) for r in reqs) * (self.batcher.max_batch if self.batcher else 1)
        rows = list(range(1, max_rows + 1)) if BATCH in self.spec.symbolic_dims else [None]
        keys = sorted(per_dim)
        out = []
        for b, *rest in itertools.product(rows, *(per_dim[k] for k in keys)):
            d = dict(zip(keys, rest, strict=True))
            if b is not None:
                d[BATCH] = b
            out.append(d)
        return out

    def open(self) -> None:
        if self.runtime is not None:
            self.pool.use(self)
            return
        import psutil

        rss0 = psutil.Process().memory_info().rss
        rt = self.cls(self.spec, self.precision, self.options)
        rt.__enter__()
        self.runtime = rt
        self.per_shape = rt.sets_up_per_shape()
        self.bound.clear()
        for dims in self.shapes():
            self.call_dims(dims)
        if self.memory_mb is None:
            self.memory_mb = max(0.0, (psutil.Process().memory_info().rss - rss0) / 2 ** 20)
        if self.drift is None and self.reference is not None:
            dims = self.shapes()[0]
            feed = make_feed(self.spec, dims, FEED_SEED)
            out, ref = rt.infer(feed), self.reference()
            self.drift = max(float(np.linalg.norm(np.asarray(out[k], np.float64) - np.asarray(ref[k], np.float64))
                                   / max(np.linalg.norm(np.asarray(ref[k], np.float64)), 1e-30))
                             for k in ref if k in out) if ref else 0.0
        self.pool.use(self)

    def close(self) -> None:
        if self.runtime is not None:
            self.runtime.__exit__(None, None, None)
            self.runtime = None
            self.bound.clear()

    def call_dims(self, dims: Mapping[str, int]) -> None:
        assert self.runtime is not None
        key = tuple(sorted(dims.items()))
        fn = self.bound.get(key)
        if fn is None:
            feed = make_feed(self.spec, dims, FEED_SEED)
            if self.per_shape:
                fn = functools.partial(self.runtime.infer, feed)
            else:
                fn = self.runtime.bind(feed)
            self.bound[key] = fn
        fn()
        self.runtime.synchronize()

    def probe(self, rate: float, n: int, seed: int) -> ReplayRun:
        """One replay at `rate`, with the contention of its process around it (a loaded machine says so)."""
        self.open()
        reqs = self.traffic.schedule(rate=rate, requests=n, seed=seed)
        watch = ContentionProbe(self.options.threads, self.contention_limit, read=self.read_proc)
        watch.start()
        run = replay(reqs, lambda rs: self.call_dims(self.dims(rs)), RealClock(), self.batcher)
        run.contention = own_wait(watch.stop())  # its own threads' wait is the configuration's, not a neighbour's
        return run


def batcher_spelling(text: str) -> BatcherPolicy | None:
    """`none` or `max=N,wait=MS` (as --batcher)."""
    t = text.strip()
    if t in ("", "none", "off"):
        return None
    parts = dict(p.partition("=")[::2] for p in t.split(","))
    try:
        policy = BatcherPolicy(int(parts["max"]), float(parts["wait"]))
    except (KeyError, ValueError):
        raise UsageError(f"--batchers {text!r}: spell each none or max=N,wait=MS") from None
    if not 1 <= policy.max_batch <= 1024 or not 0 <= policy.max_wait_ms <= 10000:
        raise UsageError(f"--batchers {text!r}: N in 1..1024, MS in 0..10000")
    return policy


@dataclasses.dataclass(frozen=True)
class ConfigRef:
    """One configuration as names and numbers (picklable): what a worker process rebuilds it from."""

    model: str  # the model's registered name
    user_model: str | None  # the --model file or factory it was registered from (a worker registers it again)
    runtime: str
    precision: str
    variant: str
    threads: int
    batcher: BatcherPolicy | None
    traffic: TrafficSpec
    cache_dir: str
    contention_limit: float

    @property
    def name(self) -> str:
        b = self.batcher.describe() if self.batcher else "none"
        return f"{self.runtime} {self.precision} {self.variant} threads={self.threads} batcher={b}"

    @property
    def axes(self) -> dict[str, str]:
        return {"runtime": self.runtime, "precision": self.precision, "variant": self.variant,
                "threads": str(self.threads), "batcher": self.batcher.describe() if self.batcher else "none"}


def configure(ref: ConfigRef, spec: ModelSpec, in_own_env: bool = False
              ) -> tuple[ModelSpec, type[Runtime], Precision, RuntimeOptions] | str:
    """The model (variant applied), runtime class, precision and options of `ref`, or why it cannot run here: the
    one place a configuration is set up, in the parent (to refuse) and in its worker (to run). `in_own_env`: the
    runtime runs in an environment of its own (harness.envs), so this interpreter may lack its packages: only what
    needs none is checked here, the rest by its worker, in that environment (as `harness run`'s worker does)."""
    from harness.variants.registry import parse_variant

    cls = get_runtime(ref.runtime)
    precision = cls.case_precision(Precision(ref.precision))
    for verdict in (() if in_own_env else (cls.availability(),)) + (cls.supports(spec, precision),):
        if not verdict:
            return verdict.reason
    model = spec
    options = RuntimeOptions(ref.threads, ArtifactCache(ref.cache_dir))
    variant = parse_variant(ref.variant)
    if variant is not None:
        why = variant.refusal(spec, cls.variant_hooks, ref.runtime, precision)
        if why:
            return why
        model, options = variant.apply(spec, options)
    if ref.batcher is not None and not in_own_env:
        why = batch_refusal(model, cls(model, precision, options))
        if why:
            return why
    return model, cls, precision, options


def is_reference(ref: ConfigRef, spec: ModelSpec) -> bool:
    """The FP32 reference itself (no drift to measure against itself)."""
    from harness.variants.registry import parse_variant

    return (ref.runtime == spec.reference and get_runtime(ref.runtime).case_precision(Precision(ref.precision))
            is Precision.FP32 and parse_variant(ref.variant) is None)


Reference = Callable[[], Mapping[str, np.ndarray]]  # the FP32 reference's outputs on the drift feed


class OpenConfig(Protocol):
    """A configuration the search probes: set up in this process (LiveConfig) or in a worker (IsolatedConfig)."""

    name: str
    drift: float | None
    memory_mb: float | None

    def open(self) -> None: ...
    def close(self) -> None: ...
    def probe(self, rate: float, n: int, seed: int) -> ReplayRun: ...


Opener = Callable[[ConfigRef, ModelSpec, "_Pool", Reference | None, Any], OpenConfig]  # the last: its RuntimeEnv


def live_config(ref: ConfigRef, spec: ModelSpec, pool: _Pool, reference: Reference | None,
                env: Any = None) -> LiveConfig:
    """`ref` set up in this process (configure() must have accepted it)."""
    made = configure(ref, spec)
    if isinstance(made, str):  # in a runtime's own environment, the first place its availability is known
        raise RuntimeError(made)
    model, cls, precision, options = made
    return LiveConfig(ref.name, model, cls, precision, options, ref.batcher, ref.traffic, pool, reference,
                      ref.contention_limit)


def live_candidates(spec: ModelSpec, traffic: TrafficSpec, runtimes: Sequence[str], precisions: Sequence[str],
                    variants: Sequence[str], threads: Sequence[int], batchers: Sequence[str], cache_dir: Any,
                    user_model: str | None = None, opener: Opener | None = None,
                    contention_limit: float = WAIT_FRACTION_LIMIT, envs: str = "off", env_wheels: str | None = None,
                    say: Callable[[str], None] = lambda line: None,
                    ) -> tuple[list[Candidate], Callable[[], None]]:
    """The grid's candidates (a configuration that cannot run is a candidate with its reason) and a closer.
    `opener` sets each configuration up: in this process by default (live_config), in a worker process of its
    own with harness.execution.capacity_worker.IsolatedConfig (the command's default). `envs` (auto | off, as run's
    --envs): a runtime this interpreter lacks, or one that always wants its own, runs in a runtime environment
    (harness.envs, built on first use from `env_wheels` or the index, reused after), its worker started with that
    environment's interpreter; in this process (`opener` None) such a configuration is left out, with why."""
    isolated = opener is not None
    opener = opener or live_config
    check_traffic(spec, traffic)
    built: dict[str, Any] = {}  # environment key -> RuntimeEnv, or why it could not be built

    def environment(rname: str) -> Any:
        """(the RuntimeEnv the runtime runs in, or None for this interpreter's) or why it cannot run."""
        from harness.envs import EnvBuildError, EnvStore, environment_for
        from harness.envs.spec import in_process_refusal
        from harness.errors import HarnessError

        if not isolated:
            return None, in_process_refusal(rname, envs)
        env_spec = environment_for(get_runtime(rname), envs)
        if env_spec is None:
            return None, None
        if env_spec.key not in built:
            from pathlib import Path

            try:
                built[env_spec.key] = EnvStore(cache_dir).ensure(env_spec, progress=say, who=rname,
                                                                 wheels=Path(env_wheels) if env_wheels else None)
            except (EnvBuildError, HarnessError) as exc:
                built[env_spec.key] = str(exc)
        env = built[env_spec.key]
        return (None, env) if isinstance(env, str) else (env, None)

    pool = _Pool()
    base = RuntimeOptions(1, ArtifactCache(cache_dir))
    ref_out: dict[str, Mapping[str, np.ndarray]] = {}

    def reference() -> Mapping[str, np.ndarray]:
        if "ref" not in ref_out:
            rcls = get_runtime(spec.reference)
            rt = rcls(spec, Precision.FP32, base)
            with rt:
                dims = LiveConfig("ref", spec, rcls, Precision.FP32, base, None, traffic, _Pool(), None).shapes()[0]
                ref_out["ref"] = rt.infer(make_feed(spec, dims, FEED_SEED))
        return ref_out["ref"]

    out: list[Candidate] = []
    for rname, prec, vname, nthreads, bname in itertools.product(runtimes, precisions, variants, threads, batchers):
        ref = ConfigRef(spec.name, user_model, rname, prec, vname, nthreads, batcher_spelling(bname), traffic,
                        str(cache_dir), contention_limit)
        env, why = environment(rname)  # an unknown runtime: get_runtime's UsageError, as before
        why = why or configure(ref, spec, in_own_env=env is not None)
        if isinstance(why, str):
            out.append(Candidate(ref.name, ref.axes, _refused(why), error=why))
            continue
        live = opener(ref, spec, pool, dict if is_reference(ref, spec) else reference, env)
        out.append(_LiveCandidate(ref.name, ref.axes, live.probe, cfg=live, reactivate=live.close,
                                  environment=env.record() if env is not None else None))
    return out, pool.close


def _refused(why: str) -> Callable[[float, int, int], ReplayRun]:
    def probe(rate: float, n: int, seed: int) -> ReplayRun:
        raise RuntimeError(why)
    return probe


@dataclasses.dataclass(frozen=True)
class _LiveCandidate(Candidate):
    """A candidate whose drift and memory are measured when it is first opened (before the constraints are
    checked: `measure()`)."""

    cfg: OpenConfig | None = None

    def measure(self) -> Candidate:
        assert self.cfg is not None
        try:
            self.cfg.open()
        except Exception as exc:  # noqa: BLE001 - a configuration that cannot be set up is left out, with why
            return dataclasses.replace(self, error=f"setup failed: {type(exc).__name__}: {exc}")
        return dataclasses.replace(self, drift=self.cfg.drift, memory_mb=self.cfg.memory_mb)
