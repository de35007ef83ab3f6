"""The capacity of one configuration under an SLO: the highest rate whose percentile holds the bound, by a
bounded search with a stated interval, the knee and the cliff named (docs/recommend.md)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import MISSING, dataclass, field, fields

import numpy as np

from harness.traffic.replay import ReplayRun, percentile

ProbeFn = Callable[[float, int, int], ReplayRun]  # (rate, requests, seed) -> the replay's figures
T975 = {9: 3.25}  # t(0.995, 9): a 99% interval per probe (a wrong decision moves the search for good)
BLOCKS = 10
KNEE_FACTOR = 1.5
FLOOR_FRACTION = 0.05
FLOOR_S = 5.0  # the floor probe's requests: an eighth of a probe's, at most this many seconds' worth (at least 30)
SATURATION_S = 10.0  # the saturation probe: at most this many seconds' worth of requests, sized by a pilot of
SATURATION_PILOT = 50  # this many (a 0.5 s call would make 2,000 requests a 17-minute probe)
UNSTABLE = 0.95  # completed / offered below this: the queue grew during the probe
CONTENDED_RETRIES = 2  # a replay the machine inflated (its contention probe said so) is run again this many times
SPREAD_TRIALS = 40  # simulated searches that give a search's spread (search_spread)
SPREAD_LEVEL = 0.95  # the share of a new search's capacities its interval is to hold (on the simulated queue)


@dataclass(frozen=True)
class SearchSettings:
    bound_ms: float
    percentile: float = 99.0
    tolerance: float = 0.03  # the interval's width relative to its top at which the search stops
    max_probes: int = 25
    requests: int = 8000
    max_requests: int = 64000
    warmup: float = 0.1  # fraction of each probe's first requests left out of its figures

    def describe(self) -> str:
        return (f"p{self.percentile:g} <= {self.bound_ms:g} ms; interval to {self.tolerance:.0%} in at most "
                f"{self.max_probes} probes of {self.requests}-{self.max_requests} requests")


@dataclass(frozen=True)
class ProbeResult:
    step: int
    kind: str  # saturation | floor | search
    rate: float  # offered requests/s (inf: all at once)
    requests: int
    value_ms: float  # the percentile
    low_ms: float
    high_ms: float
    p50_ms: float
    throughput: float  # completed requests/s
    verdict: str  # pass | fail | unstable | unsure | info | retried (contended, run again)
    send_error_p99_ms: float
    wall_s: float  # the replay's time (simulated on a fake clock)
    mean_batch: float
    contended: str | None = None  # why the machine inflated this replay (its contention probe's cause), else None

    def to_json(self) -> dict[str, object]:
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in self.__dict__.items()}

    @classmethod
    def from_json(cls, d: Mapping[str, object]) -> ProbeResult:
        """The inverse of to_json: a null rate (the saturation probe's) or upper bound is infinite, others NaN."""
        got = {f.name: d[f.name] if f.name in d or f.default is MISSING else d.get(f.name, f.default)
               for f in fields(cls)}
        for k, v in got.items():
            if v is None and k != "contended":
                got[k] = math.inf if k in ("rate", "high_ms") else math.nan
        return cls(**got)


@dataclass(frozen=True)
class Capacity:
    estimate: float  # requests/s
    low: float
    high: float
    cliff: float
    knee: float | None
    floor_ms: float
    status: str  # found | unsure | below-floor | probe-budget
    reason: str
    probes: tuple[ProbeResult, ...] = field(default=())
    rates_probed: int = 0  # the probes counted against max_probes: one per rate (reruns with more requests are
    #                        the same probe; every replay is in `probes` and its time in cost_s)
    activation_cliffs: tuple[float, ...] = ()  # the saturated throughput of each further activation (requests/s)
    activation_s: float = 0.0  # their replays' time
    search_low: float | None = None  # the search's own interval, on its one activation, before over_activations
    search_high: float | None = None
    bracket_low: float | None = None  # the bisection's bracket [highest pass, lowest fail] (None: recorded before
    bracket_high: float | None = None  # the search spread, when [low, high] was always the bracket)
    spread: float | None = None  # search_spread: how far (log) a new search's capacity falls (None: not simulated)

    @property
    def activations(self) -> int:
        return 1 + len(self.activation_cliffs)

    @property
    def activation_spread(self) -> float | None:
        """The standard deviation of log(cliff) over the activations (None: measured on one)."""
        if not self.activation_cliffs:
            return None
        return float(np.std(np.log([self.cliff, *self.activation_cliffs]), ddof=1))

    @property
    def cost_s(self) -> float:
        """Measuring time spent: the probes' replay time (the further activations' included)."""
        return sum(p.wall_s for p in self.probes) + self.activation_s

    @property
    def contended(self) -> list[ProbeResult]:
        """The probes the search decided by although the machine inflated them (contended on every try): the
        capacity is not a figure to decide by."""
        return [p for p in self.probes if p.contended and p.verdict != "retried"]

    def to_json(self) -> dict[str, object]:
        return {"estimate": self.estimate, "low": self.low, "high": self.high, "cliff": self.cliff,
                "knee": self.knee, "floor_ms": self.floor_ms, "status": self.status, "reason": self.reason,
                "cost_s": self.cost_s, "rates_probed": self.rates_probed, "activations": self.activations,
                "activation_cliffs": list(self.activation_cliffs), "activation_s": self.activation_s,
                "activation_spread": self.activation_spread, "search_low": self.search_low,
                "search_high": self.search_high, "bracket_low": self.bracket_low,
                "bracket_high": self.bracket_high, "spread": self.spread, "probes": [p.to_json() for p in self.probes]}

    @classmethod
    def from_json(cls, d: Mapping[str, object]) -> Capacity:
        probes = tuple(ProbeResult.from_json(p) for p in d["probes"])
        def opt(k: str) -> float | None:
            v = d.get(k)
            return None if v is None else float(v)  # type: ignore[arg-type]

        return cls(float(d["estimate"]), float(d["low"]), float(d["high"]), float(d["cliff"]),
                   None if d["knee"] is None else float(d["knee"]), float(d["floor_ms"]),
                   str(d["status"]), str(d["reason"]), probes, int(d["rates_probed"]),
                   tuple(float(c) for c in d.get("activation_cliffs") or ()),  # type: ignore[union-attr]
                   float(d.get("activation_s") or 0.0), opt("search_low"), opt("search_high"),  # type: ignore[arg-type]
                   opt("bracket_low"), opt("bracket_high"), opt("spread"))


def over_activations(cap: Capacity, cliffs: tuple[float, ...], wall_s: float = 0.0) -> Capacity:
    """`cap` (one activation's search) as a figure for any activation: activations of one configuration differ by
    a bias of their own (the same ORT configuration read 495 and 731 requests/s in two quiet runs), which the
    search's probes, all on one activation, cannot show. `cliffs`: the saturated throughput of further fresh
    activations (the same saturation replay). The estimate moves by the mean log-cliff's offset from this
    activation's; each side of the interval (its log distance from the estimate) is the search's and a 95%
    prediction interval for a new activation, t(0.975, A-1) x sd(log cliff) x sqrt(1 + 1/A), added in quadrature
    (capacity taken to move as the service rate does: near saturation, where an SLO far above the service time
    puts it), the top no higher than the highest cliff measured. A low end of 0 stays 0."""
    from scipy.stats import t

    if not cliffs or cap.estimate <= 0 or not all(c > 0 for c in cliffs):
        return Capacity(**{**cap.__dict__, "activation_cliffs": tuple(cliffs), "activation_s": wall_s})
    logs = np.log([cap.cliff, *cliffs])
    a = len(logs)
    sd = float(np.std(logs, ddof=1))
    centre = math.log(cap.estimate) + float(logs.mean() - logs[0])
    act = float(t.ppf(0.975, a - 1)) * sd * math.sqrt(1 + 1 / a)
    low = math.exp(centre - math.hypot(math.log(cap.estimate / cap.low), act)) if cap.low > 0 else 0.0
    top = float(logs.max())  # no higher than the highest cliff measured (log): a capacity is under its cliff
    high = math.exp(max(centre, min(centre + math.hypot(math.log(cap.high / cap.estimate), act), top)))
    reason = (f"{cap.reason}; over {a} activations (their cliffs' spread {sd:.1%}): [{low:.4g}, {high:.4g}] "
              f"requests/s")
    return Capacity(**{**cap.__dict__, "estimate": math.exp(centre), "low": low, "high": high, "reason": reason,
                       "activation_cliffs": tuple(cliffs), "activation_s": wall_s, "search_low": cap.low,
                       "search_high": cap.high})


def judge(run: ReplayRun, settings: SearchSettings) -> tuple[float, float, float]:
    """(pooled percentile, low, high) in ms: batch means over BLOCKS contiguous blocks after the warm-up."""
    lat = run.latency_ns[int(len(run.latency_ns) * settings.warmup):]
    value = percentile(lat, settings.percentile) / 1e6
    blocks = [percentile(b, settings.percentile) / 1e6 for b in np.array_split(lat, BLOCKS) if len(b)]
    if len(blocks) < BLOCKS:
        return value, 0.0, math.inf
    half = T975[BLOCKS - 1] * float(np.std(blocks, ddof=1)) / math.sqrt(BLOCKS)
    return value, value - half, value + half


def _result(step: int, kind: str, rate: float, run: ReplayRun, settings: SearchSettings, verdict: str
            ) -> ProbeResult:
    value, low, high = judge(run, settings)
    p50 = percentile(run.latency_ns[int(len(run.latency_ns) * settings.warmup):], 50) / 1e6
    err = run.send_errors()
    mean_batch = float(np.mean(run.batch_sizes)) if run.batch_sizes else 0.0
    return ProbeResult(step, kind, rate, run.requests, value, low, high, p50, run.throughput, verdict,
                       percentile(err, 99) / 1e6 if len(err) else math.nan, run.wall_ns / 1e9, mean_batch,
                       run.contended)


def find_capacity(probe: ProbeFn, settings: SearchSettings, seed: int = 0, spread_trials: int = 0,
                  spread_turn: Callable[[], AbstractContextManager[object]] | None = None) -> Capacity:
    """Saturate (the cliff), probe the floor (5% of it), then bisect between them to the tolerance. The interval is
    the bisection's bracket; with `spread_trials`, widened to where a new search's capacity falls (search_spread),
    simulated inside `spread_turn()` (searches side by side: no other configuration's probe runs meanwhile, so
    this process's CPU does not load the machine a probe is measured on)."""
    return _Search(probe, settings, seed, spread_trials, spread_turn).capacity()


def search_spread(call_ns: np.ndarray, settings: SearchSettings, trials: int, seed: int = 0,
                  level: float | None = None, wake_ns: np.ndarray | None = None) -> float | None:
    """How far a new search's capacity falls from this one's: the `level` (default SPREAD_LEVEL) quantile of
    |log(E_j / E_i)| over the ordered pairs of `trials` searches, with the same settings, of a simulated server
    (Poisson arrivals, FIFO, call times drawn from `call_ns`: every call of the search's own replays; a request
    that finds it idle starts late by a draw from `wake_ns`, the replays' own late wake-ups). A search's probes
    judge a percentile from a few hundred or thousand requests, whose slowest come in one or two busy periods, so
    a search moves with its arrivals far more than its bracket says; the simulated searches show how far at this
    service-time distribution, these request counts and this bound. None: fewer than half of them found a
    capacity."""
    from harness.workloads.capacity.simulated import fifo_service

    calls = np.asarray(call_ns, dtype=np.int64)
    wakes = np.asarray(wake_ns if wake_ns is not None and len(wake_ns) else [0], dtype=np.int64)

    @functools.lru_cache(maxsize=1)  # one simulated search's resample held at a time (a sample may be large)
    def resample(trial: int) -> np.ndarray:
        return np.random.default_rng([seed, trial, 1]).choice(calls, len(calls))

    def probe(rate: float, n: int, s: int) -> ReplayRun:
        # each simulated search draws from its own resample of the calls (a bootstrap of the sample): how often a
        # rare stall comes is itself known only from the few the search's replays held
        rng = np.random.default_rng([seed, s])
        gaps = rng.exponential(1.0, n)
        times = np.zeros(n) if math.isinf(rate) else np.concatenate(([0.0], np.cumsum(gaps[1:]))) / rate
        wake = None if math.isinf(rate) else rng.choice(wakes, n)
        return fifo_service(np.round(times * 1e9).astype(np.int64), rng.choice(resample(s // 1000), n), wake)

    level = SPREAD_LEVEL if level is None else level
    found = [c.estimate for c in (_Search(probe, settings, k).capacity() for k in range(trials)) if c.estimate > 0]
    if len(found) < max(2, trials / 2):
        return None
    logs = np.log(found)
    diffs = np.abs(logs[:, None] - logs[None, :])[~np.eye(len(logs), dtype=bool)]
    return float(np.quantile(diffs, level))


def service_sample(replays: list[ReplayRun]) -> tuple[np.ndarray, np.ndarray]:
    """The search spread's sample from a search's replays: (every call's time, every late wake-up from an idle wait
    in the replays at a rate), from the replays the machine did not inflate (all of them when every one was).
    Every replay, not the saturation probe's alone: a stall of tens of ms once in a few seconds (seen quiet here:
    one probe's p99 7 ms, the same rate in the next search 62 ms) decides a p99 of a few hundred requests, and the
    saturation probe (300 calls: under a second) holds one in a minority of searches."""
    quiet = [r for r in replays if not r.contended] or replays
    calls = np.concatenate([np.asarray(r.call_ns, dtype=np.int64) for r in quiet]) if quiet else np.zeros(0)
    rated = [r.send_errors() for r in quiet if r.requests > 1 and math.isfinite(r.offered)]
    wakes = np.concatenate(rated).astype(np.int64) if rated else np.zeros(0, dtype=np.int64)
    return calls, wakes


class _Search:
    """One capacity search: its probes so far and the rates probed, in named steps."""

    def __init__(self, probe: ProbeFn, settings: SearchSettings, seed: int, spread_trials: int = 0,
                 spread_turn: Callable[[], AbstractContextManager[object]] | None = None) -> None:
        self.probe, self.settings, self.seed, self.spread_trials = probe, settings, seed, spread_trials
        self.spread_turn = spread_turn or nullcontext
        self.saturated: ReplayRun | None = None  # the saturation replay (the cliff)
        self.probes: list[ProbeResult] = []
        self.replays: list[ReplayRun] = []  # those it decided by (not those run again): the spread's sample
        self.points = 2  # rates probed (saturation, floor, then one per rate; a longer rerun is the same probe)

    def run(self, kind: str, rate: float, n: int) -> tuple[ReplayRun, int]:
        """One replay; one the machine inflated is kept (verdict `retried`) and the same schedule replayed again,
        at most CONTENDED_RETRIES times; the last one is returned, contended or not."""
        replays = self.seed * 1000 + 1 + sum(p.verdict != "retried" for p in self.probes)  # a retry: same schedule
        for attempt in range(CONTENDED_RETRIES + 1):
            step = len(self.probes) + 1
            r = self.probe(rate, n, replays)
            if r.error:
                raise ProbeError(f"probe {step} at {rate:.4g} requests/s: {r.error}")
            if not r.contended or attempt == CONTENDED_RETRIES:
                self.replays.append(r)
                return r, step
            self.probes.append(_result(step, kind, rate, r, self.settings, "retried"))
        raise AssertionError("unreachable")

    def keep(self, res: ProbeResult, verdict: str) -> None:
        self.probes.append(res.__class__(**{**res.__dict__, "verdict": verdict}))

    def saturate(self) -> float:
        """The cliff: the throughput of all requests at once (a pilot sizes it to SATURATION_S worth)."""
        most = min(self.settings.requests, 2000)
        sat, step = self.run("saturation", math.inf, min(most, SATURATION_PILOT))
        worth = sat.throughput * SATURATION_S  # requests the saturation probe may take
        if sat.requests < most and worth > sat.requests:  # the pilot: kept, the same rate
            self.probes.append(_result(step, "saturation", math.inf, sat, self.settings, "info"))
            sat, step = self.run("saturation", math.inf, most if worth >= most else round(worth))
        self.probes.append(_result(step, "saturation", math.inf, sat, self.settings, "info"))
        self.saturated = sat
        return sat.throughput

    def floor(self, floor_rate: float) -> ProbeResult:
        n = max(30, min(self.settings.requests // 8, round(floor_rate * FLOOR_S)))
        fl, step = self.run("floor", floor_rate, n)
        return _result(step, "floor", floor_rate, fl, self.settings, "info")

    def decide(self, rate: float, n: int) -> str:
        """pass | fail | unstable | unsure at `rate`, doubling the requests while unsure."""
        verdict = "unsure"
        self.points += 1
        while True:
            r, step = self.run("search", rate, n)
            res = _result(step, "search", rate, r, self.settings, "unsure")
            if r.throughput < UNSTABLE * min(rate, r.offered):
                verdict = "unstable"
            elif res.high_ms <= self.settings.bound_ms:
                verdict = "pass"
            elif res.low_ms > self.settings.bound_ms:
                verdict = "fail"
            self.keep(res, verdict)
            if verdict != "unsure" or n * 2 > self.settings.max_requests:
                return verdict
            n *= 2

    def bisect(self, lo: float, hi: float) -> tuple[float, float]:
        """Narrow [lo, hi] to the tolerance or the probe budget; once a rate stays unsure at the most requests
        (pinned: the answer is near), close in from both sides of it, a half-tolerance step away, doubled while
        undecided."""
        settings = self.settings
        reach = [0.0, 0.0]
        pinned: float | None = None
        while (hi - lo) / hi > settings.tolerance and self.points < settings.max_probes:
            if pinned is None:
                mid = (lo + hi) / 2
                verdict = self.decide(mid, settings.requests)
                if verdict == "unsure":
                    pinned = mid
                    reach = [settings.tolerance * mid / 2] * 2
                    continue
            else:
                below = pinned - lo > hi - pinned
                mid = pinned - reach[0] if below else pinned + reach[1]
                if not lo < mid < hi:
                    mid = (lo + hi) / 2
                verdict = self.decide(mid, settings.max_requests)
                if verdict == "unsure":
                    reach[0 if below else 1] *= 2
            if verdict == "pass":
                lo = max(lo, mid)
            elif verdict in ("fail", "unstable"):
                hi = min(hi, mid)
        return lo, hi

    def capacity(self) -> Capacity:
        settings, bound = self.settings, self.settings.bound_ms
        cliff = self.saturate()
        floor_rate = FLOOR_FRACTION * cliff
        floor = self.floor(floor_rate)
        if floor.low_ms > bound:
            self.keep(floor, "fail")
            return Capacity(0.0, 0.0, floor_rate, cliff, None, floor.value_ms, "below-floor",
                            f"p{settings.percentile:g} is {floor.value_ms:.3g} ms at {floor_rate:.3g} requests/s "
                            f"(5% of the cliff), over the {bound:g} ms bound: no rate holds it", tuple(self.probes), 2,
                            bracket_low=0.0, bracket_high=floor_rate)
        self.keep(floor, "pass")
        lo, hi = self.bisect(floor_rate, cliff)
        status = "found" if (hi - lo) / hi <= settings.tolerance else "probe-budget"
        low, high, spread, why = lo, hi, None, ""
        sat = self.saturated
        if self.spread_trials and sat is not None and sat.call_ns:
            if any(max(r.batch_sizes, default=1) > 1 for r in self.replays):
                why = "; no search spread: a batcher's calls are no single requests' service times"
            else:
                calls, wakes = service_sample(self.replays)
                with self.spread_turn():
                    spread = search_spread(calls, settings, self.spread_trials, self.seed, wake_ns=wakes)
                if spread is None:
                    why = "; no search spread: the simulated searches found no capacity"
                else:
                    mid = (lo + hi) / 2
                    low, high = min(lo, mid * math.exp(-spread)), min(max(hi, mid * math.exp(spread)), max(cliff, hi))
                    why = (f"; a new search falls within {spread:.1%} (log) of it in {SPREAD_LEVEL:.0%} of "
                           f"{self.spread_trials} simulated searches: [{low:.4g}, {high:.4g}]")
        reason = (f"[{lo:.4g}, {hi:.4g}] requests/s after {self.points} probes" if status == "found" else
                  f"{settings.max_probes} probes spent: [{lo:.4g}, {hi:.4g}] requests/s") + why
        passing = [p for p in self.probes if p.kind != "saturation" and p.verdict == "pass"]
        knee = max((p.rate for p in passing if p.p50_ms <= KNEE_FACTOR * floor.p50_ms), default=None)
        return Capacity((lo + hi) / 2, low, high, cliff, knee, floor.value_ms, status, reason, tuple(self.probes),
                        self.points, bracket_low=lo, bracket_high=hi, spread=spread)


class ProbeError(RuntimeError):
    """A probe's replay failed (the runtime raised): the configuration has no capacity figure."""
