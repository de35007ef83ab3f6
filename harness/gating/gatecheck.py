"""`harness gate-check`: the gate's own false-alarm rate and detection power, measured on this machine."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from harness.gating.compare import compare_samples
from harness.gating.gates import GateConfig
from harness.gating.verdicts import Verdict
from harness.results.schema import CaseId
from harness.results.stats import median_ns

DEFAULT_LEVELS = (0.05, 0.10, 0.15, 0.20, 0.30)
MAX_SIGMA = 1.0  # GateConfig takes a run-to-run spread in [0, 1)
POWER_TARGET = 0.95

# measure(case, added_delay_s) -> one block's raw latency samples in ns
Measure = Callable[[CaseId, float], Sequence[int]]
Run = list[Sequence[int]]  # one simulated run: its blocks


@dataclass(frozen=True)
class LevelResult:
    level: float  # injected slowdown as a fraction of the case's median
    trials: int
    detected: int
    delays_us: dict[str, float]  # case id -> injected delay per inference

    @property
    def power(self) -> float:
        return self.detected / self.trials if self.trials else 0.0


@dataclass
class GateCheckResult:
    """What gate-check measured: false-alarm rate, power per injected level, smallest level with 95% power."""

    gates: GateConfig
    cases: list[str]
    rounds: int  # simulated runs per case
    aa_trials: int
    aa_false_alarms: int
    aa_noise: int
    levels: list[LevelResult]
    wall_s: float
    medians_ms: dict[str, float] = field(default_factory=dict)
    aa_spread: dict[str, float] = field(default_factory=dict)  # case -> max/min of the A runs' medians
    run_sigma: dict[str, float] = field(default_factory=dict)  # case -> sd of log(median) over the A runs
    a_run_medians_ms: dict[str, list[float]] = field(default_factory=dict)  # case -> each A run's median
    tuned: "GateCheckResult | None" = None  # the same samples re-scored with run_sigma = the suggested value
    repeats: int = 1  # blocks per simulated run
    machine: str = ""  # environment["machine"] of the measuring machine (set by the CLI)
    measured_at: str = ""  # UTC timestamp (set by the CLI)

    @property
    def suggested_run_sigma(self) -> float:
        """The largest per-case run-to-run spread: a `run_sigma` for the gate config on this machine."""
        return max(self.run_sigma.values(), default=0.0)

    @property
    def false_alarm_rate(self) -> float:
        return self.aa_false_alarms / self.aa_trials if self.aa_trials else 0.0

    @property
    def smallest_detected(self) -> float | None:
        for lv in sorted(self.levels, key=lambda x: x.level):
            if lv.power >= POWER_TARGET:
                return lv.level
        return None

    def as_dict(self) -> dict[str, Any]:
        return {"gates": self.gates.as_dict(), "cases": self.cases, "rounds": self.rounds, "repeats": self.repeats,
                "machine": self.machine, "measured_at": self.measured_at,
                "aa_trials": self.aa_trials, "aa_false_alarms": self.aa_false_alarms,
                "aa_noise": self.aa_noise, "false_alarm_rate": self.false_alarm_rate,
                "power_target": POWER_TARGET, "smallest_detected": self.smallest_detected,
                "levels": [{"level": lv.level, "trials": lv.trials, "detected": lv.detected, "power": lv.power,
                            "delays_us": lv.delays_us} for lv in self.levels],
                "medians_ms": self.medians_ms, "a_run_medians_ms": self.a_run_medians_ms,
                "aa_spread": self.aa_spread, "run_sigma": self.run_sigma,
                "suggested_run_sigma": self.suggested_run_sigma, "wall_s": self.wall_s,
                "tuned": None if self.tuned is None else self.tuned.scores()}

    def scores(self) -> dict[str, Any]:
        return {"run_sigma": self.gates.run_sigma, "aa_trials": self.aa_trials,
                "aa_false_alarms": self.aa_false_alarms, "false_alarm_rate": self.false_alarm_rate,
                "smallest_detected": self.smallest_detected,
                "levels": [{"level": lv.level, "trials": lv.trials, "detected": lv.detected, "power": lv.power}
                           for lv in self.levels]}


def _regressed(base: Run, cur: Run, case: CaseId, gates: GateConfig, trial: int) -> Verdict:
    """The worst verdict over the case's gates: regressed beats noise beats the rest."""
    verdicts = [compare_samples(base, cur, g, gates.confidence, gates.resamples, gates.seed + trial,
                                gates.sigma_for(case.id)).verdict for g in gates.gates_for(case.model)]
    if Verdict.REGRESSED in verdicts:
        return Verdict.REGRESSED
    return Verdict.NOISE if Verdict.NOISE in verdicts else Verdict.PASS


def _best_median(run: Run) -> float:
    return max(min(median_ns(b) for b in run), 1.0)


RunData = tuple[dict[CaseId, Run], dict[tuple[CaseId, float], Run], dict[CaseId, float]]


def _one_run(cases: Sequence[CaseId], measure: Measure, levels: Sequence[float], repeats: int,
             delays: dict[CaseId, float]) -> RunData:
    """One simulated run: `repeats` sweeps, each one block of every case as it is and per slowdown level.
    `delays` empty (the first run): each case's delay is set from its first A block."""
    delays = dict(delays)
    a: dict[CaseId, Run] = {c: [] for c in cases}
    slowed: dict[tuple[CaseId, float], Run] = {(c, lv): [] for c in cases for lv in levels}
    for _ in range(repeats):
        for case in cases:
            a[case].append(measure(case, 0.0))
            if case not in delays:
                delays[case] = median_ns(a[case][0]) / 1e9
            for lv in levels:
                slowed[(case, lv)].append(measure(case, lv * delays[case]))
    return a, slowed, delays


def gate_check(cases: Sequence[CaseId], gates: GateConfig, measure: Measure, rounds: int = 6,
               levels: Sequence[float] = DEFAULT_LEVELS, repeats: int = 1,
               progress: Callable[[str], None] = lambda line: None,
               execute: Callable[..., RunData] | None = None) -> GateCheckResult:
    """Simulate `rounds` runs of `repeats` blocks with `measure` and score the gate (see the module docstring).
    `execute(fn, *args)` runs one simulated run (default: here; the CLI gives
    harness.execution.gatecheck_run.SupervisedRuns.execute, a fresh worker per run)."""
    if rounds < 2:
        raise ValueError("gate-check needs at least 2 rounds (A/A pairs)")
    if not cases:
        raise ValueError("gate-check needs at least one case")
    repeats = max(1, int(repeats))
    t0 = time.perf_counter()
    a_runs: dict[CaseId, list[Run]] = {c: [] for c in cases}
    s_runs: dict[tuple[CaseId, float], list[Run]] = {(c, lv): [] for c in cases for lv in levels}
    delays: dict[CaseId, float] = {}
    for r in range(rounds):
        args = (cases, measure, levels, repeats, delays)
        a, slowed, delays = execute(_one_run, *args) if execute else _one_run(*args)
        for c in cases:
            a_runs[c].append(a[c])
        for key, blocks in slowed.items():
            s_runs[key].append(blocks)
        progress(f"run {r + 1}/{rounds} done ({time.perf_counter() - t0:.0f} s)")
    aa_trials, false_alarms, noise, results = _score(cases, a_runs, s_runs, delays, gates, rounds, levels)
    medians = {c.id: round(float(np.median([_best_median(x) for x in a_runs[c]])) / 1e6, 6) for c in cases}
    spread, sigma = {}, {}
    for c in cases:
        m = np.array([_best_median(x) for x in a_runs[c]])
        spread[c.id] = round(float(m.max() / m.min()), 4)
        sigma[c.id] = round(float(np.std(np.log(m), ddof=1)), 4)
    out = GateCheckResult(gates, [c.id for c in cases], rounds, aa_trials, false_alarms, noise, results,
                          round(time.perf_counter() - t0, 1), medians, spread, sigma, repeats=repeats)
    out.a_run_medians_ms = {c.id: [round(_best_median(x) / 1e6, 6) for x in a_runs[c]] for c in cases}
    if any(v > gates.sigma_for(k) for k, v in sigma.items()):
        # each case with its own measured spread (a microsecond case moves more between runs than a ms one)
        # a spread of 1 or more (medians a factor e apart: a machine busy with other work) is no gate setting
        tuned_gates = replace(gates, case_sigma={**gates.case_sigma, **{
            k: v for k, v in sigma.items() if gates.sigma_for(k) < v < MAX_SIGMA}})
        t_aa, t_fa, t_noise, t_levels = _score(cases, a_runs, s_runs, delays, tuned_gates, rounds, levels)
        out.tuned = GateCheckResult(tuned_gates, out.cases, rounds, t_aa, t_fa, t_noise, t_levels, out.wall_s,
                                    medians, spread, sigma, repeats=repeats)
    return out


def suggested_config(result: GateCheckResult) -> str:
    """A gate-config TOML with each case's measured run-to-run spread (`--gate-config` on compare/run)."""
    lines = ["# written by `harness gate-check`: each case's run-to-run spread (sd of log best-block median over "
             "the A runs), and what the check measured ([gate_check], shown with every verdict table)",
             f"gates = [{', '.join(repr(str(g)).replace(chr(39), chr(34)) for g in result.gates.gates)}]",
             f"confidence = {result.gates.confidence:g}", f"run_sigma = {result.gates.run_sigma:g}", "",
             "[run_sigma_cases]"]
    lines += [f'"{k}" = {v:g}' if v < MAX_SIGMA else f'# "{k}" = {v:g}: too spread to gate here (a gate config '
              f'takes a run_sigma below 1); measure it on a quieter machine' for k, v in sorted(result.run_sigma.items())]
    lines += ["", "[gate_check]", f"machine = {json.dumps(result.machine or '?')}",
              f"measured_at = {json.dumps(result.measured_at or '?')}", f"cases = {len(result.cases)}",
              f"runs = {result.rounds}", f"repeats = {result.repeats}", f"false_alarms = {result.aa_false_alarms}",
              f"trials = {result.aa_trials}", f"false_alarm_rate = {result.false_alarm_rate:.4f}"]
    if result.smallest_detected is not None:
        lines.append(f"smallest_detected = {result.smallest_detected:g}")
    t = result.tuned
    if t is not None:  # the same trials scored with the [run_sigma_cases] above (in-sample)
        lines += [f"with_case_sigma_false_alarm_rate = {t.false_alarm_rate:.4f}"]
        if t.smallest_detected is not None:
            lines.append(f"with_case_sigma_smallest_detected = {t.smallest_detected:g}")
    lines += ["", "[gate_check.power]"] + [f'"{lv.level:.0%}" = {lv.power:.4f}' for lv in result.levels]
    return "\n".join(lines) + "\n"


def _score(cases: Sequence[CaseId], a_runs: dict[CaseId, list[Run]],
           s_runs: dict[tuple[CaseId, float], list[Run]], delays: dict[CaseId, float],
           gates: GateConfig, rounds: int, levels: Sequence[float]) -> tuple[int, int, int, list[LevelResult]]:
    """False alarms over ordered A/A pairs and detections over (A, slowed) pairs under `gates`."""
    trial = 0
    false_alarms = noise = aa_trials = 0
    for case in cases:
        for i, j in itertools.permutations(range(rounds), 2):
            v = _regressed(a_runs[case][i], a_runs[case][j], case, gates, trial)
            trial += 1
            aa_trials += 1
            false_alarms += v is Verdict.REGRESSED
            noise += v is Verdict.NOISE
    results = []
    for lv in levels:
        detected = trials = 0
        for case in cases:
            for a, s in itertools.product(a_runs[case], s_runs[(case, lv)]):
                detected += _regressed(a, s, case, gates, trial) is Verdict.REGRESSED
                trial += 1
                trials += 1
        results.append(LevelResult(lv, trials, detected, {c.id: round(lv * delays[c] * 1e6, 2) for c in cases}))
    return aa_trials, false_alarms, noise, results


# ------------------------------------------------------------------ the same check for `harness ab`
# verdict_of(case, inject, trial) -> the A/B verdict of `case` against itself with B slowed by `inject` (a
# fraction of A's p50, 0 for A/A), its block order drawn with seed `trial`
AbVerdictOf = Callable[[CaseId, float, int], str]


@dataclass
class AbCheckResult:
    """`harness gate-check --ab`: per case and trial, one A/A measurement and one per injected slowdown level."""

    cases: list[str]
    trials: int
    aa: dict[str, int]  # verdict -> count over the A/A measurements
    levels: dict[float, dict[str, int]]  # level -> verdict -> count
    wall_s: float = 0.0
    machine: str = ""
    measured_at: str = ""

    @property
    def aa_total(self) -> int:
        return sum(self.aa.values())

    @property
    def false_alarm_rate(self) -> float:
        alarms = self.aa.get("regressed", 0) + self.aa.get("improved", 0)
        return alarms / self.aa_total if self.aa_total else 0.0

    def power(self, level: float) -> float:
        counts = self.levels[level]
        total = sum(counts.values())
        return counts.get("regressed", 0) / total if total else 0.0

    @property
    def smallest_detected(self) -> float | None:
        for lv in sorted(self.levels):
            if self.power(lv) >= POWER_TARGET:
                return lv
        return None

    def as_dict(self) -> dict[str, Any]:
        return {"kind": "ab", "cases": self.cases, "trials": self.trials, "aa": self.aa,
                "false_alarm_rate": self.false_alarm_rate, "power_target": POWER_TARGET,
                "levels": [{"level": lv, "verdicts": c, "power": self.power(lv)} for lv, c in self.levels.items()],
                "smallest_detected": self.smallest_detected, "wall_s": self.wall_s, "machine": self.machine,
                "measured_at": self.measured_at}

    def markdown(self) -> str:
        def counts(c: dict[str, int]) -> str:
            return ", ".join(f"{k} {v}" for k, v in sorted(c.items()))

        lines = [f"# gate-check of `harness ab` ({len(self.cases)} case(s), {self.trials} trials each)", "",
                 "| B slowed by | measurements | verdicts | power (regressed) |", "| --- | --- | --- | --- |",
                 f"| 0% (A/A) | {self.aa_total} | {counts(self.aa)} | false alarms {self.false_alarm_rate:.1%} |"]
        lines += [f"| {lv:.0%} | {sum(c.values())} | {counts(c)} | {self.power(lv):.1%} |"
                  for lv, c in sorted(self.levels.items())]
        best = self.smallest_detected
        lines += ["", f"Smallest slowdown detected with {POWER_TARGET:.0%} power: "
                  + (f"{best:.0%}" if best is not None else "none of the levels") + "."]
        return "\n".join(lines) + "\n"


def ab_trial(cases: Sequence[CaseId], verdict_of: AbVerdictOf, levels: Sequence[float], trial: int
             ) -> list[tuple[CaseId, float, str]]:
    """One trial: every case A/A and at every level, in one worker session."""
    return [(c, lv, verdict_of(c, lv, trial)) for c in cases for lv in (0.0, *levels)]


def ab_gate_check(cases: Sequence[CaseId], verdict_of: AbVerdictOf, trials: int = 20,
                  levels: Sequence[float] = DEFAULT_LEVELS, progress: Callable[[str], None] = lambda line: None,
                  execute: Callable[..., list[tuple[CaseId, float, str]]] | None = None) -> AbCheckResult:
    """Score `harness ab` as gate-check scores compare: the share of A/A measurements called regressed or
    improved (false alarms) and, per injected slowdown, the share called regressed (power)."""
    if not cases:
        raise ValueError("gate-check needs at least one case")
    t0 = time.perf_counter()
    out = AbCheckResult([c.id for c in cases], trials, {}, {lv: {} for lv in levels})
    for t in range(trials):
        args = (cases, verdict_of, levels, t)
        for _case, lv, verdict in (execute(ab_trial, *args) if execute else ab_trial(*args)):
            bucket = out.aa if lv == 0.0 else out.levels[lv]
            bucket[verdict] = bucket.get(verdict, 0) + 1
        progress(f"trial {t + 1}/{trials} done ({time.perf_counter() - t0:.0f} s)")
    out.wall_s = round(time.perf_counter() - t0, 1)
    return out


# ------------------------------------------------------------------ gate-check --nightly: whole gates, tallied
@dataclass
class NightlyTally:
    """`harness gate-check --nightly`: the verdicts of whole `harness gate` runs, per case and trial ("aa" or a
    level such as "10%"); unjudged verdicts counted as unjudged, never as a pass or a detection."""

    levels: tuple[str, ...] = ()
    counts: dict[tuple[str, str], dict[str, int]] = field(default_factory=dict)
    how: dict[str, str] = field(default_factory=dict)  # case id -> "re-measured A/B" or the stored-figures label

    UNJUDGED = (Verdict.INCONCLUSIVE.value, Verdict.NOISE.value, Verdict.NOT_COMPARABLE.value)

    def add(self, label: str, records: Sequence[Any], fallbacks: Sequence[str], stored_label: str) -> None:
        """One trial's gate: its timing rows (drift rows are not timing verdicts) by case."""
        for rec in records:
            if rec.metric == "drift":
                continue
            self.how[rec.case_id] = stored_label if rec.case_id in fallbacks else "re-measured A/B"
            counts = self.counts.setdefault((rec.case_id, label), {})
            counts[rec.verdict.value] = counts.get(rec.verdict.value, 0) + 1

    def rows(self) -> list[dict[str, Any]]:
        out = []
        for (case, label), counts in sorted(self.counts.items()):
            out.append({"case": case, "how": self.how[case], "trial": "A/A" if label == "aa" else f"slowed {label}",
                        "trials": sum(counts.values()), "regressed": counts.get("regressed", 0),
                        "improved": counts.get("improved", 0), "pass": counts.get("pass", 0),
                        "unjudged": sum(v for k, v in counts.items() if k in self.UNJUDGED), "counts": counts})
        return out

    def summary(self, stored_label: str) -> str:
        """"false alarms ...: F of N; power at 5%: D of M; ..." (power over re-measured rows only: a planted
        slowdown does not reach a case judged on stored figures)."""
        rows = self.rows()
        aa = [d for d in rows if d["trial"] == "A/A"]
        head = (f"false alarms (A/A rows called regressed or improved): "
                f"{sum(d['regressed'] + d['improved'] for d in aa)} of {sum(d['trials'] for d in aa)}")
        for label in self.levels:
            slowed = [d for d in rows if d["trial"] == f"slowed {label}" and d["how"] != stored_label]
            head += (f"; power at {label}: {sum(d['regressed'] for d in slowed)} of "
                     f"{sum(d['trials'] for d in slowed)}")
        return head
