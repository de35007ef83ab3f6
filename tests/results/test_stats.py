"""Latency statistics: percentiles, spread and the noise flag."""

import numpy as np
import pytest

from harness.results.stats import latency_stats, throughput_sps


def test_percentiles_match_numpy_in_milliseconds():
    rng = np.random.default_rng(1)
    samples = (rng.lognormal(mean=15, sigma=0.2, size=1001)).astype(np.int64)
    s = latency_stats(samples.tolist())
    ms = samples / 1e6
    for q, got in ((50, s.p50_ms), (90, s.p90_ms), (95, s.p95_ms), (99, s.p99_ms)):
        assert got == pytest.approx(np.percentile(ms, q))
    assert s.mean_ms == pytest.approx(ms.mean())
    assert s.std_ms == pytest.approx(ms.std(ddof=1))
    assert s.cv == pytest.approx(ms.std(ddof=1) / ms.mean())
    assert s.iterations == 1001
    assert s.min_ms <= s.p50_ms <= s.p90_ms <= s.p95_ms <= s.p99_ms <= s.max_ms


def test_noise_flag_follows_the_coefficient_of_variation():
    steady = [1_000_000 + (i % 3) * 1000 for i in range(100)]
    jumpy = [1_000_000 if i % 2 else 2_000_000 for i in range(100)]
    assert not latency_stats(steady).noisy
    assert latency_stats(jumpy).noisy
    assert not latency_stats(jumpy, noise_cv=0.5).noisy


def test_a_few_preempted_iterations_do_not_make_a_measurement_noisy_but_a_shifted_half_does():
    quiet = [30_000 + (i % 7) * 300 for i in range(1000)]
    for i in range(0, 1000, 100):  # 1% of the calls preempted for 5 ms (a plain CV of about 3)
        quiet[i] = 5_000_000
    s = latency_stats(quiet)
    assert s.cv > 1 and s.rcv < 0.05 and not s.noisy
    episodes = [30_000 if (i // 250) % 2 else 42_000 for i in range(1000)]  # fast and slow states by turns
    assert latency_stats(episodes).noisy
    assert latency_stats(episodes).rcv == pytest.approx(1.4826 * 6_000 / 36_000)


def test_single_sample_and_empty():
    s = latency_stats([2_000_000])
    assert s.p50_ms == s.p99_ms == 2.0 and s.std_ms == 0.0 and not s.noisy
    with pytest.raises(ValueError):
        latency_stats([])


def test_throughput_is_batch_over_p50_latency():
    assert throughput_sps(8, 4.0) == pytest.approx(2000.0)
    assert throughput_sps(1, 0.0) == 0.0


def test_median_ms_is_the_stored_block_median():
    """The block median results.json stores: the middle sample (or the mean of the middle two), ms, rounded to
    the nanosecond; the same as the standard library's median for integer nanoseconds."""
    import statistics

    from harness.results.stats import median_ms, median_ns

    for samples in ([3_000_001], [5, 1_000_000_003, 7_000], [1_234_567, 2_345_678, 9, 10**13 + 1]):
        assert median_ns(samples) == statistics.median(samples)
        assert median_ms(samples) == round(statistics.median(samples) / 1e6, 6)


def test_summary_and_column_medians():
    from harness.results.stats import column_medians_ms, summary_ms

    s = summary_ms([1_000_000, 2_000_000, 3_000_000, 4_000_000], (50, 90, 99))
    assert s is not None and s["p50_ms"] == 2.5 and s["n"] == 4 and s["min_ms"] == 1.0 and s["max_ms"] == 4.0
    assert s["p90_ms"] == pytest.approx(np.percentile([1, 2, 3, 4], 90))
    assert summary_ms([], (50,)) is None
    assert column_medians_ms([[1_000_000, 4_000_000], [3_000_000, 2_000_000], [2_000_000, 9_000_000]]) == [2.0, 4.0]


def test_checked_figures_are_latency_stats():
    from harness.results.stats import CHECKED_FIGURES, checked_figures

    samples = [1_000_000 + 7_919 * (i % 13) for i in range(200)]
    s = latency_stats(samples).as_dict()
    assert checked_figures(samples) == {k: s[k] for k in CHECKED_FIGURES}


# Modules of harness/ that may call numpy's or the standard library's median/percentile/quantile themselves,
# and why; everything else derives statistics from samples through harness.results.stats.
OWN_STATISTICS = {
    "harness/results/stats.py": "the one place",
    "harness/gating/compare.py": "the gate's bootstrap of order statistics, and the median over K baseline runs",
    "harness/gating/gatecheck.py": "the median over simulated runs of their best-block medians",
    "harness/history/changes.py": "change points over a series of run figures, not samples",
    "harness/accuracy/drift.py": "p99 of |output - reference|: drift, not latency",
    "harness/gating/fleet.py": "medians across nodes and blocks, and each block's figure for the peer statistics",
    "harness/gating/provenance.py": "each block's figure, for a requirement's reproducibility band",
    "harness/gating/burnin.py": "the median of round figures, the base of a burn-in trend",
    "harness/workloads/forward/audit.py": "medians of the caching audit's mini-blocks, not the case's samples",
    "harness/workloads/capacity/search.py": "a quantile of simulated searches' capacity ratios (the search spread)",
    "harness/execution/ray_shards.py": "the median of finished shards' wall seconds (the node deadline), not samples",
}


def test_statistics_of_samples_are_computed_in_one_place():
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    found = []
    for path in sorted((root / "harness").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Attribute) and node.attr in ("median", "percentile", "quantile", "nanmedian",
                                                                   "nanpercentile", "median_low", "median_high")
                    and isinstance(node.value, ast.Name) and node.value.id in ("np", "numpy", "statistics")):
                found.append(rel)
    assert sorted(set(found) - set(OWN_STATISTICS)) == []


def test_every_writer_of_throughput_uses_the_p50():
    """One definition (batch / p50): no module computes throughput from the mean latency."""
    import re
    from pathlib import Path

    import harness

    root = Path(harness.__file__).parent
    calls = [(p.relative_to(root), m.group(0)) for p in root.rglob("*.py")
             for m in re.finditer(r"throughput_sps\([^()]*\)", p.read_text())]
    assert calls and all("p50_ms" in c for _, c in calls), calls


# ------------------------------------------------------------------ confidence intervals, quoting, the tail flag
def test_quantile_interval_ranks_are_the_binomial_order_statistic_bounds():
    """Each side holds at most 2.5% (exact binomial tails, checked against scipy), and one rank further in would
    hold more: the tightest distribution-free 95% interval with equal tail limits."""
    from scipy import stats as st

    from harness.results.stats import quantile_ci_ranks

    for n, q in ((6, 0.5), (30, 0.5), (100, 0.5), (1001, 0.5), (368, 0.99), (1000, 0.99), (20_000, 0.99),
                 (50, 0.9)):
        lo, hi = quantile_ci_ranks(n, q)
        assert lo is not None and hi is not None and lo < hi
        assert st.binom.cdf(lo - 1, n, q) <= 0.025 < st.binom.cdf(lo, n, q)
        assert st.binom.sf(hi - 1, n, q) <= 0.025 < st.binom.sf(hi - 2, n, q)
        assert st.binom.cdf(hi - 1, n, q) - st.binom.cdf(lo - 1, n, q) >= 0.95


def test_too_few_samples_leave_a_side_unbounded():
    """A median needs 6 samples for a 95% interval; a p99's upper bound needs 368 (0.99^n <= 2.5%): with fewer,
    the side is None, never a made-up bound."""
    from harness.results.stats import quantile_ci_ranks

    assert quantile_ci_ranks(5, 0.5) == (None, None)
    assert quantile_ci_ranks(6, 0.5) == (1, 6)
    assert quantile_ci_ranks(367, 0.99)[1] is None and quantile_ci_ranks(367, 0.99)[0] is not None
    assert quantile_ci_ranks(368, 0.99)[1] == 368
    s = latency_stats([1_000_000 + 1000 * i for i in range(150)])
    assert s.p99_ci_low_ms is not None and s.p99_ci_high_ms is None
    assert s.p50_ci_low_ms <= s.p50_ms <= s.p50_ci_high_ms


def test_interval_covers_the_true_median_and_p99_about_95_percent_of_the_time():
    """Coverage over seeded simulated runs of a skewed distribution with a known quantile (no timing)."""
    from harness.results.stats import quantile_ci

    rng = np.random.default_rng(7)
    for q, n in ((0.5, 60), (0.99, 600)):
        true = float(np.exp(0.3 * 2.3263478740408408)) if q == 0.99 else 1.0  # log-normal(0, 0.3) quantile
        hits = 0
        for _ in range(2000):
            lo, hi = quantile_ci(np.sort(rng.lognormal(0.0, 0.3, size=n)), q)
            hits += lo <= true <= hi
        assert 0.94 <= hits / 2000 <= 0.995, (q, hits)


def test_latency_stats_store_the_intervals_in_milliseconds():
    rng = np.random.default_rng(3)
    samples = (rng.lognormal(mean=14, sigma=0.1, size=2000)).astype(np.int64)
    s = latency_stats(samples.tolist())
    ms = np.sort(samples / 1e6)
    assert s.ci_level == 0.95
    assert s.p50_ci_low_ms < s.p50_ms < s.p50_ci_high_ms and s.p99_ci_low_ms < s.p99_ms < s.p99_ci_high_ms
    assert {s.p50_ci_low_ms, s.p50_ci_high_ms, s.p99_ci_low_ms, s.p99_ci_high_ms} <= set(ms.tolist())


def test_percentiles_are_quoted_from_enough_samples_only():
    from harness.results.stats import min_samples, quoted, too_few_text

    assert [min_samples(q) for q in (50, 90, 95, 99)] == [2, 10, 20, 100]
    assert not quoted(99, 99) and quoted(99, 100) and quoted(90, 12) and not quoted(95, 12)
    assert too_few_text(99, 12) == "n/a (n=12 < 100)"


def test_tail_flag_reads_p99_over_p50_or_p90_over_p50_with_fewer_samples():
    """Stalls at whole scheduler slices (24 ms) among 0.05 ms calls: tail-heavy, though not noisy (the middle
    is steady); a steady case is neither; with 40 samples the flag reads p90/p50."""
    steady = [50_000 + (i % 7) * 1_000 for i in range(1000)]
    s = latency_stats(steady)
    assert not s.tail_heavy and s.tail_ratio == pytest.approx(s.p99_ms / s.p50_ms)
    stalled = list(steady)
    for i in range(0, 1000, 50):  # 2% of the calls wait 24 ms
        stalled[i] = 24_000_000
    s = latency_stats(stalled)
    assert s.tail_heavy and not s.noisy and s.tail_ratio > 100
    few = [50_000] * 30 + [24_000_000] * 10  # 40 samples: no p99; a p90/p50 of 480
    s = latency_stats(few)
    assert s.tail_heavy and s.tail_ratio == pytest.approx(s.p90_ms / s.p50_ms)
    s = latency_stats([50_000] * 5 + [24_000_000] * 3)  # 8 samples: neither p99 nor p90 is quoted
    assert s.tail_ratio is None and not s.tail_heavy


def test_old_latency_records_without_the_new_figures_still_load():
    """A stored `latency` from before the intervals and the tail flag (no such keys) reads as a LatencyStats with
    those figures not stored (rcv and ci_level None: no intervals to show); the new keys accept null (an
    unbounded side) but not text."""
    import dataclasses

    from harness.errors import ResultsError
    from harness.results.schema import CaseId, CaseResult, RunResults, results_from_doc
    from harness.results.stats import LatencyStats

    samples = [1_000_000 + 1_000 * i for i in range(10)]
    stats = latency_stats(samples)
    new = stats.as_dict()
    later = ("p50_ci_low_ms", "p50_ci_high_ms", "p99_ci_low_ms", "p99_ci_high_ms", "ci_level", "tail_ratio",
             "tail_heavy", "rcv")
    old = {k: v for k, v in new.items() if k not in later}

    def doc(lat):
        case = CaseResult(CaseId("mlp", "ort-cpu", "fp32", 1, None, "cpu"), "passed", samples_ns=samples,
                          latency=stats)
        d = RunResults("r", "t", cases=[case]).as_dict()
        d["cases"][0]["latency"] = lat
        return d

    read = results_from_doc(doc(old)).cases[0].latency
    assert isinstance(read, LatencyStats) and read == LatencyStats(**old)
    assert read == dataclasses.replace(stats, rcv=None, p50_ci_low_ms=None, p50_ci_high_ms=None, p99_ci_low_ms=None,
                                       ci_level=None, tail_ratio=None, tail_heavy=None)
    assert read.interval(50) is None and read.rcv is None  # not stored: no interval shown, no robust CV
    assert read.as_dict() == old and list(read.as_dict()) == list(old)  # written back as it was stored
    assert new["p99_ci_high_ms"] is None and results_from_doc(doc(new)).cases[0].latency == stats
    with pytest.raises(ResultsError, match="p99_ci_high_ms"):
        results_from_doc(doc({**new, "p99_ci_high_ms": "inf"}))
    with pytest.raises(ResultsError, match="tail_heavy"):
        results_from_doc(doc({**new, "tail_heavy": 1}))


def test_block_medians_and_generation_percentiles_carry_their_intervals_too():
    """Every stored median and p99 has its interval: a block's p50 (results.json `blocks`), the generation
    summaries (summary_ms) and the end-to-end steps (median_ci_ms), in ms rounded like the medians."""
    from harness.results.schema import Block
    from harness.results.stats import median_ci_ms, quantile_ci, summary_ms

    samples = [1_000_000 + 3_001 * ((7 * i) % 101) for i in range(101)]
    b = Block.measured(samples, "case")
    lo, hi = quantile_ci(np.sort(np.asarray(samples, dtype=np.float64)), 0.5)
    assert (b.p50_ci_low_ms, b.p50_ci_high_ms) == (round(lo / 1e6, 6), round(hi / 1e6, 6)) == median_ci_ms(samples)
    assert b.p50_ci_low_ms < b.p50_ms < b.p50_ci_high_ms
    assert Block.failed("died", "round").p50_ci_low_ms is None
    assert Block.from_dict({"samples": 3, "p50_ms": 1.0}).p50_ci_high_ms is None  # written before: loads
    assert median_ci_ms([5_000_000] * 5) == (None, None)
    s = summary_ms(samples, (50, 90, 99))
    assert s["p50_ci_low_ms"] < s["p50_ms"] < s["p50_ci_high_ms"]
    assert s["p99_ci_high_ms"] is None and "p90_ci_low_ms" not in s  # 101 samples cannot bound a p99 above
