"""Change points in a series of per-run figures: an exact penalised search (PELT's optimum), each kept only if a
Welch t-test backs it; changes of run-to-run spread likewise, each backed by a Brown-Forsythe test."""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import numpy as np

from harness.results.stats import MAD_TO_SIGMA

# Otava's (Hunter's) default is p < 0.001 with segments of at least 3 runs. Here the t-test follows a search
# that picked the best split, which biases p down: 0.001 gave 8 false change points in 300 flat histories of
# 24 runs (1% noise), 0.0001 gave 1 and still found every 10% step (docs/history.md).
DEFAULT_MAX_PVALUE = 0.0001
DEFAULT_MIN_MAGNITUDE = 0.0
MIN_SEGMENT = 3
NOISE_FLOOR = 0.002  # relative: a history flatter than 0.2% run to run is treated as that noisy


@dataclass(frozen=True)
class ChangePoint:
    """The series' level moves between index-1 and `index` (the first value of the new level)."""

    index: int
    before: float  # mean of the segment before
    after: float  # mean of the segment after
    pvalue: float  # Welch's t-test between the two segments (a spread change: Brown-Forsythe's test)
    kind: str = "level"  # "level": the mean moved; "spread": the run-to-run spread did (before/after: its sigma)

    @property
    def change(self) -> float:
        """Relative change of the mean (of the spread, for kind "spread"), e.g. 0.10 for 10% higher after."""
        return self.after / self.before - 1.0 if self.before else math.inf

    def as_dict(self) -> dict[str, float | int | str]:
        return {"index": self.index, "before": self.before, "after": self.after, "change": self.change,
                "pvalue": self.pvalue, "kind": self.kind}


def detect(values: Sequence[float], *, max_pvalue: float = DEFAULT_MAX_PVALUE,
           min_magnitude: float = DEFAULT_MIN_MAGNITUDE, min_size: int = MIN_SEGMENT,
           spread: bool = True) -> list[ChangePoint]:
    """The change points `harness history changes` reports for one series (what the benchmark
    harness_suites.benchmarks.changepoints scores), oldest first: the level's (`change_points`) and, with
    `spread`, the run-to-run spread's (`spread_changes`) where no level change point is within `min_size` runs."""
    level = change_points(values, max_pvalue=max_pvalue, min_magnitude=min_magnitude, min_size=min_size)
    if not spread:
        return level
    extra = [c for c in spread_changes(values, level, max_pvalue=max_pvalue, min_magnitude=min_magnitude)
             if all(abs(c.index - lv.index) >= min_size for lv in level)]
    return sorted([*level, *extra], key=lambda c: c.index)


SPREAD_MIN_SEGMENT = 8  # a spread needs more runs than a level; one odd run in 8 does not make a noisier segment
SPREAD_PENALTY = 6.0  # x log(n): the search's penalty per spread segment (benchmark-chosen, docs/history.md)
SPREAD_CLIP = 4.0  # residuals beyond 4 robust sigmas are clipped there: a one-night outlier is not a spread


def spread_changes(values: Sequence[float], level: Sequence[ChangePoint] = (), *,
                   max_pvalue: float = DEFAULT_MAX_PVALUE, min_magnitude: float = DEFAULT_MIN_MAGNITUDE,
                   min_size: int = SPREAD_MIN_SEGMENT) -> list[ChangePoint]:
    """Changes of the run-to-run spread of `values` (a thread-policy change that makes a case noisy, not slower).

    The residuals around the level's segments (cut at the `level` change points), scaled by the series' median
    and clipped at SPREAD_CLIP robust sigmas, are searched exactly (`optimal_partition`, Gaussian cost of a
    zero-mean segment, penalty SPREAD_PENALTY log n, segments of at least `min_size`); each cut must then pass
    Brown-Forsythe's test (Levene's, median-centred) between its neighbouring segments at `max_pvalue` and
    change the spread (sigma) by at least `min_magnitude`; the weakest failing cut is dropped and the rest
    tested again. before/after of a spread change point: the two segments' standard deviations."""
    from scipy.stats import levene

    x = np.asarray([float(v) for v in values], dtype=np.float64)
    if x.size < 2 * min_size or not np.all(np.isfinite(x)):
        return []
    med = float(np.median(x))
    if med <= 0:
        return []
    y = x / med
    edges = [0, *sorted(c.index for c in level), x.size]
    r = np.concatenate([y[a:b] - np.median(y[a:b]) for a, b in pairwise(edges) if b > a])
    robust = max(MAD_TO_SIGMA * float(np.median(np.abs(r))), NOISE_FLOOR)
    r = np.clip(r, -SPREAD_CLIP * robust, SPREAD_CLIP * robust)
    cuts = optimal_partition(r, SPREAD_PENALTY * math.log(x.size), min_size, cost="var")
    while cuts:
        bounds = [0, *cuts, x.size]
        found: list[ChangePoint] = []
        worst: tuple[float, int] | None = None
        for i, cut in enumerate(cuts):
            a, b = r[bounds[i]:cut], r[cut:bounds[i + 2]]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                p = float(levene(a, b, center="median").pvalue)
            p = 1.0 if math.isnan(p) else p
            cp = ChangePoint(cut, float(a.std(ddof=1)) * med, float(b.std(ddof=1)) * med, p, "spread")
            if (p > max_pvalue or abs(cp.change) < min_magnitude) and (worst is None or p > worst[0]):
                worst = (p, cut)
            found.append(cp)
        if worst is None:
            return found
        cuts.remove(worst[1])
    return []


def change_points(values: Sequence[float], *, max_pvalue: float = DEFAULT_MAX_PVALUE,
                  min_magnitude: float = DEFAULT_MIN_MAGNITUDE, min_size: int = MIN_SEGMENT) -> list[ChangePoint]:
    """Change points of the mean of `values` (oldest first): `_segment_changes`, and a step that held for at
    least `min_size` runs and then came back within the newest runs, too few to be a segment of their own.

    Without the second rule one run back at the old level after a +30% step of 5 runs would hide the step (the
    newest runs join the step's segment and blur it). So the series is searched again without its newest r
    runs (r = 1 .. min_size-1, the smallest r that finds more): the change points found there are kept, and the
    newest r runs are a change point too (the recovery) when they differ from the held level (a z-test
    against that segment's spread, at `max_pvalue` and `min_magnitude`)."""
    x = np.asarray([float(v) for v in values], dtype=np.float64)
    found = _segment_changes(x, max_pvalue, min_magnitude, min_size)
    if x.size < 2 * min_size + 1 or not np.all(np.isfinite(x)):
        return found
    known = {c.index for c in found}
    for r in range(1, min_size):
        head = _segment_changes(x[:-r], max_pvalue, min_magnitude, min_size)
        extra = [c for c in head if c.index not in known]
        if not extra:
            continue
        out = sorted({c.index: c for c in [*found, *head] if c.index < x.size - r}.values(), key=lambda c: c.index)
        start = out[-1].index if out else 0
        held, tail = x[start:x.size - r], x[x.size - r:]
        recovery = ChangePoint(x.size - r, float(held.mean()), float(tail.mean()), _z_p(held, tail))
        if recovery.pvalue <= max_pvalue and abs(recovery.change) >= min_magnitude:
            out.append(recovery)
        return out
    return found


def min_detectable_step(values: Sequence[float], runs_after: int, *, max_pvalue: float = DEFAULT_MAX_PVALUE,
                        power: float = 0.9) -> float | None:
    """The smallest relative step (e.g. 0.05 for 5%) this history would show as a change point about `power` of
    the time once `runs_after` runs at the new level follow its runs, from its own run-to-run noise (`noise`).

    Both stages must pass: the search's penalty (a step of d over n1 and n2 runs gains d^2 / (1/n1 + 1/n2) >
    3 sigma^2 log n) and Welch's t-test at `max_pvalue` with that power (the noncentral t's power, Welch-
    Satterthwaite degrees of freedom for equal spreads). None below MIN_SEGMENT runs on
    either side, or without a positive median."""
    from scipy.optimize import brentq
    from scipy.stats import nct
    from scipy.stats import t as student

    x = np.asarray([float(v) for v in values], dtype=np.float64)
    if x.size < MIN_SEGMENT or runs_after < MIN_SEGMENT or not np.all(np.isfinite(x)):
        return None
    med = float(np.median(x))
    if med <= 0:
        return None
    sigma = noise(x / med)
    n1, n2 = x.size, runs_after
    se = math.sqrt(1 / n1 + 1 / n2)
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


def _segment_changes(x: np.ndarray, max_pvalue: float, min_magnitude: float, min_size: int) -> list[ChangePoint]:
    """Change points of the mean of `x`, each between two segments of at least `min_size`.

    An exact penalised search (`optimal_partition`, what PELT finds, L2 cost) proposes breakpoints on the series
    scaled by its median, with a BIC-like penalty of 3 sigma^2 log(n), sigma the run-to-run noise (`noise`);
    then, as Otava does after E-Divisive, every breakpoint must pass Welch's t-test between its neighbouring
    segments at `max_pvalue` and move the mean by at least `min_magnitude`; the weakest failing one is dropped
    and the rest tested again."""
    from scipy.stats import ttest_ind

    if x.size < 2 * min_size or not np.all(np.isfinite(x)):
        return []
    med = float(np.median(x))
    if med <= 0:
        return []
    y = x / med
    sigma = noise(y)
    cuts = optimal_partition(y, 3 * sigma**2 * math.log(x.size), min_size)
    while True:
        edges = [0, *cuts, x.size]
        found: list[ChangePoint] = []
        worst: tuple[float, int] | None = None
        for i, cut in enumerate(cuts):
            a, b = x[edges[i]:cut], x[cut:edges[i + 2]]
            p = _welch_p(a, b, ttest_ind)
            cp = ChangePoint(cut, float(a.mean()), float(b.mean()), p)
            failed = p > max_pvalue or abs(cp.change) < min_magnitude
            if failed and (worst is None or p > worst[0]):
                worst = (p, cut)
            found.append(cp)
        if worst is None:
            return found
        cuts.remove(worst[1])


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


def _welch_p(a: np.ndarray, b: np.ndarray, ttest_ind: Any) -> float:
    """Welch's t-test p-value; two constant segments: 0 if their levels differ, else 1."""
    if np.ptp(a) == 0 and np.ptp(b) == 0:
        return 0.0 if a[0] != b[0] else 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # nearly identical values: scipy warns, p stays usable
        p = float(ttest_ind(a, b, equal_var=False).pvalue)
    return 1.0 if math.isnan(p) else p
