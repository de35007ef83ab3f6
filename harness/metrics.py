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
    speed: bool = False  # a latency or a throughput: its change reads "7.5x faster" / "1.3x slower"

    def improvement_pct(self, value: float | None, reference: float | None) -> float | None:
        """How much better `value` is than `reference`, in percent of the reference (negative = worse)."""
        if value is None or reference is None or reference == 0:
            return None
        delta = (reference - value) if self.lower_is_better else (value - reference)
        return 100.0 * delta / reference

    def improvement_text(self, value: float | None, reference: float | None) -> str:
        """The change against `reference` as a reader says it: a speed (latency, throughput) as "7.5x faster" /
        "1.3x slower" (a "+7873.9%" throughput or a "+86.7%" latency saved is misread); other metrics as
        "+12.3%" better (negative = worse) under 2x either way, "3.0x better" / "2.5x worse" beyond. ""
        where there is nothing to compare."""
        if value is None or reference is None or value <= 0 or reference <= 0:
            return ""
        factor = reference / value if self.lower_is_better else value / reference  # > 1: better
        if self.speed:
            if round(factor, 1) == 1.0 and round(1 / factor, 1) == 1.0:
                return "1.0x (same)"
            return f"{factor:.1f}x faster" if factor > 1 else f"{1 / factor:.1f}x slower"
        if 0.5 < factor < 2.0:
            return f"{self.improvement_pct(value, reference):+.1f}%"
        return f"{factor:.1f}x better" if factor > 1 else f"{1 / factor:.1f}x worse"

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
    Metric("latency_p50_ms", "Latency p50", "ms", lower_is_better=True, speed=True),
    Metric("latency_p90_ms", "Latency p90", "ms", lower_is_better=True, speed=True),
    Metric("latency_p99_ms", "Latency p99", "ms", lower_is_better=True, speed=True),
    Metric("throughput_sps", "Throughput", "samples/s", lower_is_better=False, speed=True),
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
