"""Timing (warm-up, minimum time AND minimum count, device sync) and the statistics derived from samples."""

from harness.measure.stats import LatencyStats, latency_stats
from harness.measure.timer import TimingPolicy, Timer, measure_overhead

__all__ = ["LatencyStats", "TimingPolicy", "Timer", "latency_stats", "measure_overhead"]
