"""Timing (warm-up, minimum time AND minimum count, device sync); the statistics live in harness.results.stats."""

from harness.measure.timer import TimingPolicy, Timer, measure_overhead
from harness.results.stats import LatencyStats, latency_stats

__all__ = ["LatencyStats", "TimingPolicy", "Timer", "latency_stats", "measure_overhead"]
