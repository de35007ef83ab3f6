"""Result records: CaseId (the one identity), CaseResult, RunResults; schema version and migrations."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from harness.errors import ResultsError
from harness.precision import Precision
from harness.results.stored import check_results_doc, read_json_object

SCHEMA_VERSION = 2

# The closed set of case statuses.
#   passed   measured, drift within tolerance        failed   measured, drift over tolerance
#   skipped  not run, with the reason                error    the case raised (bad model, export failure, ...)
#   crashed  the worker died on a signal             timeout  the case exceeded --case-timeout
#   oom      the case exceeded the memory cap
STATUSES = ("passed", "failed", "skipped", "error", "crashed", "timeout", "oom")
MEASURED = ("passed", "failed")
BROKEN = ("error", "crashed", "timeout", "oom")


@dataclass(frozen=True, order=True)
class CaseId:
    """One cell of the matrix: the pytest id, the results key and the report layout."""

    model: str
    runtime: str
    precision: Precision  # a plain string is converted ("fp32" -> Precision.FP32); ids and JSON say "fp32"
    batch: int
    seq: int | None
    device: str
    gen: int | None = None  # generation workload: tokens generated per sequence (seq is then the prompt length)

    def __post_init__(self) -> None:
        if not isinstance(self.precision, Precision):
            object.__setattr__(self, "precision", Precision(self.precision))

    @property
    def id(self) -> str:
        s = f"-s{self.seq}" if self.seq is not None else ""
        g = f"-g{self.gen}" if self.gen is not None else ""
        return f"{self.model}-{self.runtime}-{self.precision}-b{self.batch}{s}{g}"

    @property
    def dims(self) -> dict[str, int]:
        d = {"batch": self.batch}
        if self.seq is not None:
            d["seq"] = self.seq
        if self.gen is not None:
            d["gen"] = self.gen
        return d

    @property
    def activation_key(self) -> tuple[str, str, Precision]:
        """Cases sharing this key share one runtime activation (session, compile, engine)."""
        return (self.model, self.runtime, self.precision)

    def as_dict(self) -> dict[str, Any]:
        d = {**asdict(self), "precision": self.precision.value}
        if self.gen is None:  # forward cases are stored as before the generation workload
            del d["gen"]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "CaseId":
        return cls(model=str(d["model"]), runtime=str(d["runtime"]), precision=Precision(d["precision"]),
                   batch=int(d["batch"]), seq=None if d.get("seq") is None else int(d["seq"]),
                   device=str(d["device"]), gen=None if d.get("gen") is None else int(d["gen"]))


BLOCK_KINDS = ("case", "round", "confirm")


@dataclass
class Block:
    """One measurement block of a case (--repeats), in order: the next `samples` of the case's samples_ns.

    kind: "case" (measured when the case ran), "round" (a later round over the matrix) or "confirm" (--confirm).
    A failed block holds no samples and says why (`error`); the case keeps its other blocks."""

    samples: int
    p50_ms: float | None = None  # the median of the block's samples; None for a failed block
    kind: str = "case"
    reactivated: bool = False  # measured after a fresh activation
    error: str | None = None
    # what the kernel said about the block's timed loop (harness.measure.contention): run-queue wait of the
    # worker's threads, CPU time, preemptions, machine CPU pressure; `contended` and its `cause`
    contention: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.kind not in BLOCK_KINDS:
            raise ValueError(f"unknown block kind {self.kind!r}; valid: {BLOCK_KINDS}")

    @classmethod
    def measured(cls, samples_ns: Any, kind: str, reactivated: bool = False,
                 contention: dict[str, Any] | None = None) -> Block:
        """The block holding these samples (nanoseconds), its median in ms."""
        return cls(len(samples_ns), block_p50_ms(samples_ns), kind, bool(reactivated), contention=contention)

    @classmethod
    def failed(cls, error: str, kind: str, reactivated: bool = False) -> Block:
        return cls(0, None, kind, bool(reactivated), str(error))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Block:
        return cls(samples=int(d["samples"]), p50_ms=None if d.get("p50_ms") is None else float(d["p50_ms"]),
                   kind=str(d.get("kind", "case")), reactivated=bool(d.get("reactivated")),
                   error=None if d.get("error") is None else str(d["error"]), contention=d.get("contention"))


def block_p50_ms(samples_ns: Any) -> float:
    """A block's median in ms, rounded to the nanosecond (what results.json stores)."""
    return round(float(statistics.median(samples_ns)) / 1e6, 6)


SCENARIO_NAMES = ("single-stream", "multi-stream", "server", "offline")
SCENARIO_RESULTS = ("VALID", "INVALID", "error", "skipped")


@dataclass
class ScenarioRun:
    """One MLPerf LoadGen test of a case (--scenarios; harness.execution.scenarios), as LoadGen's log says it.

    result: LoadGen's verdict, VALID or INVALID; "error" (the test did not finish) or "skipped" (it would not fit
    the case's time budget): `error` says why;
    checks: LoadGen's conditions (min_duration, min_queries, early_stopping, performance_constraints) and
    whether each was met; reasons: LoadGen's own words for an INVALID result. Latencies are per sample (per
    query for multi-stream's p*_query_ms); a Server search stores one record per try (search_step 1, 2, ...)."""

    scenario: str
    result: str
    reasons: list[str] = field(default_factory=list)
    checks: dict[str, bool] = field(default_factory=dict)
    min_duration_s: float | None = None  # LoadGen's effective min duration and min query count
    min_query_count: int | None = None
    query_count: int | None = None  # queries LoadGen issued
    samples_per_query: int | None = None
    samples_per_s: float | None = None  # offline: LoadGen's samples/s; server: completed samples/s
    latency_ms: dict[str, float] = field(default_factory=dict)  # p50, p90, p95, p97, p99, p99.9, mean, min, max
    query_latency_ms: dict[str, float] = field(default_factory=dict)  # multi-stream: per query (8 samples)
    early_stopping_ms: float | None = None  # LoadGen's early-stopping estimate of the scenario's percentile
    target_qps: float | None = None  # server: the Poisson arrival rate asked for
    target_latency_ms: float | None = None  # server: the latency bound at target_latency_percentile
    target_latency_percentile: float | None = None
    target_latency_basis: str | None = None  # server: what the bound came from ("--server-latency", "5 x the single-stream p99 (...)")
    overlatency_queries: int | None = None  # server: queries over the bound
    # the runtime's calls during the test as the SUT timed them (call + synchronise): LoadGen's latency is this
    # plus the wait in the SUT's queue and LoadGen's own overhead
    calls: int | None = None
    call_p50_ms: float | None = None
    call_mean_ms: float | None = None
    search_step: int | None = None  # server search: which try (1, 2, ...); None: a fixed --server-qps
    wall_s: float | None = None
    log_dir: str | None = None  # LoadGen's summary and detail logs, relative to the run folder
    error: str | None = None

    def __post_init__(self) -> None:
        if self.scenario not in SCENARIO_NAMES:
            raise ValueError(f"unknown scenario {self.scenario!r}; valid: {SCENARIO_NAMES}")
        if self.result not in SCENARIO_RESULTS:
            raise ValueError(f"unknown scenario result {self.result!r}; valid: {SCENARIO_RESULTS}")

    @property
    def valid(self) -> bool:
        return self.result == "VALID"

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ScenarioRun:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


def peak_server(runs: list[ScenarioRun]) -> ScenarioRun | None:
    """The Server test that sums up a search: the highest target QPS that was VALID, else the last one tried."""
    server = [r for r in runs if r.scenario == "server"]
    valid = [r for r in server if r.valid and r.target_qps]
    return max(valid, key=lambda r: r.target_qps or 0.0) if valid else (server[-1] if server else None)


@dataclass
class CaseResult:
    """What happened to one case. Raw samples are kept; statistics are derived from them."""

    case: CaseId
    status: str
    reason: str = ""
    phase: str | None = None  # load | warmup | run | accuracy: where a case broke
    signal: str | None = None  # SIGSEGV, SIGABRT, ... for crashed cases
    stderr_tail: str = ""
    samples_ns: list[int] = field(default_factory=list)
    warmup_iters: int = 0
    timing_scope: str | None = None  # host_to_host | device
    # how the timed loop above is read: "single-stream" at batch 1, else "offline" (back-to-back calls, no
    # load generator); the LoadGen-driven scenarios (--scenarios) are `scenarios` below
    scenario: str | None = None
    latency: dict[str, Any] | None = None  # LatencyStats.as_dict()
    throughput_sps: float | None = None
    accuracy: dict[str, Any] | None = None  # AccuracyResult.as_dict()
    reference_runtime: str | None = None
    setup_s: float | None = None
    artifact: str | None = None
    artifact_cache_hit: bool | None = None
    feed_sha256: str | None = None
    model_fingerprint: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    # --repeats: the measurement blocks, in the order of samples_ns (empty: one block, all the samples); the
    # gate reads a case in its least-disturbed block (harness.gating.compare)
    blocks: list[Block] = field(default_factory=list)
    blocks_pending: int = 0  # blocks still to come from later rounds (a run killed before them keeps this)
    duration_s: float | None = None
    # Memory over the case (harness.measure.memory): MiB; None where not measured. `memory` holds every figure
    # and what it covers; gpu_peak_mb is the figure memory["gpu_source"] names.
    host_peak_mb: float | None = None
    gpu_peak_mb: float | None = None
    memory: dict[str, Any] | None = None
    # GPU runtimes: per timed call, CUDA-event time on the runtime's stream (samples_ns is host wall time)
    device_samples_ns: list[int] = field(default_factory=list)
    precision_recipe: str | None = None  # what ran at this precision, e.g. "int8: ORT static QDQ, per-channel ..."
    localization: dict[str, Any] | None = None  # layer-wise drift findings (harness.accuracy.localize)
    # generation workload (harness.generation): TTFT, per-token decode samples, tokens/s, greedy-token agreement
    generation: dict[str, Any] | None = None
    # True when this case is its model's FP32 reference runtime: its drift compares two of its own runs, so
    # reports show "reference" in the drift cells, not a measured drift of 0
    is_reference: bool = False
    # False when the reference runtime's FP32 outputs differed between two runs on the same feed: the drift
    # figures are then marked "nondeterministic reference" (None: not checked, e.g. older results)
    reference_deterministic: bool | None = None
    # --scenarios: MLPerf LoadGen tests run on this case's activated runtime after its timed loop, in order
    scenarios: list[ScenarioRun] = field(default_factory=list)
    # models that declare pre/post-processing (ModelSpec.pipeline): raw input -> pre -> runtime -> post, timed
    # (harness.measure.end_to_end): steps, samples_ns, latency, throughput_sps, pre/model/post_p50_ms
    end_to_end: dict[str, Any] | None = None
    # the case's contention (harness.measure.contention.case_contention): blocks, contended_blocks, contended,
    # cause, the worst wait_fraction and PSI; a contended case's figures are not judged as clean ones
    contention: dict[str, Any] | None = None

    @property
    def drift_note(self) -> str:
        """How to read this case's drift figures: "reference", "nondeterministic reference" or ""."""
        if self.reference_deterministic is False:
            return "nondeterministic reference"
        return "reference" if self.is_reference else ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown status {self.status!r}; valid: {STATUSES}")

    @property
    def measured(self) -> bool:
        return self.status in MEASURED

    @property
    def block_sizes(self) -> list[int]:
        """Samples per block that measured any, in order (empty: the case has no block information)."""
        return [b.samples for b in self.blocks if b.samples > 0]

    @property
    def confirm_blocks(self) -> int:
        """Blocks added by --confirm that measured."""
        return sum(1 for b in self.blocks if b.kind == "confirm" and b.samples > 0)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["case"] = self.case.as_dict()
        d["id"] = self.case.id
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "CaseResult":
        known = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in d.items() if k in known and k != "case"}
        kwargs["blocks"] = [b if isinstance(b, Block) else Block.from_dict(b) for b in d.get("blocks") or ()]
        kwargs["scenarios"] = [s if isinstance(s, ScenarioRun) else ScenarioRun.from_dict(s)
                               for s in d.get("scenarios") or ()]
        return cls(case=CaseId.from_dict(d["case"]), **kwargs)


@dataclass
class RunResults:
    """One run: environment snapshot, configuration, and every case's result."""

    run_id: str
    started_at: str
    environment: dict[str, Any]
    config: dict[str, Any]
    cases: list[CaseResult] = field(default_factory=list)
    finished_at: str | None = None
    complete: bool = False  # False until the run ends: a killed run's file says so
    interrupted: bool = False
    harness_version: str = ""
    schema_version: int = SCHEMA_VERSION

    def as_dict(self) -> dict[str, Any]:
        return {"schema_version": self.schema_version, "harness_version": self.harness_version,
                "run_id": self.run_id, "started_at": self.started_at, "finished_at": self.finished_at,
                "complete": self.complete, "interrupted": self.interrupted, "environment": self.environment,
                "config": self.config, "cases": [c.as_dict() for c in self.cases]}

    def to_json(self) -> str:
        return json.dumps(_finite(self.as_dict()), indent=1, sort_keys=False)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RunResults":
        return cls(run_id=d["run_id"], started_at=d["started_at"], environment=d.get("environment", {}),
                   config=d.get("config", {}), cases=[CaseResult.from_dict(c) for c in d.get("cases", [])],
                   finished_at=d.get("finished_at"), complete=bool(d.get("complete")),
                   interrupted=bool(d.get("interrupted")), harness_version=d.get("harness_version", ""),
                   schema_version=int(d["schema_version"]))

    def counts(self) -> dict[str, int]:
        out = {s: 0 for s in STATUSES}
        for c in self.cases:
            out[c.status] += 1
        return out


def _finite(obj: Any) -> Any:
    """JSON has no NaN/Inf: write them as the strings "nan", "inf", "-inf"."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


# details keys of schema_version 1 that became CaseResult.blocks / blocks_pending
_V1_BLOCK_KEYS = ("blocks", "block_p50_ms", "block_reactivated", "block_errors", "confirm_blocks", "blocks_pending")


def _v1_to_v2(doc: dict[str, Any]) -> dict[str, Any]:
    """Block bookkeeping from `details` (sizes, errors, counts) to typed `blocks` and `blocks_pending`."""
    def case(c: Any) -> Any:
        details = c.get("details") if isinstance(c, dict) else None
        if not isinstance(details, dict):
            return c
        old = {k: v for k, v in details.items() if k in _V1_BLOCK_KEYS}
        pending = old.get("blocks_pending") or 0
        return {**c, "details": {k: v for k, v in details.items() if k not in _V1_BLOCK_KEYS},
                "blocks": _v1_blocks(old, c.get("samples_ns")),
                "blocks_pending": pending if isinstance(pending, int) and not isinstance(pending, bool) else 0}

    cases = doc.get("cases")
    return {**doc, "schema_version": 2, **({"cases": [case(c) for c in cases]} if isinstance(cases, list) else {})}


def _v1_blocks(old: dict[str, Any], samples: Any) -> list[dict[str, Any]]:
    """Version-1 block details as version-2 blocks. Version 1 read sizes that do not add up to the samples as
    one block, so they become none here; it kept counts, not per-block facts, for re-activations and
    confirmation blocks: the last blocks carry them, and failed blocks (position unknown) come last."""
    sizes = old.get("blocks")
    ints = isinstance(samples, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in samples)
    if not (ints and isinstance(sizes, list) and sizes
            and all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in sizes)
            and sum(sizes) == len(samples)):
        return []
    n_confirm, n_reactivated = (v if isinstance(v, int) and not isinstance(v, bool) else 0
                                for v in (old.get("confirm_blocks"), old.get("block_reactivated")))
    blocks, at = [], 0
    for i, n in enumerate(sizes):
        kind = "case" if i == 0 else ("confirm" if i >= len(sizes) - n_confirm else "round")
        blocks.append({"samples": n, "p50_ms": block_p50_ms(samples[at:at + n]), "kind": kind,
                       "reactivated": i > 0 and i >= len(sizes) - n_reactivated, "error": None})
        at += n
    errors = old.get("block_errors")
    for e in errors if isinstance(errors, list) else ():
        blocks.append({"samples": 0, "p50_ms": None, "kind": "round", "reactivated": False, "error": str(e)})
    return blocks


# Upgrade functions: MIGRATIONS[n] turns a version-n document into version n+1.
MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _v1_to_v2}


def migrate(doc: dict[str, Any], source: str = "<results>") -> dict[str, Any]:
    version = doc.get("schema_version")
    if not isinstance(version, int):
        raise ResultsError(f"{source}: no integer schema_version: not a harness results file")
    if version > SCHEMA_VERSION:
        raise ResultsError(f"{source}: schema_version {version} is newer than this harness reads "
                           f"({SCHEMA_VERSION}); upgrade the harness")
    while version < SCHEMA_VERSION:
        if version not in MIGRATIONS:
            raise ResultsError(f"{source}: schema_version {version} has no migration to {SCHEMA_VERSION}")
        doc = MIGRATIONS[version](doc)
        version = doc["schema_version"]
    return doc


def load_results(path: str | Path) -> RunResults:
    """Read a results.json (or its run folder) through the one stored-file reader (harness.results.stored):
    bounded parsing, older schema versions migrated, the declared schema and the samples checked."""
    path = Path(path)
    if path.is_dir():
        path = path / "results.json"
    return results_from_doc(read_json_object(path), str(path))


def results_from_doc(doc: dict[str, Any], source: str = "<results>", prefix: str = "") -> RunResults:
    """A parsed results document (migrated to the current schema, then checked by
    `stored.check_results_doc`) as RunResults; errors name `source` and the place (`prefix` + path)."""
    doc = migrate(doc, f"{source}: {prefix}" if prefix else source)
    check_results_doc(doc, source, prefix)
    try:
        return RunResults.from_dict(doc)
    except (KeyError, TypeError, ValueError) as exc:  # the schema above should leave nothing to catch here
        raise ResultsError(f"{source}: malformed results: {type(exc).__name__}: {exc}") from None
