"""The deployment recommendation: capacities by successive halving (or the full grid) under constraints, the Pareto
set, one recommendation and its runner-up confirmed by an interleaved A/B, reasons in words (docs/recommend.md)."""

from __future__ import annotations

import dataclasses
import math
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field

import numpy as np

from harness.results.stored import EnvironmentRecord
from harness.traffic.replay import ReplayRun, percentile
from harness.workloads.capacity.search import (CONTENDED_RETRIES, SPREAD_TRIALS, Capacity, ProbeError, ProbeFn,
                                               SearchSettings, find_capacity, over_activations)

ETA = 3
RUNGS = ((0.2, 8, 6), (0.08, 4, 10))  # (tolerance, requests divisor, max probes) before the full rung
AB_PAIRS = 8
SIDE_BY_SIDE = 3  # at most this many searches interleaved at once (each keeps its worker alive: live.KEEP_ACTIVE)


@dataclass(frozen=True)
class Candidate:
    """One configuration: its label, what it costs before any load, and its probe."""

    name: str  # e.g. "ort-cpu fp32 threads=2 batcher=max=8,wait=2"
    axes: dict[str, str]
    probe: ProbeFn
    drift: float | None = None  # the drift metric against the FP32 reference (None: not measured)
    memory_mb: float | None = None
    error: str | None = None  # could not be set up: why
    environment: EnvironmentRecord | None = None  # the runtime environment it ran in (None: the harness's own)
    reactivate: Callable[[], None] | None = None  # closes its activation: the next probe runs on a fresh one


@dataclass(frozen=True)
class Constraints:
    bound_ms: float
    percentile: float = 99.0
    drift_tolerance: float | None = None
    memory_cap_mb: float | None = None

    def refusal(self, c: Candidate) -> str | None:
        if c.error:
            return c.error
        if self.drift_tolerance is not None and c.drift is not None and c.drift > self.drift_tolerance:
            return f"drift {c.drift:.3g} over the tolerance {self.drift_tolerance:g}"
        if self.memory_cap_mb is not None and c.memory_mb is not None and c.memory_mb > self.memory_cap_mb:
            return f"memory {c.memory_mb:.0f} MB over the cap {self.memory_cap_mb:g} MB"
        return None


@dataclass(frozen=True)
class Search:
    """One capacity search of one candidate; (name, rung, seed, settings) is what a resumed run matches."""

    rung: int
    seed: int
    settings: SearchSettings
    capacity: Capacity
    resumed: bool = False  # taken from an earlier run's recommend.json, not measured by this one

    def to_json(self) -> dict[str, object]:
        return {"rung": self.rung, "seed": self.seed, "settings": dataclasses.asdict(self.settings),
                "capacity": self.capacity.to_json()}


SearchKey = tuple[str, int, int, SearchSettings]


@dataclass
class Evaluated:
    candidate: Candidate
    refusal: str | None = None
    capacity: Capacity | None = None
    rung: int = -1  # the last rung that searched it
    history: list[Search] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.candidate.name

    @property
    def cost_s(self) -> float:
        return sum(s.capacity.cost_s for s in self.history)

    @property
    def contended(self) -> str | None:
        """Why one of its searches cannot be trusted (a probe it decided by was contended on every try), else
        None: a capacity, or a drop by successive halving, that the loaded machine may have made."""
        bad = [p for s in self.history for p in s.capacity.contended]
        if not bad:
            return None
        at = "the saturation probe" if math.isinf(bad[0].rate) else f"{bad[0].rate:.4g} requests/s"
        return f"{len(bad)} probe(s) of its searches contended on every try, e.g. {at}: {bad[0].contended}"

    def to_json(self) -> dict[str, object]:
        c = self.candidate
        return {"name": c.name, "axes": c.axes, "drift": c.drift, "memory_mb": c.memory_mb, "refusal": self.refusal,
                "environment": c.environment.as_dict() if c.environment else None,
                "rung": self.rung, "cost_s": self.cost_s, "contended": self.contended,
                "capacity": self.capacity.to_json() if self.capacity else None,
                "searches": [s.to_json() for s in self.history]}


@dataclass(frozen=True)
class AbConfirmation:
    rate: float
    pairs: int
    p99_a_ms: tuple[float, ...]
    p99_b_ms: tuple[float, ...]
    ratio: float  # geometric mean of runner-up / recommendation p99 over the pairs
    p_value: float
    confirmed: bool
    text: str
    contended: int = 0  # replays of the pairs that the machine inflated (then nothing is confirmed)

    def to_json(self) -> dict[str, object]:
        return dataclasses.asdict(self)


@dataclass
class Recommendation:
    constraints: Constraints
    method: str  # halving | grid
    evaluated: list[Evaluated]
    pareto: list[str]
    chosen: str | None
    runner_up: str | None
    ab: AbConfirmation | None
    reasons: list[str]
    lost: dict[str, str] = field(default_factory=dict)  # on a cluster: configurations not searched (node lost), why

    @property
    def cost_s(self) -> float:
        return sum(e.cost_s for e in self.evaluated)

    @property
    def resumed(self) -> int:
        return sum(s.resumed for e in self.evaluated for s in e.history)

    def get(self, name: str | None) -> Evaluated | None:
        return next((e for e in self.evaluated if e.name == name), None)

    @property
    def unjudged(self) -> list[str]:
        """What the loaded machine left unjudged, in words (empty: every figure the decision used was measured
        on a machine that did not inflate it): the command exits 3 when there is any."""
        out = [f"{e.name}: {e.contended}" for e in self.evaluated if e.contended and e.refusal is None]
        if self.ab is not None and self.ab.contended:
            out.append(f"the A/B: {self.ab.contended} of its {2 * self.ab.pairs} replays contended")
        return out

    @property
    def could_have_won(self) -> list[str]:
        """The configurations lost with their node (a run on a cluster) that the evidence cannot rule out as the
        best, in words: one never searched, or whose last capacity's interval reaches the recommendation's low end
        (the recommendation's own last search lost included). Empty: judged on what finished."""
        best = self.get(self.chosen)
        low = best.capacity.low if best is not None and best.capacity is not None else 0.0
        out = []
        for name, why in self.lost.items():
            e = self.get(name)
            cap = e.capacity if e is not None else None
            if cap is None or name == self.chosen or cap.high >= low:
                known = "no capacity measured" if cap is None else \
                    f"its last capacity {cap.estimate:.4g} [{cap.low:.4g}, {cap.high:.4g}] requests/s"
                out.append(f"{name}: {why} ({known}: it could have held the highest capacity)")
        return out

    @property
    def not_judged(self) -> str | None:
        """Why the search could not judge which configuration to deploy, in words (None: it judged). Exit 3
        whenever there is one; the output then carries no "deploy" line and no star, only the best estimate,
        said as provisional (docs/recommend.md)."""
        if self.unjudged:
            return "the machine was loaded: " + "; ".join(self.unjudged)
        if self.could_have_won:
            return "configurations lost with their node: " + "; ".join(self.could_have_won)
        if self.chosen is None:
            return None  # nothing holds the SLO: said as such, no pick to withhold
        if self.ab is not None and not self.ab.confirmed:
            return f"the A/B could not tell the best estimate from the runner-up ({self.ab.text})"
        return None

    @property
    def verdict(self) -> str:
        """recommended | not_judged | none_feasible (the one vocabulary of recommend.json and the report)."""
        if self.not_judged:
            return "not_judged"
        return "recommended" if self.chosen is not None else "none_feasible"

    def to_json(self) -> dict[str, object]:
        return {"constraints": dataclasses.asdict(self.constraints), "method": self.method,
                "verdict": self.verdict, "not_judged": self.not_judged,
                "cost_s": self.cost_s, "resumed_searches": self.resumed, "unjudged": self.unjudged,
                "pareto": self.pareto,
                "chosen": self.chosen, "runner_up": self.runner_up,
                "ab": self.ab.to_json() if self.ab else None, "reasons": self.reasons,
                **({"not_searched": self.lost} if self.lost else {}),
                "candidates": [e.to_json() for e in self.evaluated]}


MAX_CAPACITY = 1e7  # requests/s: no replay loop sends faster (harness.traffic.spec.MAX_RATE)
MAX_INTERVAL = 1e9  # requests/s: a capacity's stated upper end, widened by the activations' spread (_check_capacity)
STATUSES = ("found", "unsure", "below-floor", "probe-budget")


def searches_from_json(candidates: Sequence[Mapping[str, object]]) -> dict[SearchKey, Capacity]:
    """The searches an earlier run's recommend.json recorded (its "candidates"), by what a resumed run matches;
    each re-validated as what a search can produce (a ValueError naming the place: a capacity that is not a finite
    rate in [0, 1e7] requests/s, an interval that does not hold its estimate, an unknown status), never believed.
    A search recorded before the search spread (its interval always the bisection's bracket, no `bracket_low`) is
    left out: the resumed run measures it again rather than compare intervals of two meanings."""
    if not isinstance(candidates, list):
        raise ValueError(f"candidates: a list of configurations, not {type(candidates).__name__}")
    out: dict[SearchKey, Capacity] = {}
    for i, c in enumerate(candidates):
        if not isinstance(c, Mapping) or not isinstance(c.get("name"), str):
            raise ValueError(f"candidates[{i}]: a configuration with a name")
        searches = c.get("searches") or []
        if not isinstance(searches, list):
            raise ValueError(f"candidates[{i}].searches: a list")
        for j, s in enumerate(searches):
            where = f"candidates[{i}].searches[{j}]"
            if not isinstance(s, Mapping):
                raise ValueError(f"{where}: a search record")
            rung, seed = s.get("rung"), s.get("seed")
            if isinstance(rung, bool) or not isinstance(rung, int) or not 0 <= rung <= 100 or \
                    isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
                raise ValueError(f"{where}: rung and seed are whole numbers >= 0")
            key = (str(c["name"]), rung, seed, SearchSettings(**s["settings"]))
            cap = Capacity.from_json(s["capacity"])
            _check_capacity(cap, f"{where}.capacity")
            if isinstance(s["capacity"], Mapping) and "bracket_low" not in s["capacity"]:
                continue  # recorded when its interval was always the bracket: measured again, never mixed in
            out[key] = cap
    return out


def _check_capacity(cap: Capacity, where: str) -> None:
    rates = {"estimate": cap.estimate, "low": cap.low, "cliff": cap.cliff,
             **({"knee": cap.knee} if cap.knee is not None else {}),
             **{k: v for k, v in (("bracket_low", cap.bracket_low), ("bracket_high", cap.bracket_high)) if v is not None},
             **{f"activation_cliffs[{k}]": v for k, v in enumerate(cap.activation_cliffs)}}
    for name, v in rates.items():
        if not (math.isfinite(v) and 0.0 <= v <= MAX_CAPACITY):
            raise ValueError(f"{where}.{name}: {v!r} is not a capacity a search can find (a rate in [0, "
                             f"{MAX_CAPACITY:g}] requests/s)")
    # the interval's upper end is a statement about a new activation, widened by their spread: it may lie above
    # any rate a replay sends (a fast fake runtime's 13 million), never beyond MAX_INTERVAL or infinite
    if not (math.isfinite(cap.high) and 0.0 <= cap.high <= MAX_INTERVAL):
        raise ValueError(f"{where}.high: {cap.high!r} is not the upper end of a capacity's interval (a rate in [0, "
                         f"{MAX_INTERVAL:g}] requests/s)")
    if not cap.low <= cap.estimate <= cap.high:
        raise ValueError(f"{where}: the interval [{cap.low:g}, {cap.high:g}] does not hold the estimate {cap.estimate:g}")
    if not (math.isfinite(cap.floor_ms) and cap.floor_ms >= 0):
        raise ValueError(f"{where}.floor_ms: {cap.floor_ms!r} is not a latency")
    if cap.status not in STATUSES:
        raise ValueError(f"{where}.status: {cap.status!r} is not one of {', '.join(STATUSES)}")


def _activation_cliffs(e: Evaluated, cap: Capacity, probe: ProbeFn, seed: int, activations: int
                       ) -> tuple[tuple[float, ...], float]:
    """The saturated throughput of `activations - 1` fresh activations of `e` (its search's saturation replay, the
    same schedule), and their replays' time; a replay contended on every try is left out of the spread."""
    sat = [p for p in cap.probes if p.kind == "saturation" and p.verdict != "retried"]
    if activations <= 1 or e.candidate.reactivate is None or cap.estimate <= 0 or not sat:
        return (), 0.0
    cliffs, wall = [], 0.0
    for _ in range(activations - 1):
        e.candidate.reactivate()
        for _attempt in range(CONTENDED_RETRIES + 1):
            r = probe(math.inf, sat[-1].requests, seed * 1000 + len(sat))
            if r.error:
                raise ProbeError(f"the saturation replay of a fresh activation: {r.error}")
            wall += r.wall_ns / 1e9
            if not r.contended:
                cliffs.append(r.throughput)
                break
    return tuple(cliffs), wall


def _search(e: Evaluated, settings: SearchSettings, seed: int, rung: int,
            done: Mapping[SearchKey, Capacity], log: Callable[[str], None], label: str,
            probe: ProbeFn | None = None, activations: int = 1,
            turn: Callable[[], AbstractContextManager[object]] | None = None) -> None:
    key = (e.name, rung, seed, settings)
    cap = done.get(key)
    if cap is not None:
        log(f"{label}: {e.name} (resumed: {cap.estimate:.4g} requests/s, {cap.cost_s:.0f} s measured before)")
        if cap.activations < activations and not cap.activation_cliffs:  # a search of schema 1: on one activation
            try:
                cap = over_activations(cap, *_activation_cliffs(e, cap, probe or e.candidate.probe, seed,
                                                                activations))
            except ProbeError as exc:
                e.refusal = f"failed under load: {exc}"
                return
    else:
        log(f"{label}: {e.name}")
        probe = probe or e.candidate.probe
        try:
            # a capacity for any activation (activations > 1): its search's own spread, then the activations'
            cap = find_capacity(probe, settings, seed, spread_trials=SPREAD_TRIALS if activations > 1 else 0,
                                spread_turn=turn)
            cap = over_activations(cap, *_activation_cliffs(e, cap, probe, seed, activations))
        except ProbeError as exc:
            e.refusal = f"failed under load: {exc}"
            return
    e.capacity, e.rung = cap, rung
    e.history.append(Search(rung, seed, settings, cap, resumed=key in done))


class _Aborted(Exception):
    """Another search of the side-by-side group raised: this one stops too (the error is the other's)."""


class _Turns:
    """The probes of searches run side by side, taken in turn: one probe at a time, round robin over the searches
    still running (A B C A B C ...), so a neighbour that comes and goes lands on every configuration alike."""

    def __init__(self, names: Sequence[str]) -> None:
        self.order = list(names)
        self.at = 0
        self.broken = False
        self.cv = threading.Condition()

    @contextmanager
    def turn(self, name: str) -> Iterator[None]:
        """`name`'s turn, held through the block: nothing else of the group runs meanwhile."""
        with self.cv:  # held through the block: one replay (or one search's simulation) at a time
            self.cv.wait_for(lambda: self.broken or self.order[self.at] == name)
            if self.broken:
                raise _Aborted
            try:
                yield
            finally:
                self.at = (self.at + 1) % len(self.order)
                self.cv.notify_all()

    def wrap(self, name: str, probe: ProbeFn) -> ProbeFn:
        def taken_in_turn(rate: float, n: int, seed: int) -> ReplayRun:
            with self.turn(name):
                return probe(rate, n, seed)
        return taken_in_turn

    def leave(self, name: str, broken: bool = False) -> None:
        with self.cv:
            i = self.order.index(name)
            self.order.pop(i)
            if i < self.at:
                self.at -= 1
            self.at = self.at % len(self.order) if self.order else 0
            self.broken = self.broken or broken
            self.cv.notify_all()


def _side_by_side(group: Sequence[Evaluated], settings: SearchSettings, seed: int, rung: int,
                  done: Mapping[SearchKey, Capacity], log: Callable[[str], None], label: str,
                  saved: Callable[[], None], activations: int = 1) -> None:
    """The searches of `group` run at once, their probes interleaved (_Turns): every configuration measured under
    the same conditions. An exception in one search (not a ProbeError: that one's refusal) stops them all."""
    if len(group) < 2:
        for e in group:
            _search(e, settings, seed, rung, done, log, label, activations=activations)
            saved()
        return
    turns = _Turns([e.name for e in group])
    errors: list[BaseException] = []
    lock = threading.Lock()

    def one(e: Evaluated) -> None:
        try:
            _search(e, settings, seed, rung, done, log, label, probe=turns.wrap(e.name, e.candidate.probe),
                    activations=activations, turn=lambda: turns.turn(e.name))
        except _Aborted:
            turns.leave(e.name)
            return
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            errors.append(exc)
            turns.leave(e.name, broken=True)
            return
        turns.leave(e.name)
        with lock:
            saved()

    threads = [threading.Thread(target=one, args=(e,), name=f"recommend-{i}", daemon=True)
               for i, e in enumerate(group)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def coarse_settings(full: SearchSettings, rung: int) -> SearchSettings:
    """The settings of successive halving's rung `rung` (< len(RUNGS)): coarser, fewer requests and probes."""
    tol, div, probes = RUNGS[rung]
    return dataclasses.replace(full, tolerance=max(full.tolerance, tol), max_probes=probes,
                               requests=max(min(200, full.requests), full.requests // div),
                               max_requests=max(min(400, full.max_requests), full.max_requests // div))


def promoted(alive: Sequence[Evaluated]) -> list[Evaluated]:
    """The configurations a rung promotes: the best third by capacity (at least 2) of those it measured."""
    ranked = sorted((e for e in alive if e.capacity is not None), key=lambda e: -e.capacity.estimate)  # type: ignore[union-attr]
    return ranked[:max(2, math.ceil(len(ranked) / ETA))]


def final_rung(alive: Sequence[Evaluated], full: SearchSettings, seed: int, exhaustive: bool,
               done: Mapping[SearchKey, Capacity], log: Callable[[str], None], saved: Callable[[], None],
               activations: int) -> None:
    """The last searches, side by side: the halving's finalists (best ranked together, groups of SIDE_BY_SIDE) or
    the grid's contenders (`alive`: the configurations its one search each measured)."""
    if exhaustive:  # the grid's contenders searched again side by side: the pick made under the same conditions
        _side_by_side(contenders([e for e in alive if e.capacity is not None and e.refusal is None]), full,
                      seed + 1, 1, done, log, "contenders, side by side", saved, activations)
        return
    ranked = sorted(alive, key=lambda e: -(e.capacity.estimate if e.capacity else math.inf))
    for i in range(0, len(ranked), SIDE_BY_SIDE):  # the finalists side by side, the best ranked together
        _side_by_side(ranked[i:i + SIDE_BY_SIDE], full, seed + len(RUNGS), len(RUNGS), done, log,
                      "final, side by side", saved, activations)


def picked(evaluated: Sequence[Evaluated]) -> tuple[Evaluated | None, Evaluated | None]:
    """(the recommendation, its runner-up): the two highest capacities of the last rung that searched any (the
    recommendation only when it holds the SLO at some rate; the runner-up likewise)."""
    measured = [e for e in evaluated if e.capacity is not None and e.refusal is None]
    last = max((e.rung for e in measured), default=-1)
    finalists = sorted((e for e in measured if e.rung == last), key=lambda e: -e.capacity.estimate)  # type: ignore[union-attr]
    chosen = finalists[0] if finalists and finalists[0].capacity.estimate > 0 else None  # type: ignore[union-attr]
    runner = finalists[1] if chosen and len(finalists) > 1 and finalists[1].capacity.estimate > 0 else None  # type: ignore[union-attr]
    return chosen, runner


def recommend(candidates: Sequence[Candidate], constraints: Constraints, settings: SearchSettings | None = None,
              exhaustive: bool = False, seed: int = 0, ab_pairs: int = AB_PAIRS,
              log: Callable[[str], None] = lambda s: None,
              saved: Callable[[list[Evaluated]], None] = lambda e: None,
              done: Mapping[SearchKey, Capacity] | None = None, activations: int = 1) -> Recommendation:
    """Search, choose and confirm; `saved` gets every candidate after each search (the command writes them, so a
    stopped run keeps what it measured); a search found in `done` (an earlier run's, searches_from_json) is taken
    from it instead of measured again, so a stopped run goes on where it stopped and decides as it would have."""
    full = settings or SearchSettings(bound_ms=constraints.bound_ms, percentile=constraints.percentile)
    done = done or {}
    evaluated = [Evaluated(c, constraints.refusal(c)) for c in candidates]
    alive = [e for e in evaluated if e.refusal is None]
    if exhaustive:
        for e in alive:
            _search(e, full, seed, 0, done, log, "grid")
            saved(evaluated)
    else:
        for rung in range(len(RUNGS)):
            if len(alive) <= 2:
                break
            for e in alive:
                _search(e, coarse_settings(full, rung), seed + rung, rung, done, log, f"rung {rung}")
                saved(evaluated)
            alive = promoted(alive)
    final_rung(evaluated if exhaustive else alive, full, seed, exhaustive, done, log, lambda: saved(evaluated),
               activations)
    chosen, runner = picked(evaluated)
    ab = confirm(chosen, runner, seed, ab_pairs) if chosen and runner else None
    return decided(evaluated, constraints, exhaustive, chosen, runner, ab)


def decided(evaluated: list[Evaluated], constraints: Constraints, exhaustive: bool, chosen: Evaluated | None,
            runner: Evaluated | None, ab: AbConfirmation | None, lost: Mapping[str, str] | None = None,
            ) -> Recommendation:
    """The recommendation of what was searched: the Pareto set, the pick, its A/B and the reasons; `lost`: the
    configurations a run on a cluster could not search (name -> why: its node was lost), judged by could_have_won."""
    measured = [e for e in evaluated if e.capacity is not None and e.refusal is None]
    pareto = pareto_set([e for e in measured if e.capacity.estimate > 0])  # type: ignore[union-attr]
    rec = Recommendation(constraints, "grid" if exhaustive else "halving", evaluated, [e.name for e in pareto],
                         chosen.name if chosen else None, runner.name if runner else None, ab, [],
                         dict(lost or {}))
    rec.reasons = reasons(rec)
    return rec


def contenders(measured: Sequence[Evaluated]) -> list[Evaluated]:
    """The configurations that could be the best: the highest capacity and those whose interval reaches its
    interval's low end (at least the two highest, at most SIDE_BY_SIDE); none when fewer than two hold the SLO."""
    ranked = sorted((e for e in measured if e.capacity is not None and e.capacity.estimate > 0),
                    key=lambda e: -e.capacity.estimate)  # type: ignore[union-attr]
    if len(ranked) < 2:
        return []
    low = ranked[0].capacity.low  # type: ignore[union-attr]
    close = [e for e in ranked[2:] if e.capacity.high >= low]  # type: ignore[union-attr]
    return (ranked[:2] + close)[:SIDE_BY_SIDE]


def pareto_set(measured: Sequence[Evaluated]) -> list[Evaluated]:
    """The candidates no other beats on every one of capacity (higher), unloaded p99, drift and memory (lower);
    an unmeasured drift or memory counts as no better than any."""
    def key(e: Evaluated) -> tuple[float, float, float, float]:
        assert e.capacity is not None
        return (-e.capacity.estimate, e.capacity.floor_ms,
                e.candidate.drift if e.candidate.drift is not None else math.inf,
                e.candidate.memory_mb if e.candidate.memory_mb is not None else math.inf)

    out = []
    for e in measured:
        k = key(e)
        if not any(all(a <= b for a, b in zip(key(o), k, strict=True)) and key(o) != k for o in measured):
            out.append(e)
    return sorted(out, key=lambda e: -e.capacity.estimate)  # type: ignore[union-attr]


def confirm(a: Evaluated, b: Evaluated, seed: int, pairs: int) -> AbConfirmation:
    """Interleaved A/B at 95% of the lower of the two capacities: pairs of replays A, B (B, A in odd pairs) on
    the same schedule (same seed within a pair), each judged by its p99; the runner-up's ratio over the
    recommendation's and a Wilcoxon signed-rank test of the pairs' log ratios. Confirmed: B's p99 is higher,
    with p < 0.05."""
    from scipy.stats import wilcoxon

    assert a.capacity is not None and b.capacity is not None
    rate = 0.95 * min(a.capacity.estimate, b.capacity.estimate)
    n = max(100, max(p.requests for p in a.capacity.probes))  # the recommendation's longest probe
    pa, pb = [], []
    contended: list[str] = []
    for i in range(pairs):
        s = seed * 7919 + 100_000 + i
        order = (a, b) if i % 2 == 0 else (b, a)
        runs: dict[str, ReplayRun] = {}
        for side in order:
            runs[side.name] = side.candidate.probe(rate, n, s)
            if runs[side.name].contended:
                contended.append(str(runs[side.name].contended))
        pa.append(percentile(runs[a.name].latency_ns[n // 10:], 99) / 1e6)
        pb.append(percentile(runs[b.name].latency_ns[n // 10:], 99) / 1e6)
    logs = np.log(np.array(pb) / np.array(pa))
    ratio = float(np.exp(logs.mean()))
    p = float(wilcoxon(logs, alternative="greater").pvalue) if np.any(logs != 0) else 1.0
    ok = ratio > 1.0 and p < 0.05 and not contended
    text = (f"interleaved A/B at {rate:.4g} requests/s, {pairs} pairs: the runner-up's p99 is {ratio:.2f}x the "
            f"best estimate's (Wilcoxon signed-rank p = {p:.3g}): "
            + (f"not judged: {len(contended)} of its {2 * pairs} replays were contended ({contended[0]})"
               if contended else "confirmed" if ok else "not confirmed: the two cannot be told apart at this rate"))
    return AbConfirmation(rate, pairs, tuple(pa), tuple(pb), ratio, p, ok, text, len(contended))


def reasons(rec: Recommendation) -> list[str]:
    c = rec.constraints
    out = []
    chosen, runner = rec.get(rec.chosen), rec.get(rec.runner_up)
    slo = f"p{c.percentile:g} <= {c.bound_ms:g} ms"
    if chosen is None or chosen.capacity is None:
        out.append(f"no configuration holds {slo} at any rate on this traffic")
    else:
        cap = chosen.capacity
        held = (f"holds {slo} up to {cap.estimate:.4g} requests/s ([{cap.low:.4g}, {cap.high:.4g}]), the highest "
                f"capacity of the feasible configurations")
        if rec.not_judged:  # never worded as a decision: the best estimate, said as provisional
            bits = [f"best estimate (provisional, not a recommendation): {chosen.name} {held}"]
        else:
            bits = [f"deploy {chosen.name}: it {held}"]
        if chosen.candidate.drift is not None:
            bits.append(f"drift {chosen.candidate.drift:.3g}"
                        + (f" within {c.drift_tolerance:g}" if c.drift_tolerance is not None else ""))
        if chosen.candidate.memory_mb is not None:
            bits.append(f"{chosen.candidate.memory_mb:.0f} MB"
                        + (f" under the {c.memory_cap_mb:g} MB cap" if c.memory_cap_mb is not None else ""))
        bits.append(f"unloaded p{c.percentile:g} {cap.floor_ms:.3g} ms; knee "
                    + (f"{cap.knee:.4g}" if cap.knee else "not reached") + f", cliff {cap.cliff:.4g} requests/s")
        out.append("; ".join(bits))
        if runner is not None and runner.capacity is not None:
            head = (cap.estimate / runner.capacity.estimate - 1) if runner.capacity.estimate > 0 else math.inf
            out.append(f"runner-up {runner.name}: {runner.capacity.estimate:.4g} requests/s ({head:+.1%} for the "
                       f"{'best estimate' if rec.not_judged else 'recommendation'})" + (f"; {rec.ab.text}" if rec.ab else ""))
        else:
            out.append(f"no other configuration of the last rung holds {slo} at any rate: nothing to confirm the "
                       f"recommendation against")
    for e in rec.evaluated:
        if e.refusal:
            out.append(f"left out {e.name}: {e.refusal}")
    for name, why in rec.lost.items():
        if not any(line.startswith(f"{name}: ") for line in rec.could_have_won):
            e = rec.get(name)
            cap = e.capacity if e is not None else None
            out.append(f"{name}: {why}; its last capacity {cap.estimate:.4g} [{cap.low:.4g}, {cap.high:.4g}] "
                       "requests/s is below the recommendation's interval: judged on what finished"
                       if cap is not None else f"{name}: {why}")
    if rec.unjudged:  # first: the figures below are not a recommendation to act on
        out[:0] = [f"not judged, the machine was loaded: {what}; run again on a quiet machine"
                   for what in rec.unjudged]
    elif rec.not_judged:
        out.insert(0, f"not judged: {rec.not_judged}; the figures below are estimates, not a recommendation")
    dropped = [e.name for e in rec.evaluated if e.refusal is None and e.capacity is not None
               and chosen is not None and e.rung < chosen.rung and e.name not in rec.lost]
    if dropped:
        out.append(f"dropped by successive halving before the last rung: {', '.join(dropped)}" if rec.method ==
                   "halving" else f"not contenders for the pick (searched once, not again side by side): "
                                  f"{', '.join(dropped)}")
    return out
