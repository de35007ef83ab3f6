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


def test_single_sample_and_empty():
    s = latency_stats([2_000_000])
    assert s.p50_ms == s.p99_ms == 2.0 and s.std_ms == 0.0 and not s.noisy
    with pytest.raises(ValueError):
        latency_stats([])


def test_throughput_is_batch_over_mean_latency():
    assert throughput_sps(8, 4.0) == pytest.approx(2000.0)
    assert throughput_sps(1, 0.0) == 0.0
