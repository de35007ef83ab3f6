"""The roofline arithmetic: achieved rates, intensity, the roof at that intensity, the bound."""

from __future__ import annotations

import pytest

from harness.profile.roofline import case_roofline, roofline_point


def test_memory_bound_case():
    # 2 GFLOP over 1 GB in 0.5 s under a 100 GFLOP/s, 10 GB/s machine: intensity 2 < ridge 10
    p = roofline_point(2e9, 1e9, 0.5, peak_gflops=100.0, bandwidth_gbs=10.0)
    assert p.achieved_gflops == pytest.approx(4.0) and p.achieved_gbs == pytest.approx(2.0)
    assert p.intensity == pytest.approx(2.0) and p.ridge_intensity == pytest.approx(10.0)
    assert p.roof_gflops == pytest.approx(20.0)  # min(100, 2 * 10)
    assert p.percent_of_roof == pytest.approx(20.0) and p.percent_of_peak == pytest.approx(4.0)
    assert p.bound == "memory" and not p.over_roof and p.to_dict()["over_roof"] is False
    assert roofline_point(2e9, 1e9, 0.05, peak_gflops=100.0, bandwidth_gbs=10.0).over_roof  # 40 > roof 20


def test_compute_bound_case_and_ceilings_dict():
    ceilings = {"peak_gflops": {"fp32": 50.0, "int8": 100.0}, "bandwidth_gbs": 10.0, "not_measured": {}}
    p = case_roofline(3.6e9, 1e8, 0.1, ceilings, "fp32")  # intensity 36 >= ridge 5
    assert p.bound == "compute" and p.roof_gflops == pytest.approx(50.0)
    assert p.achieved_gflops == pytest.approx(36.0) and p.percent_of_roof == pytest.approx(72.0)
    assert case_roofline(3.6e9, 1e8, 0.1, ceilings, "int8").percent_of_roof == pytest.approx(36.0)
    at_ridge = roofline_point(5e9, 1e9, 1.0, 50.0, 10.0)
    assert at_ridge.bound == "compute" and at_ridge.roof_gflops == pytest.approx(50.0)
    with pytest.raises(KeyError, match="no measured peak for bf16"):
        case_roofline(1.0, 1.0, 1.0, ceilings, "bf16")


@pytest.mark.parametrize("args", [(1.0, 1.0, 0.0, 1.0, 1.0), (1.0, 0.0, 1.0, 1.0, 1.0), (-1.0, 1.0, 1.0, 1.0, 1.0),
                                  (1.0, 1.0, 1.0, 0.0, 1.0)])
def test_bad_inputs_raise(args):
    with pytest.raises(ValueError):
        roofline_point(*args)
