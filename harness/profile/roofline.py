"""A case on the measured roofline: achieved rates, arithmetic intensity, percent of the roof, and the bound."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class RooflinePoint:
    """One case under the machine's ceilings. Rates in GFLOP/s and GB/s (10^9), intensity in FLOP/byte.

    roof_gflops = min(peak_gflops, intensity * bandwidth_gbs): what the machine can reach at this intensity;
    percent_of_roof = 100 * achieved_gflops / roof_gflops; bound is "compute" when the intensity is at or
    above the ridge point (peak / bandwidth), else "memory"."""

    flops: float
    bytes_moved: float
    latency_s: float
    achieved_gflops: float
    achieved_gbs: float
    intensity: float
    peak_gflops: float
    bandwidth_gbs: float
    ridge_intensity: float
    roof_gflops: float
    percent_of_roof: float
    percent_of_peak: float
    bound: str

    @property
    def over_roof(self) -> bool:
        """Achieved more than the roof: the ceilings are too low for this case (measured under load, on other
        settings, or a kernel faster than the GEMM that set the peak); the percentages are then not meaningful."""
        return self.achieved_gflops > self.roof_gflops

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "over_roof": self.over_roof}


def roofline_point(flops: float, bytes_moved: float, latency_s: float, peak_gflops: float,
                   bandwidth_gbs: float) -> RooflinePoint:
    """Place a case (its graph's FLOPs and bytes moved, one inference's latency in seconds) under the roofline
    of `peak_gflops` (GFLOP/s) and `bandwidth_gbs` (GB/s). Raises ValueError on a non-positive latency,
    bytes, peak or bandwidth, or negative FLOPs."""
    if latency_s <= 0 or bytes_moved <= 0 or peak_gflops <= 0 or bandwidth_gbs <= 0 or flops < 0:
        raise ValueError(f"roofline needs positive latency, bytes, peak and bandwidth and FLOPs >= 0 (got "
                         f"latency_s={latency_s}, bytes_moved={bytes_moved}, peak_gflops={peak_gflops}, "
                         f"bandwidth_gbs={bandwidth_gbs}, flops={flops})")
    achieved = flops / latency_s / 1e9
    intensity = flops / bytes_moved
    roof = min(peak_gflops, intensity * bandwidth_gbs)
    ridge = peak_gflops / bandwidth_gbs
    return RooflinePoint(flops=flops, bytes_moved=bytes_moved, latency_s=latency_s, achieved_gflops=achieved,
                         achieved_gbs=bytes_moved / latency_s / 1e9, intensity=intensity, peak_gflops=peak_gflops,
                         bandwidth_gbs=bandwidth_gbs, ridge_intensity=ridge, roof_gflops=roof,
                         percent_of_roof=100.0 * achieved / roof if roof > 0 else 0.0,
                         percent_of_peak=100.0 * achieved / peak_gflops,
                         bound="compute" if intensity >= ridge else "memory")


def case_roofline(flops: float, bytes_moved: float, latency_s: float, ceilings: Mapping[str, Any],
                  precision: str = "fp32") -> RooflinePoint:
    """roofline_point with the peak of `precision` and the bandwidth from a machine_ceilings() result.
    A precision without a measured peak raises KeyError naming the ones measured."""
    peaks = ceilings["peak_gflops"]
    if precision not in peaks:
        raise KeyError(f"no measured peak for {precision} (measured: {', '.join(sorted(peaks)) or 'none'}; "
                       f"{ceilings.get('not_measured', {}).get(precision, 'not measured')})")
    return roofline_point(flops, bytes_moved, latency_s, float(peaks[precision]), float(ceilings["bandwidth_gbs"]))
