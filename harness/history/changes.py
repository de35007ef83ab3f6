"""Change points in a series of per-run figures: ruptures' PELT search, each kept only if a Welch t-test backs it."""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
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
    pvalue: float  # Welch's t-test between the two segments

    @property
    def change(self) -> float:
        """Relative change of the mean, e.g. 0.10 for 10% higher after."""
        return self.after / self.before - 1.0 if self.before else math.inf

    def as_dict(self) -> dict[str, float | int]:
        return {"index": self.index, "before": self.before, "after": self.after, "change": self.change,
                "pvalue": self.pvalue}


def change_points(values: Sequence[float], *, max_pvalue: float = DEFAULT_MAX_PVALUE,
                  min_magnitude: float = DEFAULT_MIN_MAGNITUDE, min_size: int = MIN_SEGMENT) -> list[ChangePoint]:
    """Change points of the mean of `values` (oldest first), each between two segments of at least `min_size`.

    ruptures' PELT (L2 cost) proposes breakpoints on the series scaled by its median, with a BIC-like penalty
    of 3 sigma^2 log(n), sigma the run-to-run noise (MAD of successive differences); then, as Otava does
    after E-Divisive, every breakpoint must pass Welch's t-test between its neighbouring segments at
    `max_pvalue` and move the mean by at least `min_magnitude`; the weakest failing one is dropped and the
    rest tested again."""
    import ruptures
    from scipy.stats import ttest_ind

    x = np.asarray([float(v) for v in values], dtype=np.float64)
    if x.size < 2 * min_size or not np.all(np.isfinite(x)):
        return []
    med = float(np.median(x))
    if med <= 0:
        return []
    y = x / med
    diffs = np.diff(y)
    sigma = max(MAD_TO_SIGMA * float(np.median(np.abs(diffs - np.median(diffs)))) / math.sqrt(2), NOISE_FLOOR)
    bkps = ruptures.Pelt(model="l2", min_size=min_size, jump=1).fit(y).predict(pen=3 * sigma**2 * math.log(x.size))
    cuts = [b for b in bkps if b < x.size]
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


def _welch_p(a: np.ndarray, b: np.ndarray, ttest_ind: Any) -> float:
    """Welch's t-test p-value; two constant segments: 0 if their levels differ, else 1."""
    if np.ptp(a) == 0 and np.ptp(b) == 0:
        return 0.0 if a[0] != b[0] else 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # nearly identical values: scipy warns, p stays usable
        p = float(ttest_ind(a, b, equal_var=False).pvalue)
    return 1.0 if math.isnan(p) else p
