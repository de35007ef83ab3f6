"""Result records: CaseId (the one identity), CaseResult, RunResults; schema version and migrations."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from harness.errors import ResultsError
from harness.precision import Precision
from harness.results.stored import check_results_doc, read_json_object

SCHEMA_VERSION = 1

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

    def __post_init__(self) -> None:
        if not isinstance(self.precision, Precision):
            object.__setattr__(self, "precision", Precision(self.precision))

    @property
    def id(self) -> str:
        s = f"-s{self.seq}" if self.seq is not None else ""
        return f"{self.model}-{self.runtime}-{self.precision}-b{self.batch}{s}"

    @property
    def dims(self) -> dict[str, int]:
        d = {"batch": self.batch}
        if self.seq is not None:
            d["seq"] = self.seq
        return d

    @property
    def activation_key(self) -> tuple[str, str, Precision]:
        """Cases sharing this key share one runtime activation (session, compile, engine)."""
        return (self.model, self.runtime, self.precision)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "precision": self.precision.value}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "CaseId":
        return cls(model=str(d["model"]), runtime=str(d["runtime"]), precision=Precision(d["precision"]),
                   batch=int(d["batch"]), seq=None if d.get("seq") is None else int(d["seq"]),
                   device=str(d["device"]))


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
    scenario: str | None = None  # single-stream | offline
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
    # True when this case is its model's FP32 reference runtime: its drift compares two of its own runs, so
    # reports show "reference" in the drift cells, not a measured drift of 0
    is_reference: bool = False
    # False when the reference runtime's FP32 outputs differed between two runs on the same feed: the drift
    # figures are then marked "nondeterministic reference" (None: not checked, e.g. older results)
    reference_deterministic: bool | None = None

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

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["case"] = self.case.as_dict()
        d["id"] = self.case.id
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "CaseResult":
        known = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in d.items() if k in known and k != "case"}
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


# Upgrade functions: MIGRATIONS[n] turns a version-n document into version n+1.
MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {}


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
