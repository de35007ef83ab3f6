"""`harness qualify SPEC.toml`: judge a spec's requirements on its run into a PASS/FAIL certificate (the cases
run in harness.execution.qualify_run)."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import math
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import HarnessError, UsageError
from harness.gating.unjudged import CONTENDED, TOO_FEW_SAMPLES, unjudged_line
from harness.gating.verdicts import EXIT_CLEAN, EXIT_REGRESSION, EXIT_UNJUDGED, Verdict
from harness.precision import Precision
from harness.results.schema import CaseId, CaseResult, RunResults
from harness.results.stats import LatencyStats, quoted, too_few_text
from harness.results.stored import RunEnvironmentRecord, read_toml


class SpecError(UsageError):
    """A qualification spec that cannot be used; the message names the file and the problem."""


def _latency(figure: Callable[[LatencyStats], Any]) -> Callable[[CaseResult], Any]:
    """A requirement's reading of a case's latency statistics (None: not measured)."""
    return lambda r: None if r.latency is None else figure(r.latency)


def _rcv(r: CaseResult) -> float:
    """A case's robust CV (nan: not stored)."""
    v = None if r.latency is None else r.latency.rcv
    return float("nan") if v is None else v


def _accuracy(key: str) -> Callable[[CaseResult], float | None]:
    def get(r: CaseResult) -> float | None:
        v = (r.accuracy or {}).get(key)
        return float(v) if isinstance(v, (str, int, float)) and not isinstance(v, bool) else None
    return get


@dataclass(frozen=True)
class Requirement:
    """One requirement kind: a spec key, what it reads from a CaseResult, and how it compares."""

    key: str
    label: str
    unit: str
    read: Callable[[CaseResult], Any]
    kind: str  # "max" (measured <= limit), "min" (measured >= limit), "flag" (must be true)
    timing: bool = False  # a timing figure: inconclusive, never PASS or FAIL, where contention inflated it
    why_not: Callable[[CaseResult], str] | None = None  # a failed flag's reason (default "<label>: no")
    percentile: int | None = None  # a latency percentile: inconclusive from too few samples (stats.quoted)
    # contention can only move this figure one way (latency up, throughput down): a contended figure that meets the
    # limit has met it ("met under contention"); a spread (cv) or a noise flag can move either way and is not
    one_sided: bool = False


REQUIREMENTS: dict[str, Requirement] = {r.key: r for r in (
    Requirement("p50_ms_max", "latency p50", "ms", _latency(lambda s: s.p50_ms), "max", timing=True,
                percentile=50, one_sided=True),
    Requirement("p90_ms_max", "latency p90", "ms", _latency(lambda s: s.p90_ms), "max", timing=True,
                percentile=90, one_sided=True),
    Requirement("p95_ms_max", "latency p95", "ms", _latency(lambda s: s.p95_ms), "max", timing=True,
                percentile=95, one_sided=True),
    Requirement("p99_ms_max", "latency p99", "ms", _latency(lambda s: s.p99_ms), "max", timing=True,
                percentile=99, one_sided=True),
    Requirement("mean_ms_max", "latency mean", "ms", _latency(lambda s: s.mean_ms), "max", timing=True,
                one_sided=True),
    Requirement("throughput_sps_min", "throughput", "samples/s", lambda r: r.throughput_sps, "min", timing=True,
                one_sided=True),
    Requirement("gpu_peak_mb_max", "GPU memory peak", "MB", lambda r: r.gpu_peak_mb, "max"),
    Requirement("rel_l2_max", "drift rel L2", "", _accuracy("rel_l2"), "max"),
    Requirement("max_abs_max", "drift max |diff|", "", _accuracy("max_abs"), "max"),
    Requirement("cv_max", "plain coefficient of variation (std/mean)", "", _latency(lambda s: s.cv), "max",
                timing=True),
    Requirement("drift_within_tolerance", "drift within tolerance", "",
                lambda r: None if r.accuracy is None else bool(r.accuracy.get("passed")), "flag",
                why_not=lambda r: r.reason or "drift over tolerance"),
    Requirement("not_noisy", "no noisy measurement", "",
                _latency(lambda s: not s.noisy), "flag", timing=True,
                why_not=lambda r: f"noisy: robust CV {_rcv(r):.3f} over the noise limit"),
)}

_TOP_KEYS = {"name", "description", "measure", "defaults", "case", "fleet", "golden"}  # fleet, golden: their modules
_CASE_KEYS = {"model", "runtime", "precision", "batch", "seq", "require"}

# The [measure] table: (where, {key: TOML value}) -> {RunConfig field ("timing.X": a TimingPolicy field): value},
# parsed by the run options' own definitions (harness.options.qualify.spec_measure installs itself here when the
# options are imported, as the entry points do): gating never imports the options, and the table is not kept twice.
MeasureParser = Callable[[str, Mapping[str, Any]], dict[str, Any]]
_MEASURE_PARSER: list[MeasureParser] = []


def use_measure_parser(parse: MeasureParser) -> None:
    """Install the parser of specs' [measure] tables (harness.options.qualify does, on import)."""
    _MEASURE_PARSER[:] = [parse]


@dataclass(frozen=True)
class SpecCase:
    case: CaseId
    require: Mapping[str, Any]


@dataclass(frozen=True)
class QualifySpec:
    path: Path
    name: str
    description: str
    measure: Mapping[str, Any]  # [measure] as RunConfig field values ("timing.X": a TimingPolicy field)
    cases: tuple[SpecCase, ...]
    sha256: str


def _toml(path: Path) -> dict[str, Any]:
    return read_toml(path, SpecError, "spec file")


def _unknown(where: str, table: Mapping[str, Any], valid: set[str]) -> None:
    extra = sorted(set(table) - valid)
    if extra:
        raise SpecError(f"{where}: unknown key {extra[0]!r} (valid: {', '.join(sorted(valid))})")


def _number(where: str, key: str, v: Any, integer: bool = False, minimum: float = 0.0) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise SpecError(f"{where}: {key} = {v!r} is not a {'whole ' if integer else ''}number")
    if integer and not float(v).is_integer():
        raise SpecError(f"{where}: {key} = {v!r} is not a whole number")
    if v < minimum:
        raise SpecError(f"{where}: {key} = {v!r} is below {minimum:g}")
    return v


def _requirements(where: str, table: Any) -> dict[str, Any]:
    if not isinstance(table, dict):
        raise SpecError(f"{where}: require must be a table of requirement = value")
    _unknown(where, table, set(REQUIREMENTS))
    out: dict[str, Any] = {}
    for key, v in table.items():
        if REQUIREMENTS[key].kind == "flag":
            if not isinstance(v, bool):
                raise SpecError(f"{where}: {key} = {v!r} must be true or false")
            if v:
                out[key] = True
        else:
            out[key] = float(_number(where, key, v))
    return out


def load_spec(path: str | Path, case_id: Callable[[str, str, Precision, int, int | None], CaseId]) -> QualifySpec:
    """Parse and check a qualification spec; SpecError naming the file and the problem. `case_id(model, runtime,
    precision, batch, seq)`: the caller's case rule, `harness run`'s (harness.execution.qualify_run.spec_case):
    e.g. fp16 on torch-cpu is its bf16 case; UsageError for an unknown runtime."""
    path = Path(path)
    doc = _toml(path)
    where = str(path)
    _unknown(where, doc, _TOP_KEYS)
    name = doc.get("name", path.stem)
    description = doc.get("description", "")
    if not isinstance(name, str) or not isinstance(description, str):
        raise SpecError(f"{where}: name and description must be strings")
    settings = _measure_settings(where, doc.get("measure", {}))
    defaults = doc.get("defaults", {})
    if not isinstance(defaults, dict):
        raise SpecError(f"{where}: [defaults] must be a table")
    _unknown(f"{where}: [defaults]", defaults, {"require"})
    default_req = _requirements(f"{where}: [defaults.require]", defaults.get("require", {}))
    raw_cases = doc.get("case")
    if not isinstance(raw_cases, list) or not raw_cases:
        raise SpecError(f"{where}: no [[case]] tables: a spec lists at least one case")
    cases: list[SpecCase] = []
    seen: set[CaseId] = set()
    for i, rc in enumerate(raw_cases, 1):
        cw = f"{where}: case {i}"
        case = _spec_case(cw, rc, case_id)
        if case in seen:
            raise SpecError(f"{cw}: {case.id} is listed twice")
        seen.add(case)
        require = {**default_req, **_requirements(f"{cw}: require", rc.get("require", {}))}
        if not require:
            raise SpecError(f"{cw}: no requirements (give [case.require] or [defaults.require])")
        cases.append(SpecCase(case, require))
    return QualifySpec(path, name, description, settings, tuple(cases),
                       hashlib.sha256(path.read_bytes()).hexdigest())


def _measure_settings(where: str, measure: Any) -> dict[str, Any]:
    """The [measure] table as run settings, parsed by the option groups' parser (installed by harness.options);
    {} for none."""
    if not isinstance(measure, dict):
        raise SpecError(f"{where}: [measure] must be a table")
    if measure and not _MEASURE_PARSER:
        raise HarnessError(f"{where}: no parser of [measure] tables installed (import harness.options first)")
    try:
        return _MEASURE_PARSER[0](f"{where}: [measure]", measure) if measure else {}
    except UsageError as exc:
        raise SpecError(str(exc)) from None


def _spec_case(cw: str, rc: Any, case_id: Callable[[str, str, Precision, int, int | None], CaseId]) -> CaseId:
    """The case of one [[case]] table (`cw` names it in errors): its model, runtime, precision, batch and seq
    checked against the model, made a case by the caller's rule."""
    from harness.model import get_model

    if not isinstance(rc, dict):
        raise SpecError(f"{cw}: must be a table")
    _unknown(cw, rc, _CASE_KEYS)
    for key in ("model", "runtime", "batch"):
        if key not in rc:
            raise SpecError(f"{cw}: missing key {key!r}")
    try:
        spec = get_model(str(rc["model"]))
        runtime = str(rc["runtime"])
        precision = Precision.parse(str(rc.get("precision", "fp32")))
    except (UsageError, ValueError) as exc:
        raise SpecError(f"{cw}: {exc}") from None
    batch = int(_number(cw, "batch", rc["batch"], integer=True, minimum=1))
    if spec.batch_refusal(batch):
        raise SpecError(f"{cw}: {spec.batch_refusal(batch)}")
    seq = rc.get("seq")
    if spec.has_seq and seq is None:
        raise SpecError(f"{cw}: model {spec.name!r} has a sequence axis: give seq = N")
    if not spec.has_seq and seq is not None:
        raise SpecError(f"{cw}: model {spec.name!r} has no sequence axis: remove seq")
    seq = None if seq is None else int(_number(cw, "seq", seq, integer=True, minimum=1))
    try:
        return case_id(spec.name, runtime, precision, batch, seq)
    except (UsageError, ValueError) as exc:
        raise SpecError(f"{cw}: {exc}") from None


# ------------------------------------------------------------------ judging
@dataclass(frozen=True)
class RequirementResult:
    case_id: str
    requirement: str  # the spec key, e.g. p99_ms_max
    label: str
    limit: Any
    measured: Any
    unit: str
    passed: bool
    margin: float | None  # headroom in the unit: limit - measured for max, measured - limit for min
    margin_pct: float | None  # headroom in percent of the limit
    reason: str
    inconclusive: bool = False  # a timing figure that contention inflated: neither PASS nor FAIL
    unjudged: str = ""  # inconclusive: the short cause (harness.gating.unjudged: "contended", "too few samples")

    # as a row of harness.gating.unjudged (the one line and the exit status every deciding command shares)
    @property
    def metric(self) -> str:
        return self.requirement

    @property
    def verdict(self) -> Verdict:
        return Verdict.PASS if self.passed else Verdict.INCONCLUSIVE if self.inconclusive else Verdict.REGRESSED

    timing = True  # every requirement is gated

    @property
    def status(self) -> str:
        return "PASS" if self.passed else "INCONCLUSIVE" if self.inconclusive else "FAIL"

    def as_dict(self) -> dict[str, Any]:
        return {"case_id": self.case_id, "requirement": self.requirement, "label": self.label,
                "limit": self.limit, "measured": self.measured, "unit": self.unit, "status": self.status,
                "margin": self.margin, "margin_pct": self.margin_pct, "reason": self.reason}


def _judge_one(case_id: str, req: Requirement, limit: Any, result: CaseResult | None) -> RequirementResult:
    def out(passed: bool, measured: Any, reason: str, margin: float | None = None,
            pct: float | None = None) -> RequirementResult:
        return RequirementResult(case_id, req.key, req.label, limit, measured, req.unit, passed, margin, pct,
                                 reason)

    if result is None:
        return out(False, None, "case not in the results")
    if not result.measured:
        return out(False, None, f"case not measured: {result.status}" + (f": {result.reason}" if result.reason
                                                                            else ""))
    value = req.read(result)
    if value is None:
        return out(False, None, f"{req.label} was not measured in this run")
    contended = bool(result.contention and result.contention.contended)
    cause = (result.contention.cause if result.contention else None) or "contended"
    n = None if result.latency is None else result.latency.iterations
    few = req.percentile is not None and n is not None and not quoted(req.percentile, n)
    if req.timing and contended and req.one_sided and not few and req.kind in ("max", "min"):
        met = _limit(req, limit, value, case_id)
        if met.passed:  # the quiet figure can only be better: the limit is met
            return dataclasses.replace(met, reason=f"{met.reason}: met under contention (the quiet figure can only "
                                                   f"be better; {cause})")
        return RequirementResult(case_id, req.key, req.label, limit, value, req.unit, False, met.margin,
                                 met.margin_pct, f"inconclusive (contended): {met.reason} under contention, which "
                                 f"inflates it ({cause}); rerun on a quiet machine",
                                 inconclusive=True, unjudged=CONTENDED)
    if few:  # not quoted even quiet: the binding cause, contended or not
        return RequirementResult(case_id, req.key, req.label, limit, value, req.unit, False, None, None,
                                 f"inconclusive (too few samples): {too_few_text(req.percentile, int(n))}: not "
                                 f"judged; measure longer ([measure] min_time, min_iters)", inconclusive=True,
                                 unjudged=TOO_FEW_SAMPLES)
    if req.timing and contended:
        return RequirementResult(case_id, req.key, req.label, limit, value, req.unit, False, None, None,
                                 f"inconclusive (contended): {cause}; rerun on "
                                 "a quiet machine", inconclusive=True, unjudged=CONTENDED)
    if req.kind == "flag":
        ok = bool(value)
        return out(ok, ok, "yes" if ok else (req.why_not(result) if req.why_not else f"{req.label}: no"))
    return _limit(req, limit, value, case_id)


def _limit(req: Requirement, limit: Any, value: Any, case_id: str = "") -> RequirementResult:
    """A figure against a max or min limit: passed or failed, with its headroom."""
    value = float(value)
    if math.isnan(value):
        return RequirementResult(case_id, req.key, req.label, limit, value, req.unit, False, None, None,
                                 f"{req.label} is NaN")
    op, sign = (operator.le, 1.0) if req.kind == "max" else (operator.ge, -1.0)
    margin = sign * (limit - value)
    pct = 100.0 * margin / limit if limit else None
    sym = "<=" if req.kind == "max" else ">="
    ok = bool(op(value, limit))
    return RequirementResult(case_id, req.key, req.label, limit, value, req.unit, ok, margin, pct,
                             f"{value:.4g} {sym} {limit:g}" if ok else f"{value:.4g} is not {sym} {limit:g}")


@dataclass
class Certificate:
    """The PASS/FAIL record of a spec judged against one results file."""

    spec: QualifySpec
    results_path: Path
    results_sha256: str
    run: RunResults
    requirements: list[RequirementResult]
    generated_at: str = field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat(
        timespec="seconds"))

    @property
    def passed(self) -> bool:
        return bool(self.requirements) and all(r.passed for r in self.requirements)

    @property
    def verdict(self) -> str:
        """PASS; INCONCLUSIVE when nothing failed but a timing figure was not judged (contended, too few samples:
        not qualified, exit 3); else FAIL."""
        if self.passed:
            return "PASS"
        if self.requirements and all(r.passed or r.inconclusive for r in self.requirements):
            return "INCONCLUSIVE"
        return "FAIL"

    def unjudged_line(self) -> str | None:
        """How many requirements were not judged and which, in one line (None when all were)."""
        return unjudged_line(self.requirements, what="requirements", allowable=False) if self.verdict == "INCONCLUSIVE" else None

    @property
    def exit_code(self) -> int:
        """0 PASS, 1 FAIL, 3 INCONCLUSIVE (harness.gating.verdicts: could not judge; never qualified)."""
        verdict = self.verdict
        return EXIT_CLEAN if verdict == "PASS" else EXIT_UNJUDGED if verdict == "INCONCLUSIVE" else EXIT_REGRESSION

    def as_dict(self) -> dict[str, Any]:
        from harness import __version__

        return {"certificate": "inference-harness qualification", "verdict": self.verdict,
                "spec": {"name": self.spec.name, "description": self.spec.description,
                         "path": str(self.spec.path), "sha256": self.spec.sha256},
                "results": {"path": str(self.results_path), "sha256": self.results_sha256,
                            "run_id": self.run.run_id, "complete": self.run.complete},
                "machine": machine_fingerprint(self.run.environment),
                "requirements": [r.as_dict() for r in self.requirements],
                "passed": sum(r.passed for r in self.requirements), "total": len(self.requirements),
                "generated_at": self.generated_at, "harness_version": __version__}


_MACHINE_KEYS = ("machine", "hostname", "cpu_model", "cpu_cores_logical", "cpu_cores_physical",
                 "memory_total_gb", "os", "python", "machine_fingerprint", "cpu_busy_percent_at_start",
                 "cpu_quiet_at_start", "git")


def machine_fingerprint(env: RunEnvironmentRecord) -> dict[str, Any]:
    """CPU, GPU, driver, CUDA and library versions from a run's environment snapshot (as it is stored: its fields
    and open keys)."""
    snapshot = env.as_dict()
    out = {k: snapshot[k] for k in _MACHINE_KEYS if k in snapshot}
    for k, v in snapshot.items():  # GPU, driver and CUDA facts, whatever the snapshot names them
        if any(s in k.lower() for s in ("gpu", "cuda", "driver", "nvidia", "nvml")):
            out[k] = v
    out["libraries"] = {k: v for k, v in (env.libraries or {}).items() if v}
    out.setdefault("gpu", None)
    return out


def judge(spec: QualifySpec, run: RunResults, results_path: str | Path) -> Certificate:
    """Judge every requirement of `spec` on `run` (loaded from `results_path`, whose sha256 is recorded)."""
    results_path = Path(results_path)
    if results_path.is_dir():
        results_path = results_path / "results.json"
    digest = hashlib.sha256(results_path.read_bytes()).hexdigest()
    by_case = {r.case: r for r in run.cases}
    reqs = [_judge_one(sc.case.id, REQUIREMENTS[key], limit, by_case.get(sc.case))
            for sc in spec.cases for key, limit in sc.require.items()]
    return Certificate(spec, results_path, digest, run, reqs)


