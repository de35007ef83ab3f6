"""Metric definitions: every metric declares its unit and direction; renderers and gates read these."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    key: str  # column in the case table
    label: str
    unit: str
    lower_is_better: bool
    digits: int = 3
    comparable: bool = True  # False: shown side by side, but no "improvement" (e.g. setup time)

    def improvement_pct(self, value: float | None, reference: float | None) -> float | None:
        """How much better `value` is than `reference`, in percent of the reference (negative = worse)."""
        if value is None or reference is None or reference == 0:
            return None
        delta = (reference - value) if self.lower_is_better else (value - reference)
        return 100.0 * delta / reference

    def best(self, values: list[float | None]) -> float | None:
        vals = [v for v in values if v is not None]
        if not vals:
            return None
        return min(vals) if self.lower_is_better else max(vals)

    def format(self, value: float | None) -> str:
        if value is None:
            return "-"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:.{self.digits}g}" if abs(value) < 1 else f"{value:.{max(self.digits - 1, 1)}f}"


# The rows of the seed-style comparison table, in order.
COMPARISON_METRICS: tuple[Metric, ...] = (
    Metric("latency_p50_ms", "Latency p50", "ms", lower_is_better=True),
    Metric("latency_p90_ms", "Latency p90", "ms", lower_is_better=True),
    Metric("latency_p99_ms", "Latency p99", "ms", lower_is_better=True),
    Metric("throughput_sps", "Throughput", "samples/s", lower_is_better=False),
    Metric("host_peak_mb", "Host memory (peak RSS)", "MB", lower_is_better=True),
    Metric("gpu_peak_mb", "GPU memory (peak)", "MB", lower_is_better=True),
    Metric("setup_s", "Setup (load, export, compile)", "s", lower_is_better=True,
           comparable=False),
)
DRIFT_METRICS: tuple[Metric, ...] = (
    Metric("max_abs", "max |diff|", "", lower_is_better=True),
    Metric("rel_l2", "rel L2", "", lower_is_better=True),
    Metric("cosine", "cosine", "", lower_is_better=False, digits=7),
    Metric("top1_agreement", "top-1 agreement", "", lower_is_better=False),
)
# The drift row of the comparison tables: shown per runtime, no best value and no improvement.
DRIFT_ROW = Metric("rel_l2", "Drift (rel L2 vs FP32 ref)", "", lower_is_better=True, comparable=False)
# What the regression gate judges (harness.gating): the `metric` of its verdict records.
GATE_METRICS: tuple[Metric, ...] = (
    Metric("latency_median", "latency median", "ms", lower_is_better=True),
    Metric("latency_p90", "latency p90", "ms", lower_is_better=True),
    Metric("latency_p95", "latency p95", "ms", lower_is_better=True),
    Metric("latency_p99", "latency p99", "ms", lower_is_better=True),
    Metric("drift", "drift (over tolerance or not)", "rel_l2", lower_is_better=True),
)
METRICS = {m.key: m for m in COMPARISON_METRICS + DRIFT_METRICS + GATE_METRICS}
