"""Change points in per-run figures: steps tested under the series' own noise model (AR(1) plus a random walk),
a creep as one drift, two alternating levels as modes, changes of run-to-run spread (docs/history.md)."""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise

import numpy as np

from harness.results.stats import MAD_TO_SIGMA

# Otava's (Hunter's) default is p < 0.001 with segments of at least 3 runs. Here the t-test follows a search
# that picked the best split, which biases p down: 0.001 gave 8 false change points in 300 flat histories of
# 24 runs (1% noise), 0.0001 gave 1 and still found every 10% step (docs/history.md).
DEFAULT_MAX_PVALUE = 0.0001
DEFAULT_MIN_MAGNITUDE = 0.0
MIN_SEGMENT = 3
NOISE_FLOOR = 0.002  # relative: a history flatter than 0.2% run to run is treated as that noisy
# A step this large (relative) needs only LARGE_STEP_PVALUE: three runs 66% slower after three runs of 1% noise
# give Welch's p 1.6e-4 (4 degrees of freedom), a step nobody would call noise (docs/history.md: its cost).
LARGE_STEP = 0.25
LARGE_STEP_PVALUE = 0.01


@dataclass(frozen=True)
class ChangePoint:
    """The series' level moves between index-1 and `index` (the first value of the new level). kind "drift": the
    level wanders from `index` to `end` (exclusive) at `slope` (relative, per run); before/after: the fitted level
    at its start and at its end."""

    index: int
    before: float  # mean of the segment before (of the window tested: see NoiseModel.window_variance)
    after: float  # mean of the segment after
    pvalue: float  # the test's p (a level: the larger of the noise model's and Welch's; a spread: Brown-Forsythe's)
    kind: str = "level"  # "level": the mean moved; "spread": the run-to-run spread did (before/after: its sigma)
    end: int | None = None  # drift: the first run after it
    slope: float | None = None  # drift: relative change per run

    @property
    def change(self) -> float:
        """Relative change of the mean (of the spread, for kind "spread"), e.g. 0.10 for 10% higher after."""
        return self.after / self.before - 1.0 if self.before else math.inf

    def as_dict(self) -> dict[str, float | int | str | None]:
        out: dict[str, float | int | str | None] = {"index": self.index, "before": self.before, "after": self.after,
                                                    "change": self.change, "pvalue": self.pvalue, "kind": self.kind}
        if self.kind == "drift":
            out.update(end=self.end, slope=self.slope)
        return out


@dataclass(frozen=True)
class Modes:
    """Two levels the series alternates between (a bimodal case: a second code path, a scheduler's two homes),
    not a change: `low` and `high` (means), the share of runs at `high`, and how often it switched."""

    low: float
    high: float
    high_share: float
    switches: int

    def as_dict(self) -> dict[str, float | int]:
        return {"low": self.low, "high": self.high, "high_share": self.high_share, "switches": self.switches}


@dataclass(frozen=True)
class Settings:
    """How one case's history is searched (`harness history changes --settings FILE` sets them per case; the
    defaults need none). `noise`: "auto" (the noise model fitted from the series, `fit_noise`) or "iid"
    (independent noise, the detector before #53); `drift`, `modes`, `spread`: look for those too."""

    max_pvalue: float = DEFAULT_MAX_PVALUE
    min_magnitude: float = DEFAULT_MIN_MAGNITUDE
    min_size: int = MIN_SEGMENT
    noise: str = "auto"
    drift: bool = True
    modes: bool = True
    spread: bool = True

    def __post_init__(self) -> None:
        if not 0 < self.max_pvalue < 1:
            raise ValueError(f"max_pvalue {self.max_pvalue}: between 0 and 1")
        if self.min_magnitude < 0:
            raise ValueError(f"min_magnitude {self.min_magnitude}: at least 0")
        if self.min_size < 2:
            raise ValueError(f"min_size {self.min_size}: at least 2 runs")
        if self.noise not in ("auto", "iid"):
            raise ValueError(f"noise {self.noise!r}: auto or iid")


@dataclass
class Analysis:
    """What a history shows: its change points (level, spread, drift; oldest first), its modes (or None) and the
    noise model its steps were tested under."""

    changes: list[ChangePoint] = field(default_factory=list)
    modes: Modes | None = None
    model: NoiseModel | None = None


def detect(values: Sequence[float], *, max_pvalue: float = DEFAULT_MAX_PVALUE,
           min_magnitude: float = DEFAULT_MIN_MAGNITUDE, min_size: int = MIN_SEGMENT,
           spread: bool = True, settings: Settings | None = None) -> list[ChangePoint]:
    """The change points `harness history changes` reports for one series (what the benchmark
    harness_suites.benchmarks.changepoints scores), oldest first: `analyse(values, settings)`'s changes, settings
    from the keywords when none are given."""
    if settings is None:
        settings = Settings(max_pvalue=max_pvalue, min_magnitude=min_magnitude, min_size=min_size, spread=spread)
    return analyse(values, settings).changes


def analyse(values: Sequence[float], settings: Settings | None = None) -> Analysis:
    """One series, oldest first: its level change points (`change_points`: the steps, tested under its noise
    model; on a bimodal series, `find_modes`, searched with the modes taken out), one drift per stretch between
    them where the level wanders (`drift`), and with `settings.spread` the run-to-run spread's change points
    (`spread_changes`) where no level change point is within `min_size` runs."""
    s = settings or Settings()
    x = np.asarray([float(v) for v in values], dtype=np.float64)
    out = Analysis()
    if x.size < 2 * s.min_size or not np.all(np.isfinite(x)) or float(np.median(x)) <= 0:
        return out
    search = x
    if s.modes:
        out.modes = find_modes(x)
        if out.modes is not None:
            search = _without_modes(x, out.modes)
    level, out.model = _change_points(search, s.max_pvalue, s.min_magnitude, s.min_size, s.noise)
    found = list(level)
    if s.drift and out.modes is None:
        level, drift = drifts(x, level, out.model, max_pvalue=s.max_pvalue, min_magnitude=s.min_magnitude)
        found = [*level, *drift]
    if s.spread and out.modes is None:
        found += [c for c in spread_changes(x, level, max_pvalue=s.max_pvalue, min_magnitude=s.min_magnitude,
                                            dependent=out.model.dependent)
                  if all(abs(c.index - lv.index) >= s.min_size for lv in level)]
    out.changes = sorted(found, key=lambda c: (c.index, c.kind))
    return out


# --- the noise model: AR(1) noise around the level, plus a random-walk component (DeCAFS's model) ---------------

@dataclass(frozen=True)
class NoiseModel:
    """The run-to-run noise of a relative series (figures / their median): x_t = level_t + w_t + e_t, e an AR(1)
    (marginal sigma `sigma`, lag-1 correlation `phi`), w a random walk (step sigma `tau` per run); the model of
    DeCAFS (Romano et al. 2022) and, with tau 0, AR1Seg's (Chakar et al. 2017). Its variogram V(h) =
    E(x_t+h - x_t)^2 = 2 sigma^2 (1 - phi^h) + h tau^2 gives the variance of any difference of window means."""

    sigma: float
    phi: float = 0.0
    tau: float = 0.0

    def variogram(self, h: np.ndarray) -> np.ndarray:
        h = np.asarray(h, dtype=np.float64)
        return np.where(h > 0, 2 * self.sigma**2 * (1 - self.phi**h) + h * self.tau**2, 0.0)

    @property
    def short(self) -> float:
        """The run-to-run noise (sigma of successive differences / sqrt 2)."""
        return float(math.sqrt(self.variogram(np.array([1]))[0] / 2))

    @property
    def dependent(self) -> bool:
        return self.phi > 0 or self.tau > 0

    def as_dict(self) -> dict[str, float]:
        return {"sigma": self.sigma, "phi": self.phi, "tau": self.tau}

    def window_variance(self, na: int, nb: int, min_window: int = 1,
                        fixed_b: bool = False) -> tuple[float, int, int]:
        """(variance, wa, wb): the windows of the last wa runs before a cut (of at most `na`) and the first wb after
        it (of at most `nb`; exactly `nb` with `fixed_b`) whose difference of means has the smallest variance under
        this model, and that variance. Independent noise: the whole segments (sigma^2 (1/na + 1/nb)); with a
        random walk, nearer windows (farther runs have wandered). Windows of at least `min_window` runs."""
        v = self.variogram(np.arange(na + nb + 1))
        c = np.cumsum(v)  # C(k) = sum V(0..k)
        d = np.concatenate([[0.0], np.cumsum(c)])  # d[m + 1] = D(m) = sum C(0..m); d[0] = D(-1) = 0
        wa = _sizes(min(min_window, na), na)[:, None]
        wb = (np.array([nb]) if fixed_b else _sizes(min(min_window, nb), nb))[None, :]
        s_ab = (d[wa + wb] - d[wb]) - d[wa]
        var = s_ab / (wa * wb) - d[wb] / wb**2 - d[wa] / wa**2
        i, j = np.unravel_index(int(np.argmin(var)), var.shape)
        return float(max(var[i, j], 0.0)), int(wa[i, 0]), int(wb[0, j])


def _sizes(lo: int, hi: int) -> np.ndarray:
    """Window sizes lo .. hi: every size up to 12, then about 10% apart, and hi itself."""
    small = np.arange(lo, min(hi, 12) + 1)
    big = np.unique(np.geomspace(13, hi, num=max(2, int(10 * math.log(max(hi, 13) / 13)) + 2)).astype(int)) \
        if hi > 12 else np.array([], dtype=int)
    return np.unique(np.concatenate([small, big, [hi]])).astype(int)


MODEL_MIN_RUNS = 20  # below this a history says too little about its own dependence: independent noise assumed


def robust_sd(d: np.ndarray) -> float:
    """A robust sigma of `d`: the largest of the MAD, the IQR and the mean of the smallest 90% of |d - median|
    (each scaled to a Gaussian's sigma). A few steps barely move any of them; the third keeps mostly-zero
    differences (two alternating levels without noise) from reading as no noise."""
    if d.size < 2:
        return 0.0
    c = d - np.median(d)
    mad = MAD_TO_SIGMA * float(np.median(np.abs(c)))
    q75, q25 = np.percentile(d, [75, 25])
    iqr = float(q75 - q25) / 1.3489795
    small = np.sort(np.abs(c))[:max(1, int(0.9 * c.size))]
    trimmed = float(small.mean()) / 0.6573  # E|Z| over its smallest 90%, Z standard normal
    return max(mad, iqr, trimmed)


def fit_noise(y: np.ndarray, model: str = "auto") -> NoiseModel:
    """The noise model of the relative series `y` by maximum likelihood: the Gaussian likelihood of the
    de-meaned series under AR(1) noise plus a random walk (`_logliks`), over a grid of phi (ML_PHI) and tau^2 /
    sigma^2 (ML_RHO), the scale profiled out; kept only when it beats independent noise by BIC (2 more
    parameters). Fitted on the series as it is, steps and all, so steps make it the cautious side (they look
    like a wander); `_search` weighs that against independent noise with the steps. `model` "iid" (or a
    history shorter than MODEL_MIN_RUNS): independent noise, sigma from successive differences (`noise`). The
    run-to-run noise is at least NOISE_FLOOR."""
    n = y.size
    iid = NoiseModel(noise(y))
    if model == "iid" or n < MODEL_MIN_RUNS:
        return iid
    r = y - y.mean()
    ll, scale = _logliks(r)
    i = int(np.argmax(ll))
    if not ll[i] > _loglik(r, None) + math.log(n):  # BIC: the two extra parameters
        return iid
    phi, rho = _GRID[i]
    best = NoiseModel(math.sqrt(scale[i]), float(phi), math.sqrt(rho * scale[i]))
    if best.short < NOISE_FLOOR:  # flatter than the floor: the same shape (phi, tau / sigma) scaled up to it
        k = NOISE_FLOOR / best.short
        return NoiseModel(best.sigma * k, best.phi, best.tau * k)
    return best


def change_points(values: Sequence[float], *, max_pvalue: float = DEFAULT_MAX_PVALUE,
                  min_magnitude: float = DEFAULT_MIN_MAGNITUDE, min_size: int = MIN_SEGMENT,
                  model: str = "auto") -> list[ChangePoint]:
    """Change points of the mean of `values` (oldest first): `_segment_changes`, and a step that held for at
    least `min_size` runs and then came back within the newest runs, too few to be a segment of their own.

    Without the second rule one run back at the old level after a +30% step of 5 runs would hide the step (the
    newest runs join the step's segment and blur it). So the series is searched again without its newest r
    runs (r = 1 .. min_size-1, the smallest r that finds more): the change points found there are kept, and the
    newest r runs are a change point too (the recovery) when they differ from the held level (a z-test
    against that segment's spread and the noise model's test, at `max_pvalue` and `min_magnitude`). `model`:
    the noise model ("auto": fitted, `fit_noise`; "iid": independent noise)."""
    return _change_points(values, max_pvalue, min_magnitude, min_size, model)[0]


def _change_points(values: Sequence[float], max_pvalue: float, min_magnitude: float, min_size: int,
                   model: str) -> tuple[list[ChangePoint], NoiseModel | None]:
    """`change_points` and the noise model of the whole series' search (None: too short to search)."""
    x = np.asarray([float(v) for v in values], dtype=np.float64)
    if x.size < 2 * min_size or not np.all(np.isfinite(x)) or float(np.median(x)) <= 0:
        return [], None
    found, full = _search(x, max_pvalue, min_magnitude, min_size, model)
    if x.size < 2 * min_size + 1:
        return found, full
    known = {c.index for c in found}
    for r in range(1, min_size):
        if x.size - r < 2 * min_size or float(np.median(x[:-r])) <= 0:  # as `_segment_changes`: nothing to search
            continue
        head, nm = _search(x[:-r], max_pvalue, min_magnitude, min_size, model)
        extra = [c for c in head if c.index not in known]
        if not extra:
            continue
        out = sorted({c.index: c for c in [*found, *head] if c.index < x.size - r}.values(), key=lambda c: c.index)
        start = out[-1].index if out else 0
        held, tail = x[start:x.size - r], x[x.size - r:]
        med = float(np.median(x))
        p = _z_p(held, tail)
        if nm.dependent:
            var, wa, _ = nm.window_variance(held.size, r, 1, fixed_b=True)
            p = max(p, _normal_p((float(tail.mean()) - float(held[-wa:].mean())) / med, var))
        recovery = ChangePoint(x.size - r, float(held.mean()), float(tail.mean()), p)
        if _passes(recovery, max_pvalue, min_magnitude, _separated(held, tail)):
            out.append(recovery)
        return out, full
    return found, full


def _passes(cp: ChangePoint, max_pvalue: float, min_magnitude: float, separated: bool = False) -> bool:
    """p at most `max_pvalue`, or LARGE_STEP_PVALUE for a step of LARGE_STEP or more whose runs after are all
    beyond its runs before (`separated`); and the change at least `min_magnitude`."""
    if abs(cp.change) < min_magnitude:
        return False
    return cp.pvalue <= max_pvalue or (separated and abs(cp.change) >= LARGE_STEP and cp.pvalue <= LARGE_STEP_PVALUE)


def _separated(a: np.ndarray, b: np.ndarray) -> bool:
    """Every value of `b` beyond every value of `a` (on one side), each side at least MIN_SEGMENT runs (one odd
    run is not a step)."""
    return bool(min(a.size, b.size) >= MIN_SEGMENT and (b.min() > a.max() or b.max() < a.min()))


def _normal_p(diff: float, var: float) -> float:
    """Two-sided p of a difference `diff` whose variance is `var` under the noise model."""
    from scipy.stats import norm

    if var <= 0:
        return 0.0 if diff != 0 else 1.0
    return float(2 * norm.sf(abs(diff) / math.sqrt(var)))


WELCH_GUARD = 0.01  # under a dependent noise model, Welch's p of the two segments must be at most this
SEARCH_SCALE = 10  # runs: the search's penalty uses the noise of a step between windows of this many runs


def _segment_changes(x: np.ndarray, max_pvalue: float, min_magnitude: float, min_size: int,
                     model: str = "auto") -> list[ChangePoint]:
    """Change points of the mean of `x`, each between two segments of at least `min_size`.

    An exact penalised search (`optimal_partition`, what PELT finds, L2 cost) proposes breakpoints on the series
    scaled by its median, with a BIC-like penalty of 3 s^2 log(n): s the run-to-run noise for independent noise;
    under a dependent noise model (`fit_noise`), the noise of a mean over SEARCH_SCALE runs expressed per run
    (autocorrelated noise makes means noisier than sigma^2 / n). Then, as Otava does after E-Divisive, every
    breakpoint is tested between its neighbouring segments and must move the mean by at least `min_magnitude`;
    the weakest failing one is dropped and the rest tested again. The test (`_cut_test`): Welch's t-test, and
    under a dependent model also the difference of window means against its variance under the model (the
    effective sample size of autocorrelated runs); p is the larger. A step of LARGE_STEP or more needs only
    LARGE_STEP_PVALUE (`_passes`)."""
    if x.size < 2 * min_size or not np.all(np.isfinite(x)):
        return []
    med = float(np.median(x))
    if med <= 0:
        return []
    return _search(x, max_pvalue, min_magnitude, min_size, model)[0]


def _search(x: np.ndarray, max_pvalue: float, min_magnitude: float, min_size: int,
            model: str) -> tuple[list[ChangePoint], NoiseModel]:
    """`_segment_changes` and the noise model its steps were tested under.

    Moderate steps and a wander look alike in the variances the model is fitted from, so two explanations are
    weighed: (A) the steps found under independent noise (the detector before #53); (B) the steps found under
    the model fitted from the whole series (steps and all: the cautious side; fitting it again without the
    steps found made it bolder each round, and flat AR(1) series got false steps). The one with the smaller
    BIC wins: the Gaussian
    likelihood of the residuals (A: around the segments' means; B: the series less its steps, each the
    difference of its windows' means, under the best of the model grid, AR(1) plus a random walk), 3 ln n per step (the search's own penalty: a step's place is chosen among many), 2 (A) or 4
    (B) parameters for the mean and the noise."""
    y = x / float(np.median(x))
    iid = NoiseModel(noise(y))
    steps_a = _search_with(x, y, iid, max_pvalue, min_magnitude, min_size)
    if model == "iid" or y.size < MODEL_MIN_RUNS:
        return steps_a, iid
    nm = fit_noise(y, model)
    if not nm.dependent:
        return steps_a, iid
    steps_b = _search_with(x, y, nm, max_pvalue, min_magnitude, min_size)
    n = y.size
    bic_a = -2 * _loglik(_residuals(y, steps_a), None) + (3 * len(steps_a) + 2) * math.log(n)
    shifted = without_steps(y, steps_b, float(np.median(x)))  # each step by its windows' difference: the level walks
    bic_b = -2 * float(np.max(_logliks(shifted - shifted.mean())[0])) + (3 * len(steps_b) + 4) * math.log(n)
    return (steps_b, nm) if bic_b < bic_a else (steps_a, iid)


def _residuals(y: np.ndarray, steps: Sequence[ChangePoint]) -> np.ndarray:
    """`y` less the mean of each segment between `steps`."""
    edges = [0, *sorted(c.index for c in steps), y.size]
    return np.concatenate([y[a:b] - y[a:b].mean() for a, b in pairwise(edges)])


def _loglik(r: np.ndarray, nm: NoiseModel | None) -> float:
    """Gaussian log-likelihood of residuals `r` with independent noise (nm None) or under `nm`'s shape (phi and
    tau / sigma), the scale profiled out."""
    n = r.size
    if nm is None:  # over n - 1 runs, as the Kalman filter's (its first run sets the level)
        s2 = max(float(np.mean(r * r)), 1e-30)
        return -0.5 * (n - 1) * (math.log(2 * math.pi * s2) + 1)
    rho = (nm.tau / nm.sigma) ** 2 if nm.sigma > 0 else 1e6
    return float(_logliks(r, np.array([[nm.phi, rho]]))[0][0])


ML_PHI = (0.0, 0.3, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95)
ML_RHO = (0.0, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0)  # tau^2 / sigma^2
DIFFUSE = 1e6  # the level's variance before the first run, in units of the noise's (a diffuse start)
_GRID = np.array([(p, q) for p in ML_PHI for q in ML_RHO if p > 0 or q > 0])


def _logliks(r: np.ndarray, grid: np.ndarray = _GRID) -> tuple[np.ndarray, np.ndarray]:
    """(log-likelihoods, profiled scales) of `r` for each (phi, rho) row of `grid`: r_t = w_t + e_t, e an AR(1)
    of marginal variance c, w a level that walks with steps of variance rho c from a diffuse start. A Kalman
    filter over the state (w, e), run for every grid row at once (numpy arrays across the grid); the scale c
    profiled out; the first run sets the level, the likelihood is that of the other n - 1. The filter's
    variances and gains do not depend on the data: `_gains` computes them once per length and grid."""
    f, k1, k2, logdet = _gains(r.size, grid.tobytes(), grid.shape)
    phi = grid[:, 0]
    aw = np.zeros(len(grid))
    ae = np.zeros(len(grid))
    ss = np.zeros(len(grid))
    for t, obs in enumerate(r):
        if t:  # predict
            ae = phi * ae
        v = obs - aw - ae
        if t:  # the first run only sets the level (a diffuse start)
            ss += v * v / f[t]
        aw, ae = aw + k1[t] * v, ae + k2[t] * v  # update
    n = r.size - 1
    c = np.maximum(ss / n, 1e-30)
    return -0.5 * (n * np.log(2 * math.pi * c) + logdet + n), c


@functools.lru_cache(maxsize=32)
def _gains(n: int, grid_bytes: bytes, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                                        np.ndarray]:
    """The Kalman filter of `_logliks` for `n` runs, without the data: per run (rows) and grid row (columns) the
    innovation's variance f and the two gains, and the sum of log f over runs 1 .. n-1 (cached: a history is
    searched at its full length and without its newest runs, and every series of a length shares them)."""
    grid = np.frombuffer(grid_bytes, dtype=np.float64).reshape(shape)
    phi, rho = grid[:, 0], grid[:, 1]
    q_e = 1 - phi**2
    p11, p12, p22 = np.full(len(grid), DIFFUSE), np.zeros(len(grid)), np.ones(len(grid))
    f_all, k1_all, k2_all = (np.empty((max(n, 1), len(grid))) for _ in range(3))
    logdet = np.zeros(len(grid))
    for t in range(n):
        if t:  # predict
            p11, p12, p22 = p11 + rho, phi * p12, phi * phi * p22 + q_e
        f = np.maximum(p11 + 2 * p12 + p22, 1e-12)
        if t:
            logdet += np.log(f)
        k1, k2 = (p11 + p12) / f, (p12 + p22) / f  # update
        p11, p12, p22 = p11 - k1 * k1 * f, p12 - k1 * k2 * f, p22 - k2 * k2 * f
        f_all[t], k1_all[t], k2_all[t] = f, k1, k2
    for a in (f_all, k1_all, k2_all, logdet):
        a.setflags(write=False)
    return f_all, k1_all, k2_all, logdet


def without_steps(y: np.ndarray, steps: Sequence[ChangePoint], scale: float = 1.0) -> np.ndarray:
    """`y` with each level step taken out: the runs from each level change point on moved by its (after -
    before) / `scale` (`scale`: the median the series was divided by, when `steps` are in the figures' units)."""
    out = np.array(y, dtype=np.float64)
    for c in steps:
        if c.kind == "level":
            out[c.index:] -= (c.after - c.before) / scale
    return out


def _search_with(x: np.ndarray, y: np.ndarray, nm: NoiseModel, max_pvalue: float, min_magnitude: float,
                 min_size: int) -> list[ChangePoint]:
    """One round of the search and its tests under the noise model `nm`."""
    scale = nm.short**2
    if nm.dependent:
        k = max(min_size, min(SEARCH_SCALE, x.size // 4))
        var, _, _ = nm.window_variance(k, k, k)
        scale = max(scale, var * k / 2)
    cuts = optimal_partition(y, 3 * scale * math.log(x.size), min_size)
    while True:
        edges = [0, *cuts, x.size]
        found: list[ChangePoint] = []
        worst: tuple[float, int] | None = None
        for i, cut in enumerate(cuts):
            cp, separated = _cut_test(x, y, edges[i], cut, edges[i + 2], nm, min_size)
            if not _passes(cp, max_pvalue, min_magnitude, separated) and (worst is None or cp.pvalue > worst[0]):
                worst = (cp.pvalue, cut)
            found.append(cp)
        if worst is None:
            return found
        cuts.remove(worst[1])


def _cut_test(x: np.ndarray, y: np.ndarray, lo: int, cut: int, hi: int, nm: NoiseModel,
              min_size: int) -> tuple[ChangePoint, bool]:
    """The step at `cut` between the segments x[lo:cut] and x[cut:hi]. Independent noise: Welch's t-test of the
    two segments. A dependent noise model: the windows of the segments next to the cut whose difference of means
    is least noisy under the model (`NoiseModel.window_variance`: whole segments for AR(1) noise, nearer runs
    with a random walk), that difference against its variance under the model (an effective sample size, not a
    count of runs); Welch's t-test of the two segments must agree at WELCH_GUARD (one odd run in a short segment
    is not a step); the variance scaled up where the two segments' own run-to-run noise (`noise`) is larger than
    the model's (a noisier stretch is not a step). before/after: the two windows' means. Also: whether the
    runs tested after the cut are all beyond those before (`_separated`)."""
    if not nm.dependent:
        a, b = x[lo:cut], x[cut:hi]
        p = _iid_p(a, b, pool=hi == x.size)
        return ChangePoint(cut, float(a.mean()), float(b.mean()), p), _separated(a, b)
    var, wa, wb = nm.window_variance(cut - lo, hi - cut, min_size)
    local = noise(np.concatenate([y[lo:cut], y[cut:hi] - (y[cut] - y[cut - 1])]))
    var *= max(1.0, (local / nm.short) ** 2)
    a, b = x[cut - wa:cut], x[cut:cut + wb]
    p = _normal_p(float(y[cut:cut + wb].mean() - y[cut - wa:cut].mean()), var)
    welch = _welch_p(x[lo:cut], x[cut:hi])
    if welch > WELCH_GUARD:  # the segments themselves do not back it (an outlier in a short segment)
        p = max(p, welch)
    return ChangePoint(cut, float(a.mean()), float(b.mean()), p), _separated(a, b)


# --- drift: a level that creeps, one finding instead of a staircase -------------------------------------------

DRIFT_MIN_RUNS = 6  # a ramp shorter than this is a step
DRIFT_MIN_CHANGE = 0.03  # relative: a drift is reported when its total change is at least this (and significant)


def _ramp_fits(y: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple[float, int, int, float, float]:
    """The best ramp over `y` (least squares): level a until s, rising linearly to e, level after e (s in
    `starts`, e in `ends`, e - s >= DRIFT_MIN_RUNS). Returns (rss, s, e, a, slope); rss inf when none fits (a
    ramp ending after the last run is the one ending at it: taken as the latter). Every (s, e) at once from
    cumulative sums: the ramp r_t = clip(t - s, 0, e - s) has closed-form sums, and its cross-product with y is
    two differences of cumulative sums."""
    m = y.size
    s = np.asarray(starts, dtype=np.int64)[:, None]
    e = np.asarray(ends, dtype=np.int64)[None, :]
    ok = (e - s >= DRIFT_MIN_RUNS) & (e <= m) & (s >= 0)
    if m - 1 in ends:  # ending at m - 1 or at m is the same ramp (its last run on the line): the one ending at m - 1
        ok &= e != m
    if not ok.any():
        return (math.inf, 0, 0, 0.0, 0.0)
    sc, ec = np.clip(s, 0, m), np.clip(e, 0, m)
    span = (ec - sc).astype(np.float64)  # e - s: the ramp's rise
    ybar = float(y.mean())
    yc = y - ybar
    cy = np.concatenate([[0.0], np.cumsum(yc)])  # cy[k] = sum of yc[:k]
    cty = np.concatenate([[0.0], np.cumsum(np.arange(m) * yc)])
    lo = np.minimum(sc + 1, ec)  # the ramp's rising runs are s+1 .. e-1
    sum_r = span * (span - 1) / 2 + (m - ec) * span
    sum_r2 = (span - 1) * span * (2 * span - 1) / 6 + (m - ec) * span**2
    sum_ry = (cty[ec] - cty[lo]) - sc * (cy[ec] - cy[lo]) + span * (cy[m] - cy[ec])
    with np.errstate(divide="ignore", invalid="ignore"):
        sxx = sum_r2 - sum_r**2 / m
        b = sum_ry / sxx
        rss = float(np.sum(yc**2)) - b * b * sxx
    rss = np.where(ok & (sxx > 0), rss, math.inf)
    i, j = np.unravel_index(int(np.argmin(rss)), rss.shape)
    if not math.isfinite(float(rss[i, j])):
        return (math.inf, 0, 0, 0.0, 0.0)
    slope = float(b[i, j])
    return (float(rss[i, j]), int(s[i, 0]), int(e[0, j]), ybar - slope * float(sum_r[i, j]) / m, slope)


def drifts(values: Sequence[float], level: Sequence[ChangePoint], model: NoiseModel | None = None, *,
           max_pvalue: float = DEFAULT_MAX_PVALUE,
           min_magnitude: float = DEFAULT_MIN_MAGNITUDE) -> tuple[list[ChangePoint], list[ChangePoint]]:
    """(the level change points left, the drifts): a wandering level as one finding (kind "drift": its first
    run, the run after its end, slope per run, the fitted level at start and end), never a staircase.

    1. Two or more consecutive level change points in the same direction that a ramp explains (flat, a straight
    line of at least DRIFT_MIN_RUNS runs, flat: 4 parameters) at least as well as their steps do (BIC: n ln
    RSS/n + parameters x ln n over the stretch from the segment before the first to the segment after the last)
    are replaced by that ramp.
    2. Between the remaining level change points, a stretch of at least 2 DRIFT_MIN_RUNS runs with a ramp whose
    slope passes a t-test with the standard error of autocorrelated residuals (their variance over the stretch
    or along the ramp, the larger; AR(1) from their lag-1
    correlation: the variance inflated by (1 + phi) / (1 - phi), the effective sample size n (1 - phi) /
    (1 + phi); Newey-West's concern) at `max_pvalue`.
    Either way a drift is reported only when its total change is at least DRIFT_MIN_CHANGE and `min_magnitude`."""
    x = np.asarray([float(v) for v in values], dtype=np.float64)
    level = sorted(level, key=lambda c: c.index)
    if x.size < 2 * DRIFT_MIN_RUNS:
        return list(level), []
    med = float(np.median(x))
    y = x / med
    least = max(DRIFT_MIN_CHANGE, min_magnitude)
    keep, out = _staircases(y, med, list(level), least)
    out += _creeps(y, med, keep, out, least, max_pvalue)
    return keep, out


def _staircases(y: np.ndarray, med: float, keep: list[ChangePoint], least: float
                ) -> tuple[list[ChangePoint], list[ChangePoint]]:
    """drifts' step 1: runs of same-direction level change points that a ramp explains at least as well (BIC) and
    that move the level by at least `least` become one drift each; (the change points left, those drifts)."""
    out: list[ChangePoint] = []
    i = 0
    while i < len(keep) - 1:
        j = i
        while (j + 1 < len(keep) and keep[j + 1].kind == "level"
               and np.sign(keep[j + 1].change) == np.sign(keep[i].change)):
            j += 1
        if j == i:
            i += 1
            continue
        idx = [c.index for c in keep]
        lo = idx[i - 1] if i > 0 else 0
        hi = idx[j + 1] if j + 1 < len(idx) else y.size
        seg = y[lo:hi]
        cuts = [c - lo for c in idx[i:j + 1]]
        bounds = [0, *cuts, seg.size]
        rss_steps = sum(float(np.sum((seg[a:b] - seg[a:b].mean()) ** 2)) for a, b in pairwise(bounds))
        rss_ramp, s, e, a, slope = _ramp_fits(seg, np.arange(0, cuts[0] + 1), np.arange(cuts[-1], seg.size + 1))
        n = seg.size
        floor = (NOISE_FLOOR**2) * n
        bic_steps = n * math.log(max(rss_steps, floor) / n) + (len(cuts) + 1) * math.log(n)
        bic_ramp = n * math.log(max(rss_ramp, floor) / n) + 4 * math.log(n)
        total = slope * (e - s)
        if bic_ramp <= bic_steps and abs(total) >= least:
            out.append(ChangePoint(max(1, lo + s), a * med, (a + total) * med,
                                   max(c.pvalue for c in keep[i:j + 1]), "drift", end=lo + e,
                                   slope=slope / a if a else math.inf))
            del keep[i:j + 1]
            continue
        i = j + 1
    return keep, out


def _creeps(y: np.ndarray, med: float, keep: Sequence[ChangePoint], found: Sequence[ChangePoint], least: float,
            max_pvalue: float) -> list[ChangePoint]:
    """drifts' step 2: between the level change points left (and outside the drifts `found`), a stretch whose
    ramp moves the level by at least `least` with a slope that passes a t-test under AR(1)-corrected noise."""
    from scipy.stats import t as student

    out: list[ChangePoint] = []
    edges = [0, *(c.index for c in keep), y.size]
    for lo, hi in pairwise(edges):
        if hi - lo < 2 * DRIFT_MIN_RUNS or any(d.index < hi and (d.end or 0) > lo for d in found):
            continue
        seg = y[lo:hi]
        rss, s, e, a, slope = _ramp_fits(seg, np.arange(0, seg.size - DRIFT_MIN_RUNS + 1),
                                         np.arange(DRIFT_MIN_RUNS, seg.size + 1))
        total = slope * (e - s)
        if not math.isfinite(rss) or abs(total) < least:
            continue
        t = np.arange(seg.size, dtype=np.float64)
        r = np.clip(t - s, 0, e - s)
        resid = seg - (a + slope * r)
        phi = _lag1(resid)
        n = seg.size
        n_eff = max(3.0, n * (1 - phi) / (1 + phi))
        # the noise of the stretch, or along the ramp where that is larger (the spread may change within it)
        sigma2 = max(float(np.sum(resid**2)) / (n - 2), float(np.mean(resid[s:e] ** 2)))
        se = math.sqrt(sigma2 / float(np.sum((r - r.mean()) ** 2)) * (1 + phi) / (1 - phi))
        p = float(2 * student.sf(abs(slope) / se, n_eff - 2)) if se > 0 else 0.0
        if p <= max_pvalue:
            out.append(ChangePoint(max(1, lo + s), a * med, (a + total) * med, p, "drift", end=lo + e,
                                   slope=slope / a if a else math.inf))
    return out


def _lag1(r: np.ndarray) -> float:
    """Lag-1 autocorrelation of residuals, clipped to [0, 0.98] (negative correlation is not credited)."""
    c = r - r.mean()
    den = float(np.sum(c * c))
    if den <= 0:
        return 0.0
    return float(np.clip(np.sum(c[1:] * c[:-1]) / den, 0.0, 0.98))


# --- modes: two levels that alternate -------------------------------------------------------------------------

MODES_GAP = 4.0  # the two levels at least this many within-mode sigmas apart
MODES_MIN_SHARE = 0.1  # each level holds at least this share of the runs
MODES_MIN_SWITCHES = 4  # and the series switches between them at least this often (and n / 20 times)
MODES_MIN_MIXING = 0.5  # modes told apart run to run (a step of both): switches / those of independent draws


def find_modes(values: Sequence[float]) -> Modes | None:
    """Two levels the series alternates between, or None: the split of the sorted values into two groups with
    the least squared deviation (2-means), accepted when the groups' means are at least MODES_GAP within-group
    sigmas (robust, `robust_sd`) apart, each holds at least MODES_MIN_SHARE of the runs, and the series switches
    between them at least max(MODES_MIN_SWITCHES, n / 20) times (a step, or a regression and its fix, switches
    once or twice), with each level at least MODES_MIN_SHARE / 2 of every third of the runs (a step with noise
    near its midpoint switches often, but one level holds a third alone). A step of both modes is still found: the
    level search runs with the modes taken out; and since such a step widens each mode's spread, the levels may
    instead be MODES_GAP sigmas apart measured run to run within each mode (successive differences), where the
    runs switch at least MODES_MIN_MIXING of the times independent draws would and at most MODES_MIN_SHARE / 2
    of them lie within 2 such sigmas of the threshold between the modes."""
    x = np.asarray([float(v) for v in values], dtype=np.float64)
    n = x.size
    if n < 10:
        return None
    srt = np.sort(x)
    k = np.arange(1, n)
    c1, c2 = np.cumsum(srt), np.cumsum(srt**2)
    left = c2[:-1] - c1[:-1] ** 2 / k
    right = (c2[-1] - c2[:-1]) - (c1[-1] - c1[:-1]) ** 2 / (n - k)
    split = int(np.argmin(left + right)) + 1
    threshold = (srt[split - 1] + srt[split]) / 2
    high = x > threshold
    share = float(high.mean())
    if min(share, 1 - share) < MODES_MIN_SHARE:
        return None
    lo_v, hi_v = x[~high], x[high]
    floor = NOISE_FLOOR * float(np.median(x))
    within = max(robust_sd(lo_v), robust_sd(hi_v), floor)
    gap = float(hi_v.mean() - lo_v.mean())
    switches = int(np.sum(high[1:] != high[:-1]))
    if switches < max(MODES_MIN_SWITCHES, n // 20):
        return None
    if gap < MODES_GAP * within:
        # A step of both modes widens each mode's spread (one mode holds 100 and 108 alike): measured run to run
        # within each mode (successive differences of its runs / sqrt 2) it is not. Accepted that way only when
        # the runs switch between the modes at least half as often as independent draws would (a walk or a
        # season split in two switches in stretches, a step once) and few runs lie between the modes (within
        # 2 of those sigmas of the threshold: autocorrelated or uniform noise cut in two has many there).
        local = max(max(robust_sd(np.diff(lo_v)), robust_sd(np.diff(hi_v))) / math.sqrt(2), floor)
        between = float(np.mean(np.abs(x - threshold) < 2 * local))
        if (gap < MODES_GAP * local or between > MODES_MIN_SHARE / 2
                or switches < MODES_MIN_MIXING * 2 * share * (1 - share) * (n - 1)):
            return None
    thirds = [float(part.mean()) for part in np.array_split(high, 3)]
    if min(min(t, 1 - t) for t in thirds) < MODES_MIN_SHARE / 2:  # a step or a bump: one level holds a third
        return None
    return Modes(float(lo_v.mean()), float(hi_v.mean()), share, switches)


def _without_modes(x: np.ndarray, modes: Modes) -> np.ndarray:
    """The series with each run of the high mode moved down to the low one (what the level search sees)."""
    threshold = (modes.low + modes.high) / 2
    return np.where(x > threshold, x - (modes.high - modes.low), x)


SPREAD_MIN_SEGMENT = 8  # a spread needs more runs than a level; one odd run in 8 does not make a noisier segment
SPREAD_PENALTY = 6.0  # x log(n): the search's penalty per spread segment (benchmark-chosen, docs/history.md)
SPREAD_CLIP = 4.0  # residuals beyond 4 robust sigmas are clipped there: a one-night outlier is not a spread


def spread_changes(values: Sequence[float], level: Sequence[ChangePoint] = (), *,
                   max_pvalue: float = DEFAULT_MAX_PVALUE, min_magnitude: float = DEFAULT_MIN_MAGNITUDE,
                   min_size: int = SPREAD_MIN_SEGMENT, dependent: bool = False) -> list[ChangePoint]:
    """Changes of the run-to-run spread of `values` (a thread-policy change that makes a case noisy, not slower).

    The residuals around the level's segments (cut at the `level` change points), scaled by the series' median
    and clipped at SPREAD_CLIP robust sigmas, are searched exactly (`optimal_partition`, Gaussian cost of a
    zero-mean segment, penalty SPREAD_PENALTY log n, segments of at least `min_size`); each cut must then pass
    Brown-Forsythe's test (Levene's, median-centred) between its neighbouring segments at `max_pvalue` and
    change the spread (sigma) by at least `min_magnitude`; the weakest failing cut is dropped and the rest
    tested again. before/after of a spread change point: the two segments' standard deviations. `dependent`
    (the noise model says the runs are autocorrelated or wander, `fit_noise`): the residuals are the successive
    differences instead (the step across each level change point left out), whose spread the wander does not
    move; their sigmas are reported divided by sqrt 2."""
    x = np.asarray([float(v) for v in values], dtype=np.float64)
    if x.size < 2 * min_size or not np.all(np.isfinite(x)):
        return []
    med = float(np.median(x))
    if med <= 0:
        return []
    r, shift = _spread_residuals(x / med, level, dependent)
    if r.size < 2 * min_size:
        return []
    robust = max(MAD_TO_SIGMA * float(np.median(np.abs(r))), NOISE_FLOOR)
    r = np.clip(r, -SPREAD_CLIP * robust, SPREAD_CLIP * robust)
    cuts = optimal_partition(r, SPREAD_PENALTY * math.log(r.size), min_size, cost="var")
    while cuts:
        bounds = [0, *cuts, r.size]
        found: list[ChangePoint] = []
        worst: tuple[float, int] | None = None
        for i, cut in enumerate(cuts):
            cp = _spread_cut(r[bounds[i]:cut], r[cut:bounds[i + 2]], cut + shift, med)
            p = cp.pvalue
            if (p > max_pvalue or abs(cp.change) < min_magnitude) and (worst is None or p > worst[0]):
                worst = (p, cut)
            found.append(cp)
        if worst is None:
            return found
        cuts.remove(worst[1])
    return []


def _spread_residuals(y: np.ndarray, level: Sequence[ChangePoint], dependent: bool) -> tuple[np.ndarray, int]:
    """The residuals of the scaled series `y` whose spread is searched, and the run of residual 0: around the
    medians of the level's segments (cut at `level`), or (`dependent`) the successive differences within each
    segment, divided by sqrt 2."""
    edges = [0, *sorted(c.index for c in level), y.size]
    if dependent:
        r = np.concatenate([np.diff(y[a:b]) for a, b in pairwise(edges) if b - a > 1]) / math.sqrt(2)
        return r, y.size - r.size  # a cut at residual j is run j + shift (about: one difference per level segment)
    return np.concatenate([y[a:b] - np.median(y[a:b]) for a, b in pairwise(edges) if b > a]), 0


def _spread_cut(a: np.ndarray, b: np.ndarray, run: int, med: float) -> ChangePoint:
    """The spread change point at `run` between the residuals `a` before and `b` after: their standard
    deviations (times the series' median `med`) and Brown-Forsythe's p-value (1.0 where undefined)."""
    from scipy.stats import levene

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        p = float(levene(a, b, center="median").pvalue)
    p = 1.0 if math.isnan(p) else p
    return ChangePoint(run, float(a.std(ddof=1)) * med, float(b.std(ddof=1)) * med, p, "spread")


def _dependent_step(nm: NoiseModel, n1: int, n2: int, z: float, z_power: float) -> float:
    """min_detectable_step under the dependent model `nm`: the step whose least noisy windows' difference is `z`
    of its sigmas, or whose difference of the whole segments' means passes the search's penalty with the same
    power (`z_power` sigmas of that difference above the penalty's threshold), whichever is larger."""
    var, _, _ = nm.window_variance(n1, n2, MIN_SEGMENT)
    whole, _, _ = nm.window_variance(n1, n2, max(n1, n2))
    k = max(MIN_SEGMENT, min(SEARCH_SCALE, (n1 + n2) // 4))
    scale = max(nm.short**2, nm.window_variance(k, k, k)[0] * k / 2)
    search = math.sqrt(3 * math.log(n1 + n2) * scale * (1 / n1 + 1 / n2)) + z_power * math.sqrt(whole)
    return max(z * math.sqrt(var), search)


def min_detectable_step(values: Sequence[float], runs_after: int, *, max_pvalue: float = DEFAULT_MAX_PVALUE,
                        power: float = 0.9) -> float | None:
    """The smallest relative step (e.g. 0.05 for 5%) this history would show as a change point about `power` of
    the time once `runs_after` runs at the new level follow its runs, under its own noise model (`fit_noise`).

    Both stages must pass: the search's penalty (a step of d over n1 and n2 runs gains d^2 / (1/n1 + 1/n2) >
    3 s^2 log n, s as `_search_with` takes it) and the step's test at `max_pvalue` with that power. Independent
    noise: Welch's t-test (the noncentral t's power, Welch-Satterthwaite degrees of freedom for equal spreads),
    s the run-to-run noise. A dependent model (AR(1) noise, a wander): the difference of the least noisy windows'
    means against its variance under the model (`NoiseModel.window_variance`, as `_cut_test` tests a step: an
    effective sample size, not a count of runs), s the noise of a mean over SEARCH_SCALE runs per run, and the
    search's stage with the same power (the whole segments' difference that much above its threshold); sized
    under the history's model and again under the model fitted on the history with the step in it (what the
    detector fits), the larger (`_dependent_step`). None below MIN_SEGMENT runs on either side, or without a
    positive median."""
    from scipy.optimize import brentq
    from scipy.stats import nct, norm
    from scipy.stats import t as student

    x = np.asarray([float(v) for v in values], dtype=np.float64)
    if x.size < MIN_SEGMENT or runs_after < MIN_SEGMENT or not np.all(np.isfinite(x)):
        return None
    med = float(np.median(x))
    if med <= 0:
        return None
    y = x / med
    nm = fit_noise(y)
    n1, n2 = x.size, runs_after
    se = math.sqrt(1 / n1 + 1 / n2)
    if nm.dependent:
        z_power = float(norm.ppf(power))
        z = float(norm.ppf(1 - max_pvalue / 2)) + z_power
        step = _dependent_step(nm, n1, n2, z, z_power)
        # The detector fits its model on the series with the step in it, where a step looks partly like wander
        # (a larger tau or phi): the step is sized again under the model fitted on the history followed by its
        # last runs moved by that step (once: docs/history.md, the rates measured with none, one and two refits).
        refit = fit_noise(np.concatenate([y, np.resize(y[-n2:], n2) + step]))
        return max(step, _dependent_step(refit, n1, n2, z, z_power)) if refit.dependent else step
    sigma = noise(y)
    df = se**4 / (1 / (n1**2 * (n1 - 1)) + 1 / (n2**2 * (n2 - 1)))
    crit = float(student.ppf(1 - max_pvalue / 2, df))
    # the noncentrality at which the t statistic passes `crit` with probability `power`
    ncp = brentq(lambda d: float(nct.sf(crit, df, d)) - power, 0.0, 10 * crit + 20)
    test = ncp * sigma * se
    search = math.sqrt(3 * math.log(n1 + n2)) * sigma * se
    return max(test, search)


def _z_p(held: np.ndarray, tail: np.ndarray) -> float:
    """Two-sided p of the tail's mean under the held segment's mean and spread (the tail may be one run)."""
    from scipy.stats import norm

    spread = max(float(held.std(ddof=1)) if held.size > 1 else 0.0, NOISE_FLOOR * abs(float(held.mean())))
    if spread == 0:
        return 0.0 if float(tail.mean()) != float(held.mean()) else 1.0
    z = abs(float(tail.mean()) - float(held.mean())) / (spread * math.sqrt(1 / tail.size + 1 / held.size))
    return float(2 * norm.sf(z))


def noise(y: np.ndarray) -> float:
    """Run-to-run noise of `y` (relative figures): sigma of successive differences / sqrt(2), robustly: the
    largest of the MAD, the IQR and the mean of the smallest 90% of |differences| estimates (each scaled to a
    Gaussian's sigma), at least NOISE_FLOOR. Steps are a few large differences and barely move any of them; the
    third keeps a series of two alternating levels without noise (most differences exactly 0, MAD and IQR 0)
    from being taken for a noiseless one."""
    d = np.diff(y)
    if d.size < 2:
        return NOISE_FLOOR
    mad = MAD_TO_SIGMA * float(np.median(np.abs(d - np.median(d))))
    q75, q25 = np.percentile(d, [75, 25])
    iqr = float(q75 - q25) / 1.3489795
    small = np.sort(np.abs(d))[:max(1, int(0.9 * d.size))]
    trimmed = float(small.mean()) / 0.6573  # E|Z| over its smallest 90%, Z standard normal
    return max(NOISE_FLOOR, max(mad, iqr, trimmed) / math.sqrt(2))


def optimal_partition(y: np.ndarray, penalty: float, min_size: int,
                      cost: str = "l2") -> list[int]:
    """The segmentation of `y` minimising the sum of segment costs + `penalty` per segment, segments of at least
    `min_size` (optimal partitioning, Jackson et al. 2005; the optimum PELT finds, here without pruning: a
    history has hundreds of runs, and numpy does each end point's candidates at once). Returns the cuts (the
    first index of each new segment). cost "l2": the sum of squared deviations from the segment's mean (a
    change of level); "var": the Gaussian likelihood of a zero-mean segment, k log(mean square) (a change of
    spread in residuals)."""
    n = y.size
    s1 = np.concatenate([[0.0], np.cumsum(y)])
    s2 = np.concatenate([[0.0], np.cumsum(y * y)])
    best = np.full(n + 1, np.inf)
    best[0] = -penalty
    last = np.zeros(n + 1, dtype=np.int64)
    floor = 1e-12
    for t in range(min_size, n + 1):
        s = np.concatenate([[0], np.arange(min_size, t - min_size + 1)])
        s = s[np.isfinite(best[s])]
        k = t - s
        if cost == "l2":
            c = (s2[t] - s2[s]) - (s1[t] - s1[s]) ** 2 / k
        else:
            c = k * np.log(np.maximum((s2[t] - s2[s]) / k, floor))
        total = best[s] + c + penalty
        i = int(np.argmin(total))
        best[t], last[t] = total[i], s[i]
    cuts = []
    t = n
    while t > 0:
        t = int(last[t])
        if t > 0:
            cuts.append(t)
    return sorted(cuts)


POOL_RATIO = 4.0  # segments whose variances are within this ratio share one: Student's pooled t-test ...
POOL_MAX_RUNS = 5  # ... where the newest one has at most this many runs ...
POOL_BEFORE = 20  # ... pooled with the last this many runs before it


def _iid_p(a: np.ndarray, b: np.ndarray, pool: bool = True) -> float:
    """The two segments' test under independent noise: Welch's t-test, or (`pool`: `b` is the newest segment)
    Student's with the pooled variance of `b` and the last POOL_BEFORE runs of `a` where `b` has at most
    POOL_MAX_RUNS runs and the two variances are within POOL_RATIO of each other (a short new segment then borrows the long one's estimate of the noise; a short
    segment between two others is a blip, and keeps Welch's: Welch's degrees of freedom from 5 new runs missed half the 10% steps in 2%
    noise at p 1e-4; a segment several times noisier keeps Welch's)."""
    p = _welch_p(a, b)
    a = a[-POOL_BEFORE:]  # the runs just before: a segment may span a change of spread
    va, vb = (float(a.var(ddof=1)) if a.size > 1 else 0.0), (float(b.var(ddof=1)) if b.size > 1 else 0.0)
    if (pool and 1 < b.size <= POOL_MAX_RUNS and va > 0 and vb > 0
            and 1 / POOL_RATIO <= vb / va <= POOL_RATIO):
        pooled = _ttest_p(a, b, equal_var=True)
        if not math.isnan(pooled):
            p = min(p, pooled)
    return p


def _welch_p(a: np.ndarray, b: np.ndarray) -> float:
    """Welch's t-test p-value; two constant segments: 0 if their levels differ, else 1."""
    if np.ptp(a) == 0 and np.ptp(b) == 0:
        return 0.0 if a[0] != b[0] else 1.0
    p = _ttest_p(a, b, equal_var=False)
    return 1.0 if math.isnan(p) else p


def _ttest_p(a: np.ndarray, b: np.ndarray, equal_var: bool) -> float:
    """Two-sided p of the two-sample t-test, Welch's or (`equal_var`) Student's with the pooled variance: what
    scipy.stats.ttest_ind gives (NaN where it does), without its per-call overhead (about 1 ms, thousands of
    calls per history)."""
    from scipy.special import stdtr

    n1, n2 = a.size, b.size
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)  # a one-run segment: no variance, p NaN as scipy's
        if equal_var:
            df = np.float64(n1 + n2 - 2)
            ss = float(np.sum((a - a.mean()) ** 2) + np.sum((b - b.mean()) ** 2))
            denom = np.sqrt(ss / df * (1.0 / n1 + 1.0 / n2))
        else:
            v1, v2 = a.var(ddof=1), b.var(ddof=1)
            vn1, vn2 = v1 / n1, v2 / n2
            df = (vn1 + vn2) ** 2 / (vn1**2 / np.float64(n1 - 1) + vn2**2 / np.float64(n2 - 1))
            df = np.float64(1.0) if np.isnan(df) else df
            denom = np.sqrt(vn1 + vn2)
        t = (a.mean() - b.mean()) / denom
        return float(2 * stdtr(df, -abs(t)))
