"""Statistics derived from raw latency samples, in one place: percentiles, medians, spread, CV, noise flag."""

# Every figure a case stores or shows that is derived from its samples comes from here (the case's `latency`, a
# block's `p50_ms`, the end-to-end step medians, the generation percentiles), and so does the reader's check that
# stored figures agree with the samples (harness.results.schema). numpy's linear percentiles throughout.

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

# A measurement is flagged noisy when its robust coefficient of variation (1.4826 x MAD / median: the CV a
# normal distribution with that median absolute deviation would have) exceeds this. The plain CV (std / mean)
# is reported too, but one preempted iteration among hundreds of microsecond calls can put it over 1 on a quiet
# machine, so it flags everything or nothing; the robust one moves only when many samples move. Calibrated on
# quiet and loaded quick runs of this 2-core machine (docs/method.md, "What noisy means").
DEFAULT_NOISE_CV = 0.10
MAD_TO_SIGMA = 1.4826


@dataclass(frozen=True)
class LatencyStats:
    """Latency statistics in milliseconds; `noisy` travels with the numbers."""

    iterations: int
    p50_ms: float
    p90_ms: float
    p95_ms: float
    p99_ms: float
    mean_ms: float
    std_ms: float
    min_ms: float
    max_ms: float
    iqr_ms: float
    cv: float
    noisy: bool
    rcv: float = 0.0  # robust CV: 1.4826 x MAD / median; `noisy` is rcv > the noise threshold

    def as_dict(self) -> dict[str, float | int | bool]:
        return asdict(self)


def latency_stats(samples_ns: Sequence[int], noise_cv: float = DEFAULT_NOISE_CV) -> LatencyStats:
    if len(samples_ns) == 0:
        raise ValueError("no latency samples")
    ms = np.asarray(samples_ns, dtype=np.float64) / 1e6
    p50, p90, p95, p99, q1, q3 = np.percentile(ms, [50, 90, 95, 99, 25, 75])
    mean = float(ms.mean())
    std = float(ms.std(ddof=1)) if ms.size > 1 else 0.0
    cv = std / mean if mean > 0 else 0.0
    rcv = robust_cv(ms)
    return LatencyStats(iterations=int(ms.size), p50_ms=float(p50), p90_ms=float(p90), p95_ms=float(p95),
                        p99_ms=float(p99), mean_ms=mean, std_ms=std, min_ms=float(ms.min()),
                        max_ms=float(ms.max()), iqr_ms=float(q3 - q1), cv=cv, noisy=bool(rcv > noise_cv), rcv=rcv)


# The figures of LatencyStats that are functions of the samples alone and that the reader checks against them
# (`noisy` and `rcv` depend on the threshold, or came later, and are not checked).
CHECKED_FIGURES = ("p50_ms", "p90_ms", "p95_ms", "p99_ms", "min_ms", "max_ms", "mean_ms", "std_ms", "iqr_ms", "cv")


def checked_figures(samples_ns: Sequence[int]) -> dict[str, float]:
    """The CHECKED_FIGURES of latency_stats(samples_ns): what a stored `latency` must agree with."""
    s = latency_stats(samples_ns).as_dict()
    return {k: float(s[k]) for k in CHECKED_FIGURES}


def median_ns(samples_ns: Sequence[int] | Sequence[float] | np.ndarray) -> float:
    """The median of raw samples, in their own unit (nanoseconds): the middle one, or the mean of the middle two."""
    return float(np.median(np.asarray(samples_ns, dtype=np.float64)))


def median_ms(samples_ns: Sequence[int] | np.ndarray) -> float:
    """The median of nanosecond samples in ms, rounded to the nanosecond: what results.json stores as a block's
    `p50_ms` and the end-to-end steps' `*_p50_ms`."""
    return round(median_ns(samples_ns) / 1e6, 6)


def column_medians_ms(rows_ns: Sequence[Sequence[int]]) -> list[float]:
    """Per position, the median over rows of equal length (nanoseconds in, ms out): e.g. the decode step at each
    context length over repeated generations."""
    return [float(v) for v in np.median(np.asarray(rows_ns, dtype=np.float64), axis=0) / 1e6]


def percentiles(values: Sequence[float] | np.ndarray, qs: Sequence[float]) -> list[float]:
    """numpy's linear percentiles `qs` (0-100) of `values`, in their own unit."""
    return [float(v) for v in np.percentile(np.asarray(values, dtype=np.float64), list(qs))]


def summary_ms(samples_ns: Sequence[int], qs: Sequence[int]) -> dict[str, float | int] | None:
    """`p{q}_ms` for each percentile q, mean_ms, min_ms, max_ms and n of nanosecond samples (None: no samples)."""
    if not len(samples_ns):
        return None
    ms = np.asarray(samples_ns, dtype=np.float64) / 1e6
    out: dict[str, float | int] = {f"p{q}_ms": v for q, v in zip(qs, percentiles(ms, qs))}
    out.update(mean_ms=float(ms.mean()), min_ms=float(ms.min()), max_ms=float(ms.max()), n=int(ms.size))
    return out


def robust_cv(values: Sequence[float] | np.ndarray) -> float:
    """1.4826 x median absolute deviation / median (0 for fewer than two values or a zero median)."""
    x = np.asarray(values, dtype=np.float64)
    if x.size < 2:
        return 0.0
    med = float(np.median(x))
    return float(MAD_TO_SIGMA * np.median(np.abs(x - med)) / med) if med > 0 else 0.0


def throughput_sps(batch: int, p50_ms: float) -> float:
    """Samples per second of a sequential loop: batch size over the median (p50) latency, the one definition
    everywhere (so it never contradicts the p50 column; a mean would follow a few slow outliers)."""
    return batch * 1000.0 / p50_ms if p50_ms > 0 else 0.0


@dataclass(frozen=True)
class PairedRatio:
    """B over A from paired blocks (`harness ab`): the geometric mean of the per-pair ratios of block medians and
    its two-sided `confidence` interval (Student's t on the log ratios), over `pairs` pairs."""

    ratio: float
    low: float
    high: float
    pairs: int
    confidence: float


def paired_ratio(a_blocks_ns: Sequence[Sequence[int]], b_blocks_ns: Sequence[Sequence[int]],
                 confidence: float = 0.99) -> PairedRatio | None:
    """The paired test of an interleaved A/B measurement: block i of A and block i of B ran back to back, so
    the machine's slow drifts cancel in their ratio. Log ratios of the block medians, their mean and a t interval
    (pairs are independent draws of the order AB/BA). None with fewer than 2 pairs (no spread to judge by)."""
    from scipy import stats as st

    n = min(len(a_blocks_ns), len(b_blocks_ns))
    if n < 2:
        return None
    a = np.array([median_ns(x) for x in a_blocks_ns[:n]], dtype=np.float64)
    b = np.array([median_ns(x) for x in b_blocks_ns[:n]], dtype=np.float64)
    if (a <= 0).any() or (b <= 0).any():
        return None
    d = np.log(b / a)
    mean, se = float(d.mean()), float(d.std(ddof=1)) / math.sqrt(n)
    half = float(st.t.ppf(0.5 + confidence / 2, n - 1)) * se
    return PairedRatio(math.exp(mean), math.exp(mean - half), math.exp(mean + half), n, confidence)
