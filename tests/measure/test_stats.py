"""Latency statistics: percentiles, spread and the noise flag."""

import numpy as np
import pytest

from harness.measure.stats import latency_stats, throughput_sps


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


def test_every_writer_of_throughput_uses_the_p50():
    """One definition (batch / p50): no module computes throughput from the mean latency."""
    import re
    from pathlib import Path

    import harness

    root = Path(harness.__file__).parent
    calls = [(p.relative_to(root), m.group(0)) for p in root.rglob("*.py")
             for m in re.finditer(r"throughput_sps\([^()]*\)", p.read_text())]
    assert calls and all("p50_ms" in c for _, c in calls), calls
