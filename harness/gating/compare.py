"""Per case and metric verdicts of a current run against a baseline, decided from the raw samples."""

from __future__ import annotations

import dataclasses
import json
import math
import zlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness.display import speed_text
from harness.errors import HarnessError
from harness.gating.conformance import conformance_info, conformance_verdict
from harness.gating.gates import Gate, GateConfig
from harness.gating.unjudged import (
    CONTENDED,
    MODEL_CHANGED,
    OTHER_MACHINE,
    TOO_FEW_SAMPLES,
    decide_exit,
    gate_headline,
    unjudged_cause,
    unjudged_line,
)
from harness.gating.verdicts import FAILING, Verdict
from harness.metrics import METRICS
from harness.results.schema import BROKEN, CaseId, CaseResult, RunResults, _finite
from harness.results.stats import median_ns, min_samples, quoted
from harness.results.stored import RunEnvironmentRecord

METHOD = ("the gated latency statistic of each run is read in its least-disturbed measurement block (blocks "
          "after fresh activations, a matrix sweep apart); bootstrap (exact order-statistic resampling of every "
          "block) of the ratio current / baseline: regressed when the ratio exceeds 1 + T and its one-sided lower "
          "bound at the gate confidence exceeds 1 + T/2 (the bounds widened by the gate's run-to-run spread, "
          "run_sigma, per case where gate-check measured it); an effect without that evidence is noise; a percentile "
          "from fewer samples than it is quoted from (p99: 100 in the gated block) is inconclusive, not judged")


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
    sigma: float = 0.0  # the run-to-run spread folded into the bounds


def _order_statistic_bootstrap(sorted_x: np.ndarray, q: float, resamples: int,
                               rng: np.random.Generator) -> tuple[float, np.ndarray]:
    """The sample q-quantile (inverted-CDF definition) and `resamples` bootstrap replicates of it."""
    n = sorted_x.size
    k = min(n, max(1, math.ceil(q * n)))
    u = rng.beta(k, n - k + 1, size=resamples)
    idx = np.clip(np.ceil(u * n).astype(np.int64) - 1, 0, n - 1)
    return float(sorted_x[k - 1]), sorted_x[idx]


Samples = Sequence[int] | Sequence[float] | np.ndarray
Blocks = Sequence[Samples]


def as_blocks(samples_or_blocks: Samples | Blocks) -> list[np.ndarray]:
    """Sorted float64 blocks; a flat sequence of numbers is one block. Empty blocks are dropped."""
    items = list(samples_or_blocks)
    if items and isinstance(items[0], (Sequence, np.ndarray)) and not isinstance(items[0], (str, bytes)):
        blocks = [np.sort(np.asarray(b, dtype=np.float64)) for b in items]
    else:
        blocks = [np.sort(np.asarray(items, dtype=np.float64))]
    return [b for b in blocks if b.size]


def case_blocks(r: CaseResult) -> list[np.ndarray]:
    """A case's raw samples split into its measurement blocks (`CaseResult.blocks`, --repeats; failed blocks hold
    none); one block when the case has no (or inconsistent) block information."""
    sizes = r.block_sizes
    samples = np.asarray(r.samples_ns, dtype=np.float64)
    if not sizes or sum(sizes) != samples.size or min(sizes) < 1:
        return [samples]
    offsets = np.cumsum([0, *sizes])
    return [samples[a:z] for a, z in zip(offsets[:-1], offsets[1:])]


def _best_block_bootstrap(blocks: list[np.ndarray], q: float, resamples: int,
                          rng: np.random.Generator) -> tuple[float, np.ndarray, int]:
    """The least-disturbed block's q-quantile (minimum over blocks), its bootstrap replicates (the minimum over
    blocks of each block's replicate), and the index of that block."""
    stats, reps = [], []
    for b in blocks:
        stat, rep = _order_statistic_bootstrap(b, q, resamples, rng)
        stats.append(stat)
        reps.append(rep)
    best = int(np.argmin(stats))
    return stats[best], np.min(np.vstack(reps), axis=0), best


def compare_samples(baseline_ns: Samples | Blocks, current_ns: Samples | Blocks, gate: Gate,
                    confidence: float = 0.99, resamples: int = 10_000, seed: int = 0,
                    run_sigma: float = 0.0, history: Sequence[Samples | Blocks] = ()) -> SampleComparison:
    """Verdict of one latency gate on two runs' raw samples (nanoseconds; lower is better), each given flat
    (one block) or as its measurement blocks; each run's statistic is read in its least-disturbed block.

    `run_sigma` is the machine's run-to-run spread of the statistic (standard deviation of its logarithm
    between runs, as `harness gate-check` estimates it). `history`: older runs of a multi-run baseline; the
    baseline's statistic is then the median over its K runs, and the spread measured between them (sd of the
    log of each run's statistic) replaces `run_sigma` where larger. Each bootstrap replicate of the log ratio
    gets a N(0, sigma^2 (1 + 1/K)) offset (one current run against the median of K), so the bounds cover
    between-run variation as well as the sampling within each block.
    """
    c_blocks = as_blocks(current_ns)
    base_runs = [as_blocks(x) for x in (*history, baseline_ns)]
    if not c_blocks or not all(base_runs):
        raise ValueError("compare_samples needs samples on both sides")
    rng = np.random.default_rng(seed)
    b_stat, b_boot, b_size, measured_sigma = _baseline_statistic(base_runs, gate.quantile, resamples, rng)
    c_stat, c_boot, c_best = _best_block_bootstrap(c_blocks, gate.quantile, resamples, rng)
    # a sample of 0 ns (a clock too coarse for the call) counts as 1 ns: ratios stay finite
    c_stat = max(c_stat, 1.0)
    b_boot, c_boot = np.maximum(b_boot, 1.0), np.maximum(c_boot, 1.0)
    k = len(base_runs)
    sigma = max(run_sigma, measured_sigma)
    log_ratios = np.log(c_boot) - np.log(b_boot)
    if sigma > 0:
        log_ratios = log_ratios + rng.normal(0.0, sigma * math.sqrt(1.0 + 1.0 / k), size=resamples)
    ratios = np.exp(log_ratios)
    ratio = c_stat / b_stat
    lo, hi = (float(v) for v in np.quantile(ratios, [1.0 - confidence, confidence]))
    name = gate.statistic
    if len(base_runs[-1]) > 1 or len(c_blocks) > 1:
        name += f" (best of {len(base_runs[-1])}/{len(c_blocks)} blocks)"
    if k > 1:
        name += f" vs the median of {k} baseline runs (their spread: sigma {measured_sigma:.3f})"
    v, why, p = _verdict(gate, name, ratio, ratios, (lo, hi), (b_size, c_blocks[c_best].size))
    return SampleComparison(v, b_stat / 1e6, c_stat / 1e6, ratio, lo, hi, p, why, sigma)


def _baseline_statistic(base_runs: list[list[np.ndarray]], q: float, resamples: int, rng: np.random.Generator
                        ) -> tuple[float, np.ndarray, int, float]:
    """The baseline's q-quantile over its runs (oldest first; each run's least-disturbed block, the median over the
    runs, at least 1 ns), its bootstrap replicates, the size of the newest run's block it was read in, and the
    spread between the runs (sd of the log of each run's statistic; 0.0 for one run)."""
    per_run = [_best_block_bootstrap(blocks, q, resamples, rng) for blocks in base_runs]
    stats = np.maximum([p[0] for p in per_run], 1.0)
    b_boot = np.median(np.vstack([p[1] for p in per_run]), axis=0) if len(per_run) > 1 else per_run[0][1]
    spread = float(np.std(np.log(stats), ddof=1)) if len(base_runs) > 1 else 0.0
    return float(np.median(stats)), b_boot, base_runs[-1][per_run[-1][2]].size, spread


def _verdict(gate: Gate, name: str, ratio: float, ratios: np.ndarray, bounds: tuple[float, float],
             sizes: tuple[int, int]) -> tuple[Verdict, str, float]:
    """The verdict of the point `ratio` (current / baseline statistic `name`) with its reason and p-value: past
    the gate's threshold T either way, significant when the bound on that side clears 1 + T/2 (or 1 / (1 + T/2));
    not judged when a block of `sizes` (baseline, current) has too few samples for the gate's percentile."""
    lo, hi = bounds
    t = gate.threshold
    worse_bar, better_bar = 1.0 + t / 2.0, 1.0 / (1.0 + t / 2.0)
    p_worse = float(np.mean(ratios <= worse_bar))  # small: strong evidence of a slowdown past 1 + T/2
    p_better = float(np.mean(ratios >= better_bar))
    few = _few_samples_note(gate, *sizes)
    pct = speed_text(ratio)  # "+12.3%" under 2x either way, "7.5x faster" / "3.1x slower" beyond
    unquoted = _too_few_for_gate(gate, *sizes)
    if unquoted:  # a percentile the report calls n/a is not judged either way
        return Verdict.INCONCLUSIVE, f"inconclusive (too few samples): {name} {pct}: {unquoted}", p_worse
    if ratio > 1.0 + t:
        if lo > worse_bar:
            return Verdict.REGRESSED, f"{name} {pct}: over {t:.0%}, lower bound {lo:.3f} > {worse_bar:.3f}", \
                p_worse
        return Verdict.NOISE, f"{name} {pct} over {t:.0%} but not significant: lower bound " \
                              f"{lo:.3f} <= {worse_bar:.3f}{few}", p_worse
    if ratio < 1.0 / (1.0 + t):
        if hi < better_bar:
            return Verdict.IMPROVED, f"{name} {pct}: upper bound {hi:.3f} < {better_bar:.3f}", p_better
        return Verdict.NOISE, f"{name} {pct} better but not significant: upper bound " \
                              f"{hi:.3f} >= {better_bar:.3f}{few}", p_better
    return Verdict.PASS, f"{name} {pct} within {t:.0%}", p_worse


DISTURBED_SIGMA = 0.05  # block medians spread wider than this: the reason says interference hit some blocks


def block_sigma(r: CaseResult) -> float | None:
    """The spread of a case's block medians (sd of their logarithm; None for fewer than two blocks): shown
    with the verdict as a sign of interference during the run. The gate reads the least-disturbed block, so
    this spread is information, not part of the bounds."""
    blocks = case_blocks(r)
    if len(blocks) < 2:
        return None
    return float(np.std(np.log([max(median_ns(b), 1.0) for b in blocks]), ddof=1))


def _too_few_for_gate(gate: Gate, nb: int, nc: int) -> str:
    """Why a gate's percentile is not judged ("" when it is): a gated block with fewer samples than the percentile
    is quoted from (harness.results.stats.min_samples: p99 100, p95 20, p90 10, median 2)."""
    q = round(gate.quantile * 100, 6)
    if quoted(q, min(nb, nc)):
        return ""
    sides = ", ".join(f"{side} {n}" for side, n in (("baseline", nb), ("current", nc)) if not quoted(q, n))
    return (f"the {gate.statistic} needs {min_samples(q)} samples in the gated block, {sides}: not judged; "
            f"measure longer (--min-time, --min-iters)")


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
    baseline: float | None = None  # in the metric's unit (harness.metrics.METRICS[metric].unit)
    current: float | None = None
    ratio: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    p_value: float | None = None
    threshold: float | None = None  # the gate's threshold as a fraction
    unit: str = ""
    reason: str = ""
    timing: bool = False  # a measured time: more measurement blocks can confirm or clear it (--confirm)
    # a gated row that was not judged: its cause in a few words (harness.gating.unjudged: "contended", "too few
    # samples", "model changed", ...); "" when judged. Such a row is never a pass: the command exits 3
    unjudged: str = ""

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
                "threshold": self.threshold, "unit": self.unit, "reason": self.reason, "timing": self.timing,
                "unjudged": self.unjudged}


@dataclass
class Comparison:
    """All verdicts of a current run against a baseline. Truthy when nothing regressed or broke."""

    records: list[VerdictRecord]
    baseline_label: str
    current_label: str
    gates: GateConfig
    notes: list[str] = field(default_factory=list)
    method: str = METHOD
    allow_unjudged: bool = False  # --allow-unjudged: a gated row that was not judged does not change the exit

    @property
    def exit_code(self) -> int:
        """0 clean, 1 a regression or a broken case, 3 a gated row not judged (unless allow_unjudged)."""
        return decide_exit(self.records, self.allow_unjudged)

    @property
    def unjudged(self) -> list[VerdictRecord]:
        """The gated rows that were not judged (contended, too few samples, a changed model, ...)."""
        return [r for r in self.records if unjudged_cause(r)]

    def unjudged_line(self) -> str | None:
        """How many gated rows were not judged and which, in one line (None when every one was)."""
        return unjudged_line(self.records, self.allow_unjudged)

    def __bool__(self) -> bool:
        return self.exit_code == 0

    def counts(self) -> dict[str, int]:
        c = Counter(r.verdict for r in self.records)
        # `inconclusive` only where there is one: comparisons of uncontended runs read as they always did
        return {v.value: c.get(v, 0) for v in Verdict if v is not Verdict.INCONCLUSIVE or c.get(v)}

    def failing(self) -> list[VerdictRecord]:
        return [r for r in self.records if r.failing]

    def regressed_timings(self) -> set[str]:
        """Ids of the cases judged regressed on a measured time (what --confirm measures again)."""
        return {r.case_id for r in self.records if r.verdict is Verdict.REGRESSED and r.timing}

    def summary(self) -> str:
        """The gate's state and counts in the wording every deciding command shares (unjudged.gate_headline)."""
        return f"{gate_headline(self.records, self.allow_unjudged)} ({self.gates.describe()})"

    def as_dict(self) -> dict[str, Any]:
        return {"baseline": self.baseline_label, "current": self.current_label, "exit_code": self.exit_code,
                "counts": self.counts(), "gates": self.gates.as_dict(), "method": self.method,
                "unjudged": len(self.unjudged), "unjudged_line": self.unjudged_line(),
                "allow_unjudged": self.allow_unjudged,
                "gate_measured": self.gates.measured_line(),
                "notes": list(self.notes), "records": [r.as_dict() for r in self.records]}


def comparison_json(comparison: Comparison) -> str:
    """`Comparison.as_dict()` as JSON (NaN written as the string "nan", like results.json)."""
    return json.dumps(_finite(comparison.as_dict()), indent=1)


# ------------------------------------------------------------------ comparability
def machine_identity(env: RunEnvironmentRecord) -> dict[str, Any]:
    """What must match for timings to be comparable: CPU model, core counts, threads, GPUs."""
    threads = env.threads or {}
    return {"cpu_model": env.cpu_model, "cpu_cores_logical": env.cpu_cores_logical,
            "harness_threads": threads.get("harness_threads") if isinstance(threads, dict) else None,
            "gpu": _gpu_names(env)}


def _gpu_names(env: RunEnvironmentRecord) -> tuple[str, ...] | None:
    """GPU names from whatever GPU section the snapshot has (`gpus` list, `gpu` dict/str); None if absent."""
    for v in (env.extra("gpus"), env.gpu):
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


def machine_differences(base_env: RunEnvironmentRecord, cur_env: RunEnvironmentRecord) -> list[str]:
    a, b = machine_identity(base_env), machine_identity(cur_env)
    return [f"{k} {a[k]!r} vs {b[k]!r}" for k in a if a[k] != b[k]]


def library_differences(base_env: RunEnvironmentRecord, cur_env: RunEnvironmentRecord) -> list[str]:
    a, b = base_env.libraries or {}, cur_env.libraries or {}
    return [f"{k} {a.get(k)} -> {b.get(k)}" for k in sorted(set(a) | set(b))
            if a.get(k) != b.get(k) and k != "inference-harness"]


def _case_mismatch(b: CaseResult, c: CaseResult) -> str:
    reasons = []
    if b.model_fingerprint and c.model_fingerprint and b.model_fingerprint != c.model_fingerprint:
        reasons.append(f"model fingerprint {b.model_fingerprint} vs {c.model_fingerprint}")
    br, cr = b.precision_recipe, c.precision_recipe
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
    drift = METRICS["drift"]
    kw = {"baseline": _rel_l2(b), "current": _rel_l2(c), "unit": drift.unit}
    if b.status == "passed" and c.status == "failed":
        return VerdictRecord(c.case, drift.key, Verdict.REGRESSED, reason=f"drift now over tolerance: {c.reason}",
                             **kw)
    if b.status == "failed" and c.status == "passed":
        return VerdictRecord(c.case, drift.key, Verdict.IMPROVED, reason="drift back within tolerance", **kw)
    if b.status == "failed":
        return VerdictRecord(c.case, drift.key, Verdict.PASS, reason=f"over tolerance in both runs: {c.reason}",
                             **kw)
    return VerdictRecord(c.case, drift.key, Verdict.PASS, reason="within tolerance in both runs", **kw)


def _status_text(r: CaseResult) -> str:
    return f"{r.status}: {r.reason}" if r.reason else r.status


class NothingInCommon(HarnessError):
    """The baseline and the current run share no case: no verdict could say anything (exit 2, not "OK")."""


def compare_runs(baseline: RunResults | Sequence[RunResults], current: RunResults, gates: GateConfig | None = None,
                 baseline_label: str = "baseline", current_label: str = "current",
                 allow_unjudged: bool = False) -> Comparison:
    """Verdicts per case and metric of `current` against `baseline`: one run, or the runs of a multi-run
    baseline oldest first (`load_baseline_runs`). Case states (broke, fixed, new) and drift are judged against
    the newest baseline run; latency against every baseline run that measured the case comparably.
    NothingInCommon when the newest baseline run and `current` share no case. A gated row that could not be
    judged (contended, too few samples, a changed model fingerprint, another machine) makes the exit status 3
    unless `allow_unjudged`."""
    gates = gates or GateConfig()
    runs = [baseline] if isinstance(baseline, RunResults) else list(baseline)
    if not runs:
        raise ValueError("compare_runs needs at least one baseline run")
    baseline = runs[-1]
    history, notes = _baseline_history(runs)
    run_reason, env_notes = _environment_reason(baseline, current, gates)
    notes += env_notes
    if not baseline.complete:
        notes.append("the baseline run is incomplete: cases it lacks are new")
    if not current.complete:
        notes.append("the current run is incomplete: cases it lacks are not_comparable")

    base = {r.case: r for r in baseline.cases}
    cur = {r.case: r for r in current.cases}
    if not set(base) & set(cur):
        def some(cases: dict[CaseId, CaseResult]) -> str:
            return f"{len(cases)} case(s)" + (f", e.g. {next(iter(cases)).id}" if cases else "")

        raise NothingInCommon(f"{baseline_label} and {current_label} have no case in common (baseline "
                              f"{some(base)}; current {some(cur)}): nothing to gate; compare runs of the same "
                              f"models, runtimes, precisions and shapes")
    stray = sorted(set(gates.model_gates) - {k.model for k in list(base) + list(cur)})
    if stray:
        notes.append(f"gate overrides name models in neither run (a typo?): {', '.join(stray)}")
    records: list[VerdictRecord] = []
    for key in list(base) + [k for k in cur if k not in base]:
        b, c = base.get(key), cur.get(key)
        records.extend(_case_records(key, b, c, gates, run_reason, history.get(key, [])))
    return Comparison(records, baseline_label, current_label, gates, notes, allow_unjudged=allow_unjudged)


def _baseline_history(runs: Sequence[RunResults]) -> tuple[dict[CaseId, list[CaseResult]], list[str]]:
    """The measured cases of the older runs of a multi-run baseline (oldest first; the newest run is the
    baseline itself) by case, those from another machine than the newest left out, and the notes saying so."""
    baseline = runs[-1]
    notes: list[str] = []
    history: dict[CaseId, list[CaseResult]] = {}
    for old in runs[:-1]:
        differ = machine_differences(old.environment, baseline.environment)
        if differ:
            notes.append(f"baseline run {old.run_id} left out: a different machine from the newest baseline run "
                         f"({'; '.join(differ)})")
            continue
        for r in old.cases:
            if r.measured:
                history.setdefault(r.case, []).append(r)
    if len(runs) > 1:
        notes.append(f"baseline of {len(runs)} runs ({', '.join(r.run_id for r in runs)}): latency compared with "
                     "the median of their statistics, their spread measured per case")
    return history, notes


def _environment_reason(baseline: RunResults, current: RunResults, gates: GateConfig) -> tuple[str, list[str]]:
    """Why no measured case of the two runs can be judged ("" when they can: same machine, and the same
    libraries where the gates are strict about them), and the notes on what differs but is compared anyway."""
    machine = machine_differences(baseline.environment, current.environment)
    libs = library_differences(baseline.environment, current.environment)
    if machine:
        return "different machine: " + "; ".join(machine), []
    if libs and gates.strict_libraries:
        return "different library versions (strict_libraries): " + "; ".join(libs), []
    return "", ["library versions differ (compared anyway): " + "; ".join(libs)] if libs else []


def contended_runs(b: CaseResult, c: CaseResult) -> str:
    """Which of the two measurements contention inflated, with the cause in words ("" when neither)."""
    out = []
    for name, r in (("baseline", b), ("current", c)):
        info = r.contention
        if info and info.contended:
            out.append(f"{name}: {info.cause or 'contended'}")
    return "; ".join(out)


def one_sided(s: SampleComparison, b: CaseResult, c: CaseResult, contended: str
              ) -> tuple[SampleComparison, str]:
    """A verdict on stored figures that contention inflated, judged one-sidedly (contention only makes latency
    higher): with only tonight's figure contended, a pass or an improvement stands (the quiet figure can only be
    better: the ratio only lower); with only the baseline's contended, a regression stands (its quiet figure can
    only be lower: the ratio only higher). Anything else is inconclusive (contended), its figures kept. Returns the
    comparison and the unjudged cause ("" when it stands)."""
    b_hit, c_hit = bool(b.contention and b.contention.contended), bool(c.contention and c.contention.contended)
    if c_hit and not b_hit and s.verdict in (Verdict.PASS, Verdict.IMPROVED):
        return dataclasses.replace(s, reason=f"{s.reason}; met under contention (the quiet figure can only be "
                                             f"better): {contended}"), ""
    if b_hit and not c_hit and s.verdict is Verdict.REGRESSED:
        return dataclasses.replace(s, reason=f"{s.reason}; met under contention (the baseline's quiet figure can "
                                             f"only be lower, the change only larger): {contended}"), ""
    return dataclasses.replace(s, verdict=Verdict.INCONCLUSIVE,
                               reason=f"inconclusive (contended): {contended}; the samples said: {s.reason}"), \
        CONTENDED


def _unjudged_figures(key: CaseId, b: CaseResult, c: CaseResult, gates: GateConfig, why: str,
                      cause: str) -> list[VerdictRecord]:
    """Rows not judged for `cause` (a changed model, another machine) that still show their evidence: per gate,
    both runs' statistics, the ratio and its bounds, as the samples gave them."""
    out = []
    for gate in gates.gates_for(key.model):
        metric = METRICS[gate.metric]
        s = compare_samples(case_blocks(b), case_blocks(c), gate, gates.confidence, gates.resamples,
                            _seed(gates.seed, key, gate.metric))
        out.append(VerdictRecord(key, metric.key, Verdict.NOT_COMPARABLE, s.baseline, s.current, s.ratio, s.ci_low,
                                 s.ci_high, None, gate.threshold, metric.unit,
                                 f"not judged ({cause}): {why}; the figures: {s.reason}", timing=True,
                                 unjudged=cause))
    return out or [VerdictRecord(key, "case", Verdict.NOT_COMPARABLE, reason=why, unjudged=cause)]


def compare_case(baseline: CaseResult, current: CaseResult, gates: GateConfig) -> list[VerdictRecord]:
    """The verdicts of one case measured twice (e.g. on two releases of its runtime), as compare_runs gives
    them, under the baseline's case id."""
    return _case_records(baseline.case, baseline, current, gates, "")


def _case_records(key: CaseId, b: CaseResult | None, c: CaseResult | None, gates: GateConfig,
                  run_reason: str, older: Sequence[CaseResult] = ()) -> list[VerdictRecord]:
    settled = _state_records(key, b, c, gates, run_reason)
    if settled is not None:
        return settled
    assert b is not None and c is not None
    out = _latency_records(key, b, c, gates, older)
    if gates.drift:
        out.append(_drift_record(b, c))
    return out


def _state_records(key: CaseId, b: CaseResult | None, c: CaseResult | None, gates: GateConfig,
                   run_reason: str) -> list[VerdictRecord] | None:
    """The rows of a case its states decide (absent from a run, conformance, another machine, broke, fixed, new,
    a changed case); None when both runs measured it comparably and its latency is to be judged."""
    def one(verdict: Verdict, reason: str) -> list[VerdictRecord]:
        return [VerdictRecord(key, "case", verdict, reason=reason)]

    if c is None:
        return one(Verdict.NOT_COMPARABLE, "not in the current run")
    if b is None:
        return one(Verdict.NEW, f"not in the baseline (now {_status_text(c)})")
    if conformance_info(b) is not None or conformance_info(c) is not None:  # correctness: any machine, no timing
        verdict, reason = conformance_verdict(b, c)
        return [VerdictRecord(key, "conformance", verdict, reason=reason)]
    if run_reason and (b.measured or c.measured):
        if b.measured and c.measured and run_reason.startswith("different machine"):
            # figures from another machine say nothing about this one: the gated case was not judged, its figures
            # shown (both runs' statistics and their ratio)
            return _unjudged_figures(key, b, c, gates, run_reason, OTHER_MACHINE)
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
        # a changed model is what a nightly gate exists to judge: stored figures of the old one cannot, so the
        # row is not judged (the re-measuring gate, `harness gate`, measures both models tonight)
        if "model fingerprint" in mismatch:  # both models' figures and their ratio, not judged
            return _unjudged_figures(key, b, c, gates, mismatch, MODEL_CHANGED)
        return [VerdictRecord(key, "case", Verdict.NOT_COMPARABLE, reason=mismatch)]
    return None


def _latency_records(key: CaseId, b: CaseResult, c: CaseResult, gates: GateConfig,
                     older: Sequence[CaseResult]) -> list[VerdictRecord]:
    """One row per latency gate of the case's model, judged on both runs' blocks (and the comparable `older`
    baseline runs'), with what the reader should know beside the verdict: noise, blocks that differ or
    disagree, contention, an assumed run-to-run spread."""
    out = []
    noisy = [name for name, r in (("baseline", b), ("current", c)) if r.latency is not None and r.latency.noisy]
    run_sigma = gates.sigma_for(key.id)
    b_blocks, c_blocks = case_blocks(b), case_blocks(c)
    history = [case_blocks(r) for r in older if not _case_mismatch(r, c)]
    if len(b_blocks) != len(c_blocks):
        notes_for_case = f" [blocks differ: {len(b_blocks)} in the baseline, {len(c_blocks)} now (--repeats)]"
    else:
        notes_for_case = ""
    disturbed = [f"{name} {x:.2f}" for name, x in (("baseline", block_sigma(b)), ("current", block_sigma(c)))
                 if x is not None and x > DISTURBED_SIGMA]
    if disturbed:
        notes_for_case += f" [blocks disagree (sd of log block medians): {', '.join(disturbed)}; read in the best]"
    contended = contended_runs(b, c)
    for gate in gates.gates_for(key.model):
        metric = METRICS[gate.metric]
        s = compare_samples(b_blocks, c_blocks, gate, gates.confidence, gates.resamples,
                            _seed(gates.seed, key, gate.metric), run_sigma, history)
        cause = TOO_FEW_SAMPLES if s.verdict is Verdict.INCONCLUSIVE else ""
        if contended and s.verdict is not Verdict.INCONCLUSIVE:
            s, cause = one_sided(s, b, c, contended)
        reason = s.reason + (f" [noisy measurement: {', '.join(noisy)}]" if noisy else "") + notes_for_case
        if run_sigma > 0 and s.sigma <= run_sigma:
            reason += f" [run-to-run spread assumed by the gate config: sigma {run_sigma:.3f}]"
        out.append(VerdictRecord(key, metric.key, s.verdict, s.baseline, s.current, s.ratio, s.ci_low,
                                 s.ci_high, s.p_value, gate.threshold, metric.unit, reason, timing=True,
                                 unjudged=cause))
    return out
