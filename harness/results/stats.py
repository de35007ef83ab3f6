"""Statistics derived from raw latency samples, in one place: percentiles and their confidence intervals,
medians, spread, CV, the noise and tail flags."""

# Every figure a case stores or shows that is derived from its samples comes from here (the case's `latency`, a
# block's `p50_ms`, the end-to-end step medians, the generation percentiles), and so does the reader's check that
# stored figures agree with the samples (harness.results.schema). numpy's linear percentiles throughout.

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.results.stored import RECORD_CONFIG, Count, Flag, Number, Record, Share, when_set

# A measurement is flagged noisy when its robust coefficient of variation (1.4826 x MAD / median: the CV a
# normal distribution with that median absolute deviation would have) exceeds this. The plain CV (std / mean)
# is reported too, but one preempted iteration among hundreds of microsecond calls can put it over 1 on a quiet
# machine, so it flags everything or nothing; the robust one moves only when many samples move. Calibrated on
# quiet and loaded quick runs of this 2-core machine (docs/method.md, "What noisy means").
DEFAULT_NOISE_CV = 0.10
MAD_TO_SIGMA = 1.4826


# Confidence intervals: distribution-free, from order statistics. For the q-quantile of n independent samples of
# any continuous distribution, the number of samples below the true quantile is Binomial(n, q); the interval
# [X_(l), X_(u)] of sorted samples covers it with probability P(l <= B < u), exact for every distribution, with no
# resampling and no seed. l and u are chosen with at most (1 - CI_LEVEL) / 2 on each side; where no rank gives
# that (the lower bound of a median from fewer than 6 samples, the upper bound of a p99 from fewer than 367) that
# side is unbounded (None), which is the honest answer: those samples cannot bound it. A bootstrap would instead
# give a p99 from 50 samples an interval of the largest few samples, narrow and wrong.
CI_LEVEL = 0.95

# The tail flag: p99 / p50 over TAIL_P99_RATIO (or, with fewer samples than a p99 needs, p90 / p50 over
# TAIL_P90_RATIO) says a case has a second mode of slow calls (stalls, a thread pool waiting whole scheduler
# slices), which a noise flag read from the middle of the samples cannot see. Chosen from the quick, CI and
# gate-check runs of this 2-core machine, quiet to busy (docs/method.md, "Tail-heavy"): p99 / p50 at most 2.62
# (median 1.60) in 44 cases of 100+ samples, p90 / p50 at most 2.07 (median 1.15) in 58 cases of 10+. A
# log-normal reaches a p99 / p50 of 5 only at sigma 0.69, and a p90 / p50 of 3 at sigma 0.86.
TAIL_P99_RATIO = 5.0
TAIL_P90_RATIO = 3.0


def min_samples(q: float) -> int:
    """The fewest samples a percentile `q` (0-100) is quoted from: 1 / (1 - q/100), so that one sample is expected
    above it (p99: 100, p95: 20, p90: 10, p50: 2); below that the figure is the largest sample by another name."""
    if q >= 100:
        raise ValueError(f"percentile {q} has no sample count that supports it")
    return max(1, math.ceil(round(1.0 / (1.0 - q / 100.0), 9)))


def quoted(q: float, n: int) -> bool:
    """Whether percentile `q` (0-100) of `n` samples is quoted (shown, gated); see min_samples."""
    return n >= min_samples(q)


def too_few_text(q: float, n: int) -> str:
    """What is shown instead of a percentile from too few samples: "n/a (n=12 < 100)"."""
    return f"n/a (n={n} < {min_samples(q)})"


def quantile_ci_ranks(n: int, q: float, level: float = CI_LEVEL) -> tuple[int | None, int | None]:
    """1-based ranks (l, u) of the sorted samples that bound the q-quantile (0 < q < 1) of `n` samples with
    probability at least `level`, at most (1 - level) / 2 outside on each side; None for a side no rank bounds."""
    if n < 1:
        return None, None
    half = (1.0 - level) / 2.0
    k = np.arange(n + 1, dtype=np.float64)  # successes 0 .. n
    # log P(B = k) by the ratio P(k+1)/P(k) = (n-k)/(k+1) * q/(1-q), summed from P(B = 0) = (1-q)^n
    steps = np.log((n - k[:-1]) / (k[:-1] + 1.0)) + math.log(q / (1.0 - q))
    pmf = np.exp(n * math.log1p(-q) + np.concatenate(([0.0], np.cumsum(steps))))
    below = np.cumsum(pmf)[:-1]  # F(j) = P(B <= j), j = 0 .. n-1, summed from the bottom
    above = np.cumsum(pmf[::-1])[::-1][1:]  # P(B > j) = P(B >= j+1), j = 0 .. n-1, summed from the top
    low = np.nonzero(below <= half)[0]  # P(X_(l) > quantile) = F(l-1) <= half: the largest such l
    high = np.nonzero(above <= half)[0]  # P(X_(u) < quantile) = P(B >= u) <= half: the smallest such u
    return (int(low[-1]) + 1 if low.size else None, int(high[0]) + 1 if high.size else None)


def quantile_ci(sorted_values: np.ndarray, q: float, level: float = CI_LEVEL) -> tuple[float | None, float | None]:
    """The distribution-free `level` interval of the q-quantile (0 < q < 1) from sorted values, in their unit;
    None for a side the samples cannot bound."""
    lo, hi = quantile_ci_ranks(int(sorted_values.size), q, level)
    return (None if lo is None else float(sorted_values[lo - 1]), None if hi is None else float(sorted_values[hi - 1]))


def tail_basis(n: int) -> str | None:
    """Which ratio the tail flag reads from `n` samples: "p99/p50" (a p99 is quoted), "p90/p50", or None."""
    return "p99/p50" if quoted(99, n) else "p90/p50" if quoted(90, n) else None


def tail_ratio(n: int, p50: float, p90: float, p99: float) -> tuple[str, float] | None:
    """The tail ratio read for the tail flag: (tail_basis(n), p99/p50 or p90/p50); None when neither is quoted."""
    basis = tail_basis(n)
    if basis is None or p50 <= 0:
        return None
    return basis, (p99 if basis == "p99/p50" else p90) / p50


def is_tail_heavy(basis: str, ratio: float) -> bool:
    return ratio > (TAIL_P99_RATIO if basis == "p99/p50" else TAIL_P90_RATIO)


INTERVALS = ("ci_level",)  # the intervals are stored where their level is (results from before them: none)


@dataclass(frozen=True)
class LatencyStats(Record):
    """Latency statistics in milliseconds; `noisy` and `tail_heavy` travel with the numbers. A case's `latency`
    (and its end to end's): built by latency_stats from the samples, read by attribute, stored as `as_dict()` and
    read back by the one reader (harness.results.stored.Record.from_dict), strict on every figure.

    The figures added after the first results were stored have defaults, and results without them still load and
    are written back as they were (`when_set`): `rcv` None (not stored), `ci_level` None (results from before the
    intervals: the figure is shown alone), `tail_heavy` None (from before the tail flag)."""

    __pydantic_config__ = RECORD_CONFIG

    iterations: Count
    p50_ms: Number
    p90_ms: Number
    p95_ms: Number
    p99_ms: Number  # stored for every n; quoted (shown, gated) only from min_samples(99) = 100 samples
    mean_ms: Number
    std_ms: Number
    min_ms: Number
    max_ms: Number
    iqr_ms: Number
    cv: Number  # the plain CV, std / mean: kept for compatibility; what people read is rcv
    noisy: Flag
    rcv: Number | None = when_set()  # robust CV: 1.4826 x MAD / median; `noisy` is rcv > the noise threshold
    # CI_LEVEL distribution-free intervals of the median and the p99 (quantile_ci); None: unbounded on that side
    p50_ci_low_ms: Number | None = when_set(INTERVALS)
    p50_ci_high_ms: Number | None = when_set(INTERVALS)
    p99_ci_low_ms: Number | None = when_set(INTERVALS)
    p99_ci_high_ms: Number | None = when_set(INTERVALS)
    ci_level: Share | None = when_set()  # the intervals' level (CI_LEVEL); None: results from before them
    # p99/p50 from 100 samples, else p90/p50 from 10, else None (tail_ratio())
    tail_ratio: Number | None = when_set(("tail_heavy",))
    tail_heavy: Flag | None = when_set()  # tail_ratio over TAIL_P99_RATIO (p99/p50) or TAIL_P90_RATIO (p90/p50)

    def percentile(self, q: int) -> Any:
        """The stored `p{q}_ms` (50, 90, 95, 99)."""
        return getattr(self, f"p{q}_ms")

    def interval(self, q: int) -> tuple[Any, Any] | None:
        """The stored interval of `p{q}_ms` (50, 99) as (low, high), a side None where unbounded; None for results
        from before the intervals."""
        if self.ci_level is None:
            return None
        return getattr(self, f"p{q}_ci_low_ms"), getattr(self, f"p{q}_ci_high_ms")


def latency_stats(samples_ns: Sequence[int], noise_cv: float = DEFAULT_NOISE_CV) -> LatencyStats:
    if len(samples_ns) == 0:
        raise ValueError("no latency samples")
    ms = np.sort(np.asarray(samples_ns, dtype=np.float64) / 1e6)
    p50, p90, p95, p99, q1, q3 = np.percentile(ms, [50, 90, 95, 99, 25, 75])
    mean = float(ms.mean())
    std = float(ms.std(ddof=1)) if ms.size > 1 else 0.0
    cv = std / mean if mean > 0 else 0.0
    rcv = robust_cv(ms)
    (m_lo, m_hi), (t_lo, t_hi) = quantile_ci(ms, 0.50), quantile_ci(ms, 0.99)
    tail = tail_ratio(int(ms.size), float(p50), float(p90), float(p99))
    return LatencyStats(iterations=int(ms.size), p50_ms=float(p50), p90_ms=float(p90), p95_ms=float(p95),
                        p99_ms=float(p99), mean_ms=mean, std_ms=std, min_ms=float(ms[0]),
                        max_ms=float(ms[-1]), iqr_ms=float(q3 - q1), cv=cv, noisy=bool(rcv > noise_cv), rcv=rcv,
                        p50_ci_low_ms=m_lo, p50_ci_high_ms=m_hi, p99_ci_low_ms=t_lo, p99_ci_high_ms=t_hi,
                        ci_level=CI_LEVEL, tail_ratio=None if tail is None else tail[1],
                        tail_heavy=tail is not None and is_tail_heavy(*tail))


# The figures of LatencyStats that are functions of the samples alone and that the reader checks against them
# (`noisy` and `rcv` depend on the threshold, or came later, and are not checked; the intervals and the tail
# ratio came later too).
CHECKED_FIGURES = ("p50_ms", "p90_ms", "p95_ms", "p99_ms", "min_ms", "max_ms", "mean_ms", "std_ms", "iqr_ms", "cv")


def checked_figures(samples_ns: Sequence[int]) -> dict[str, float]:
    """The CHECKED_FIGURES of latency_stats(samples_ns): what a stored `latency` must agree with."""
    s = latency_stats(samples_ns)
    return {k: float(getattr(s, k)) for k in CHECKED_FIGURES}


def median_ns(samples_ns: Sequence[int] | Sequence[float] | np.ndarray) -> float:
    """The median of raw samples, in their own unit (nanoseconds): the middle one, or the mean of the middle two."""
    return float(np.median(np.asarray(samples_ns, dtype=np.float64)))


def median_ms(samples_ns: Sequence[int] | np.ndarray) -> float:
    """The median of nanosecond samples in ms, rounded to the nanosecond: what results.json stores as a block's
    `p50_ms` and the end-to-end steps' `*_p50_ms`."""
    return round(median_ns(samples_ns) / 1e6, 6)


def median_ci_ms(samples_ns: Sequence[int] | np.ndarray) -> tuple[float | None, float | None]:
    """The CI_LEVEL interval of the median of nanosecond samples, in ms rounded to the nanosecond like
    median_ms (None: a side the samples cannot bound, under 6 samples)."""
    lo, hi = quantile_ci(np.sort(np.asarray(samples_ns, dtype=np.float64)), 0.50)
    return (None if lo is None else round(lo / 1e6, 6), None if hi is None else round(hi / 1e6, 6))


def column_medians_ms(rows_ns: Sequence[Sequence[int]]) -> list[float]:
    """Per position, the median over rows of equal length (nanoseconds in, ms out): e.g. the decode step at each
    context length over repeated generations."""
    return [float(v) for v in np.median(np.asarray(rows_ns, dtype=np.float64), axis=0) / 1e6]


def percentiles(values: Sequence[float] | np.ndarray, qs: Sequence[float]) -> list[float]:
    """numpy's linear percentiles `qs` (0-100) of `values`, in their own unit."""
    return [float(v) for v in np.percentile(np.asarray(values, dtype=np.float64), list(qs))]


def summary_ms(samples_ns: Sequence[int], qs: Sequence[int]) -> dict[str, float | int | None] | None:
    """`p{q}_ms` for each percentile q (with `p50_ci_low_ms` ... `p99_ci_high_ms`, the 95% intervals of the
    median and the p99 where asked for), mean_ms, min_ms, max_ms and n of nanosecond samples (None: no samples)."""
    if not len(samples_ns):
        return None
    ms = np.sort(np.asarray(samples_ns, dtype=np.float64) / 1e6)
    out: dict[str, float | int | None] = {f"p{q}_ms": v for q, v in zip(qs, percentiles(ms, qs))}
    for q in (q for q in qs if q in (50, 99)):  # the intervals of the median and the p99, as in LatencyStats
        out[f"p{q}_ci_low_ms"], out[f"p{q}_ci_high_ms"] = quantile_ci(ms, q / 100)
    out.update(mean_ms=float(ms.mean()), min_ms=float(ms[0]), max_ms=float(ms[-1]), n=int(ms.size))
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
    """B over A from paired blocks (`harness ab`): exp of the Hodges-Lehmann estimate of the per-pair log ratios
    of block medians, and its `confidence` interval (Wilcoxon signed-rank), over `pairs` pairs."""

    ratio: float
    low: float
    high: float
    pairs: int
    confidence: float


def _signed_rank_critical(n: int, alpha: float) -> int:
    """The largest k with P(T <= k) <= alpha / 2 for the Wilcoxon signed-rank statistic of n pairs (exact: the
    count of sign patterns per rank sum), or -1 when even T = 0 is more likely than that (too few pairs)."""
    total = n * (n + 1) // 2
    ways = [1] + [0] * total
    for r in range(1, n + 1):
        for t in range(total, r - 1, -1):
            ways[t] += ways[t - r]
    k, acc, all_ = -1, 0, 2 ** n
    for t in range(total + 1):
        acc += ways[t]
        if acc / all_ > alpha / 2:
            break
        k = t
    return k


def hodges_lehmann(d: Sequence[float]) -> float:
    """The Hodges-Lehmann estimate of a location: the median of the pairwise (Walsh) means, the values included."""
    x = np.asarray(d, dtype=np.float64)
    i, j = np.triu_indices(x.size)
    return float(np.median((x[i] + x[j]) / 2.0))


def paired_ratio(a_blocks_ns: Sequence[Sequence[int]], b_blocks_ns: Sequence[Sequence[int]],
                 confidence: float = 0.99) -> PairedRatio | None:
    """The paired test of an interleaved A/B measurement: block i of A and block i of B ran back to back, so
    the machine's slow drifts cancel in their ratio. On the log ratios of the block medians: the Hodges-Lehmann
    estimate (the median of the pairwise means) and the Wilcoxon signed-rank interval, distribution-free and
    robust to a pair that one disturbed block threw far off (a t interval on the mean was not: one such pair in
    ten made a 5% slowdown `noise`, docs/measurements.md). None when the pairs are too few for the interval."""
    n = min(len(a_blocks_ns), len(b_blocks_ns))
    if n < 2:
        return None
    a = np.array([median_ns(x) for x in a_blocks_ns[:n]], dtype=np.float64)
    b = np.array([median_ns(x) for x in b_blocks_ns[:n]], dtype=np.float64)
    if (a <= 0).any() or (b <= 0).any():
        return None
    k = _signed_rank_critical(n, 1.0 - confidence)
    if k < 0:
        return None
    d = np.log(b / a)
    i, j = np.triu_indices(n)
    walsh = np.sort((d[i] + d[j]) / 2.0)
    centre = float(np.median(walsh))
    return PairedRatio(math.exp(centre), math.exp(float(walsh[k])), math.exp(float(walsh[len(walsh) - 1 - k])), n,
                       confidence)
