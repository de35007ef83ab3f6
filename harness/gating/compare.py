"""Per case and metric verdicts of a current run against a baseline, decided from the raw samples.

Method (see README "Regression gating"): for a gate `STAT:T` (e.g. median:10%) the ratio of the statistic,
current / baseline, must exceed 1 + T (the effect) AND a one-sided bootstrap bound of that ratio at the gate's
confidence (default 0.99) must exceed 1 + T/2 (the evidence) before a case is `regressed`; an effect without
the evidence is `noise`. The bootstrap is exact and vectorised: the k-th order statistic of n draws with
replacement from the sorted samples x is x[ceil(n U) - 1] with U ~ Beta(k, n - k + 1), so each resample costs
one Beta draw whatever n is. Seeded per (seed, case, metric): the same inputs always give the same verdict.
"""

from __future__ import annotations

import json
import math
import zlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness.gating.gates import Gate, GateConfig
from harness.gating.verdicts import FAILING, Verdict
from harness.results.schema import BROKEN, CaseId, CaseResult, RunResults, _finite

METHOD = ("bootstrap (exact order-statistic resampling) of the ratio of the gated latency statistic, "
          "current / baseline: regressed when the ratio exceeds 1 + T and its one-sided lower bound at the "
          "gate confidence exceeds 1 + T/2 (the bounds widened by the run-to-run spread: the larger of the gate's "
          "run_sigma and the spread of the case's block medians, each block measured after a fresh activation); "
          "an effect without that evidence is noise")


@dataclass(frozen=True)
class SampleComparison:
    """One statistic of two sample sets: point ratio, bootstrap bounds, one-sided p-value, verdict."""

    verdict: Verdict
    baseline: float  # the statistic in ms
    current: float
    ratio: float  # current / baseline (> 1: slower)
    ci_low: float  # one-sided lower bound of the ratio at `confidence`
    ci_high: float  # one-sided upper bound
    p_value: float  # bootstrap probability of no regression (ratio <= 1 + T/2), or of no improvement
    reason: str


def _order_statistic_bootstrap(sorted_x: np.ndarray, q: float, resamples: int,
                               rng: np.random.Generator) -> tuple[float, np.ndarray]:
    """The sample q-quantile (inverted-CDF definition) and `resamples` bootstrap replicates of it."""
    n = sorted_x.size
    k = min(n, max(1, math.ceil(q * n)))
    u = rng.beta(k, n - k + 1, size=resamples)
    idx = np.clip(np.ceil(u * n).astype(np.int64) - 1, 0, n - 1)
    return float(sorted_x[k - 1]), sorted_x[idx]


def compare_samples(baseline_ns: Sequence[float], current_ns: Sequence[float], gate: Gate,
                    confidence: float = 0.99, resamples: int = 10_000, seed: int = 0,
                    run_sigma: float = 0.0) -> SampleComparison:
    """Verdict of one latency gate on two raw sample sets (nanoseconds; lower is better).

    `run_sigma` is the machine's run-to-run spread of the statistic (standard deviation of its logarithm
    between runs, as `harness gate-check` estimates it): each bootstrap replicate of the log ratio gets a
    N(0, 2 run_sigma^2) offset, so the bounds cover between-run variation as well as within-run variation.
    """
    b = np.sort(np.asarray(baseline_ns, dtype=np.float64))
    c = np.sort(np.asarray(current_ns, dtype=np.float64))
    if b.size == 0 or c.size == 0:
        raise ValueError("compare_samples needs samples on both sides")
    rng = np.random.default_rng(seed)
    b_stat, b_boot = _order_statistic_bootstrap(b, gate.quantile, resamples, rng)
    c_stat, c_boot = _order_statistic_bootstrap(c, gate.quantile, resamples, rng)
    # a sample of 0 ns (a clock too coarse for the call) counts as 1 ns: ratios stay finite
    b_stat, c_stat = max(b_stat, 1.0), max(c_stat, 1.0)
    b_boot, c_boot = np.maximum(b_boot, 1.0), np.maximum(c_boot, 1.0)
    log_ratios = np.log(c_boot) - np.log(b_boot)
    if run_sigma > 0:
        log_ratios = log_ratios + rng.normal(0.0, math.sqrt(2.0) * run_sigma, size=resamples)
    ratios = np.exp(log_ratios)
    ratio = c_stat / b_stat
    lo, hi = (float(v) for v in np.quantile(ratios, [1.0 - confidence, confidence]))
    t = gate.threshold
    worse_bar, better_bar = 1.0 + t / 2.0, 1.0 / (1.0 + t / 2.0)
    p_worse = float(np.mean(ratios <= worse_bar))  # small: strong evidence of a slowdown past 1 + T/2
    p_better = float(np.mean(ratios >= better_bar))
    few = _few_samples_note(gate, b.size, c.size)
    pct = f"{(ratio - 1) * 100:+.1f}%"
    if ratio > 1.0 + t:
        if lo > worse_bar:
            v, why, p = Verdict.REGRESSED, f"{gate.statistic} {pct}: over {t:.0%}, lower bound {lo:.3f} > " \
                                           f"{worse_bar:.3f}", p_worse
        else:
            v, why, p = Verdict.NOISE, f"{gate.statistic} {pct} over {t:.0%} but not significant: lower bound " \
                                       f"{lo:.3f} <= {worse_bar:.3f}{few}", p_worse
    elif ratio < 1.0 / (1.0 + t):
        if hi < better_bar:
            v, why, p = Verdict.IMPROVED, f"{gate.statistic} {pct}: upper bound {hi:.3f} < {better_bar:.3f}", \
                p_better
        else:
            v, why, p = Verdict.NOISE, f"{gate.statistic} {pct} better but not significant: upper bound " \
                                       f"{hi:.3f} >= {better_bar:.3f}{few}", p_better
    else:
        v, why, p = Verdict.PASS, f"{gate.statistic} {pct} within {t:.0%}", p_worse
    return SampleComparison(v, b_stat / 1e6, c_stat / 1e6, ratio, lo, hi, p, why)


def block_sigma(r: CaseResult) -> float | None:
    """Run-to-run spread of a case measured in blocks (--repeats): the standard deviation of the logarithm of
    its block medians (each block after a fresh activation). None for fewer than two blocks."""
    sizes = (r.details or {}).get("blocks")
    if not sizes or len(sizes) < 2 or sum(sizes) != len(r.samples_ns) or min(sizes) < 1:
        return None
    offsets = np.cumsum([0, *sizes])
    medians = [max(float(np.median(r.samples_ns[a:z])), 1.0) for a, z in zip(offsets[:-1], offsets[1:])]
    return float(np.std(np.log(medians), ddof=1))


def _few_samples_note(gate: Gate, nb: int, nc: int) -> str:
    n = min(nb, nc)
    if n * (1.0 - gate.quantile) < 5:
        return f" ({n} samples leave fewer than 5 above the {gate.statistic}: measure longer)"
    return ""


@dataclass(frozen=True)
class VerdictRecord:
    """One verdict: a case and metric (`latency_median`, `latency_p99`, `drift`, or `case` for a whole case)."""

    case: CaseId
    metric: str
    verdict: Verdict
    baseline: float | None = None  # ms for latency metrics; rel_l2 for drift
    current: float | None = None
    ratio: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    p_value: float | None = None
    threshold: float | None = None  # the gate's threshold as a fraction
    unit: str = ""
    reason: str = ""

    @property
    def case_id(self) -> str:
        return self.case.id

    @property
    def failing(self) -> bool:
        return self.verdict in FAILING

    def as_dict(self) -> dict[str, Any]:
        return {"case_id": self.case.id, "case": self.case.as_dict(), "metric": self.metric,
                "verdict": self.verdict.value, "baseline": self.baseline, "current": self.current,
                "ratio": self.ratio, "ci_low": self.ci_low, "ci_high": self.ci_high, "p_value": self.p_value,
                "threshold": self.threshold, "unit": self.unit, "reason": self.reason}


@dataclass
class Comparison:
    """All verdicts of a current run against a baseline. Truthy when nothing regressed or broke."""

    records: list[VerdictRecord]
    baseline_label: str
    current_label: str
    gates: GateConfig
    notes: list[str] = field(default_factory=list)
    method: str = METHOD

    @property
    def exit_code(self) -> int:
        """0 clean, 1 a regression or a broken case."""
        return 1 if any(r.failing for r in self.records) else 0

    def __bool__(self) -> bool:
        return self.exit_code == 0

    def counts(self) -> dict[str, int]:
        c = Counter(r.verdict for r in self.records)
        return {v.value: c.get(v, 0) for v in Verdict}

    def failing(self) -> list[VerdictRecord]:
        return [r for r in self.records if r.failing]

    def summary(self) -> str:
        counts = ", ".join(f"{n} {v}" for v, n in self.counts().items() if n)
        state = "FAIL" if self.exit_code else "OK"
        return f"gate {state}: {counts or 'no cases'} ({self.gates.describe()})"

    def as_dict(self) -> dict[str, Any]:
        return {"baseline": self.baseline_label, "current": self.current_label, "exit_code": self.exit_code,
                "counts": self.counts(), "gates": self.gates.as_dict(), "method": self.method,
                "notes": list(self.notes), "records": [r.as_dict() for r in self.records]}


def comparison_json(comparison: Comparison) -> str:
    """`Comparison.as_dict()` as JSON (NaN written as the string "nan", like results.json)."""
    return json.dumps(_finite(comparison.as_dict()), indent=1)


# ------------------------------------------------------------------ comparability
def machine_identity(env: dict[str, Any]) -> dict[str, Any]:
    """What must match for timings to be comparable: CPU model, core counts, threads, GPUs."""
    threads = env.get("threads") or {}
    return {"cpu_model": env.get("cpu_model"), "cpu_cores_logical": env.get("cpu_cores_logical"),
            "harness_threads": threads.get("harness_threads") if isinstance(threads, dict) else None,
            "gpu": _gpu_names(env)}


def _gpu_names(env: dict[str, Any]) -> tuple[str, ...] | None:
    """GPU names from whatever GPU section the snapshot has (`gpus` list, `gpu` dict/str); None if absent."""
    for key in ("gpus", "gpu"):
        v = env.get(key)
        if v is None:
            continue
        items = v if isinstance(v, list) else [v]
        names = []
        for it in items:
            if isinstance(it, dict):
                names.append(str(it.get("name") or it.get("model") or sorted(it.items())))
            else:
                names.append(str(it))
        return tuple(names) or None
    return None


def machine_differences(base_env: dict[str, Any], cur_env: dict[str, Any]) -> list[str]:
    a, b = machine_identity(base_env), machine_identity(cur_env)
    return [f"{k} {a[k]!r} vs {b[k]!r}" for k in a if a[k] != b[k]]


def library_differences(base_env: dict[str, Any], cur_env: dict[str, Any]) -> list[str]:
    a, b = base_env.get("libraries") or {}, cur_env.get("libraries") or {}
    return [f"{k} {a.get(k)} -> {b.get(k)}" for k in sorted(set(a) | set(b))
            if a.get(k) != b.get(k) and k != "inference-harness"]


def _case_mismatch(b: CaseResult, c: CaseResult) -> str:
    reasons = []
    if b.model_fingerprint and c.model_fingerprint and b.model_fingerprint != c.model_fingerprint:
        reasons.append(f"model fingerprint {b.model_fingerprint} vs {c.model_fingerprint}")
    br, cr = getattr(b, "precision_recipe", None), getattr(c, "precision_recipe", None)
    if br != cr:
        reasons.append(f"precision recipe {br!r} vs {cr!r}")
    if b.timing_scope != c.timing_scope:
        reasons.append(f"timing scope {b.timing_scope} vs {c.timing_scope}")
    return "; ".join(reasons)


# ------------------------------------------------------------------ the comparison
def _seed(base_seed: int, case: CaseId, metric: str) -> int:
    return zlib.crc32(f"{base_seed}|{case.id}|{case.device}|{metric}".encode())


def _rel_l2(r: CaseResult) -> float | None:
    v = (r.accuracy or {}).get("rel_l2")
    if isinstance(v, str):  # "nan" / "inf" as stored
        return float(v)
    return float(v) if isinstance(v, (int, float)) else None


def _drift_record(b: CaseResult, c: CaseResult) -> VerdictRecord:
    bv, cv = _rel_l2(b), _rel_l2(c)
    kw = {"baseline": bv, "current": cv, "unit": "rel_l2"}
    if b.status == "passed" and c.status == "failed":
        return VerdictRecord(c.case, "drift", Verdict.REGRESSED, reason=f"drift now over tolerance: {c.reason}", **kw)
    if b.status == "failed" and c.status == "passed":
        return VerdictRecord(c.case, "drift", Verdict.IMPROVED, reason="drift back within tolerance", **kw)
    if b.status == "failed":
        return VerdictRecord(c.case, "drift", Verdict.PASS, reason=f"over tolerance in both runs: {c.reason}",
                             **kw)
    return VerdictRecord(c.case, "drift", Verdict.PASS, reason="within tolerance in both runs", **kw)


def _status_text(r: CaseResult) -> str:
    return f"{r.status}: {r.reason}" if r.reason else r.status


def compare_runs(baseline: RunResults, current: RunResults, gates: GateConfig | None = None,
                 baseline_label: str = "baseline", current_label: str = "current") -> Comparison:
    """Verdicts per case and metric of `current` against `baseline` (both loaded with `load_run`)."""
    gates = gates or GateConfig()
    notes: list[str] = []
    machine = machine_differences(baseline.environment, current.environment)
    libs = library_differences(baseline.environment, current.environment)
    run_reason = ""
    if machine:
        run_reason = "different machine: " + "; ".join(machine)
    elif libs and gates.strict_libraries:
        run_reason = "different library versions (strict_libraries): " + "; ".join(libs)
    elif libs:
        notes.append("library versions differ (compared anyway): " + "; ".join(libs))
    if not baseline.complete:
        notes.append("the baseline run is incomplete: cases it lacks are new")
    if not current.complete:
        notes.append("the current run is incomplete: cases it lacks are not_comparable")

    base = {r.case: r for r in baseline.cases}
    cur = {r.case: r for r in current.cases}
    stray = sorted(set(gates.model_gates) - {k.model for k in list(base) + list(cur)})
    if stray:
        notes.append(f"gate overrides name models in neither run (a typo?): {', '.join(stray)}")
    records: list[VerdictRecord] = []
    for key in list(base) + [k for k in cur if k not in base]:
        b, c = base.get(key), cur.get(key)
        records.extend(_case_records(key, b, c, gates, run_reason))
    return Comparison(records, baseline_label, current_label, gates, notes)


def _case_records(key: CaseId, b: CaseResult | None, c: CaseResult | None, gates: GateConfig,
                  run_reason: str) -> list[VerdictRecord]:
    def one(verdict: Verdict, reason: str) -> list[VerdictRecord]:
        return [VerdictRecord(key, "case", verdict, reason=reason)]

    if c is None:
        return one(Verdict.NOT_COMPARABLE, "not in the current run")
    if b is None:
        return one(Verdict.NEW, f"not in the baseline (now {_status_text(c)})")
    if run_reason and (b.measured or c.measured):
        return one(Verdict.NOT_COMPARABLE, run_reason)
    if not b.measured and not c.measured:
        if b.status == c.status == "skipped":
            return one(Verdict.NOT_COMPARABLE, f"skipped in both runs: {c.reason}")
        return one(Verdict.NOT_COMPARABLE, f"measured in neither run (baseline {b.status}, now {_status_text(c)})")
    if b.measured and not c.measured:
        if c.status in BROKEN:
            return one(Verdict.BROKE, f"measured in the baseline, now {_status_text(c)}")
        return one(Verdict.NOT_COMPARABLE, f"measured in the baseline, now {_status_text(c)}")
    if not b.measured:
        if b.status in BROKEN:
            return one(Verdict.FIXED, f"{b.status} in the baseline, now measured")
        return one(Verdict.NEW, f"{_status_text(b)} in the baseline, now measured")
    mismatch = _case_mismatch(b, c)
    if mismatch:
        return one(Verdict.NOT_COMPARABLE, mismatch)
    out = []
    noisy = [name for name, r in (("baseline", b), ("current", c)) if (r.latency or {}).get("noisy")]
    sigmas = [x for x in (block_sigma(b), block_sigma(c)) if x is not None]
    spread = math.sqrt(sum(x * x for x in sigmas) / len(sigmas)) if sigmas else 0.0
    run_sigma = max(gates.sigma_for(key.id), spread)
    for gate in gates.gates_for(key.model):
        s = compare_samples(b.samples_ns, c.samples_ns, gate, gates.confidence, gates.resamples,
                            _seed(gates.seed, key, gate.metric), run_sigma)
        reason = s.reason + (f" [noisy measurement: {', '.join(noisy)}]" if noisy else "")
        if spread > gates.sigma_for(key.id):
            reason += f" [run-to-run spread from the measurement blocks: sigma {spread:.3f}]"
        elif run_sigma > 0:
            reason += f" [run-to-run spread assumed by the gate config: sigma {run_sigma:.3f}]"
        out.append(VerdictRecord(key, gate.metric, s.verdict, s.baseline, s.current, s.ratio, s.ci_low,
                                 s.ci_high, s.p_value, gate.threshold, "ms", reason))
    if gates.drift:
        out.append(_drift_record(b, c))
    return out
