"""Drift metrics agree with an independent numpy computation; tolerances fail with the figures shown."""

import math

import numpy as np
import pytest

from harness.accuracy import compare, drift_metrics
from harness.precision import DEFAULT_TOLERANCES, Precision, Tolerance


def test_metrics_match_independent_numpy():
    ref = np.array([[1.0, -2.0, 3.0], [0.5, 0.25, -1.0]], dtype=np.float32)
    out = np.array([[1.1, -2.0, 2.9], [0.5, 0.30, -1.0]], dtype=np.float32)
    d = drift_metrics("y", out, ref, classification=True)
    r, o = ref.astype(np.float64), out.astype(np.float64)
    assert d.max_abs == pytest.approx(np.max(np.abs(o - r)))
    assert d.mean_abs == pytest.approx(np.mean(np.abs(o - r)))
    assert d.rel_l2 == pytest.approx(np.sqrt(np.sum((o - r) ** 2)) / np.sqrt(np.sum(r ** 2)))
    assert d.cosine == pytest.approx(np.sum(o * r) / (np.linalg.norm(o) * np.linalg.norm(r)))
    assert d.top1_agreement == 1.0  # argmax rows: 2 and 0 in both
    assert d.nonfinite == 0 and d.numel == 6


def test_top1_agreement_counts_rows():
    ref = np.array([[0, 1], [1, 0], [0, 1], [1, 0]], dtype=np.float32)
    out = np.array([[0, 1], [0, 1], [0, 1], [0, 1]], dtype=np.float32)
    assert drift_metrics("y", out, ref, classification=True).top1_agreement == 0.5
    assert drift_metrics("y", out, ref, classification=False).top1_agreement is None


def test_identical_outputs_pass_fp32():
    ref = {"y": np.linspace(-1, 1, 100, dtype=np.float32).reshape(10, 10)}
    res = compare(ref, {"y": ref["y"].copy()}, DEFAULT_TOLERANCES[Precision.FP32], classification=True)
    assert res and res.passed and res.failures == ()
    assert "within tolerance" in res.message


def test_over_tolerance_fails_with_figures():
    ref = {"y": np.ones((4, 5), dtype=np.float32)}
    out = {"y": np.ones((4, 5), dtype=np.float32) * 1.01}
    res = compare(ref, out, Tolerance(atol=1e-4, rtol=1e-3, max_rel_l2=1e-4))
    assert not res
    msg = res.message
    assert "rel_l2=0.01 > 0.0001" in msg
    assert "20 of 20 elements exceed" in msg
    assert "max_abs=0.01" in msg


def test_nan_and_inf_always_fail_with_counts():
    ref = {"y": np.zeros((2, 3), dtype=np.float32) + 1}
    bad = ref["y"].copy()
    bad[0, 0], bad[1, 2] = np.nan, np.inf
    res = compare(ref, {"y": bad}, Tolerance())  # no bounds at all: NaN/Inf still fail
    assert not res
    assert "2 of 6 elements are NaN/Inf" in res.message
    assert math.isinf(res.worst()["max_abs"])


def test_missing_output_and_shape_mismatch_fail():
    ref = {"a": np.zeros(3), "b": np.zeros(3)}
    res = compare(ref, {"a": np.zeros(4)}, Tolerance())
    assert not res
    assert any("missing" in f for f in res.failures)
    assert any("shape" in f for f in res.failures)


def test_tolerance_merge_overrides_only_given_bounds():
    base = DEFAULT_TOLERANCES[Precision.FP32]
    merged = base.merged(Tolerance(max_rel_l2=1e-2))
    assert merged.max_rel_l2 == 1e-2 and merged.atol == base.atol and merged.min_cosine == base.min_cosine


def test_drift_figures_match_hand_computed_values_on_fixed_arrays():
    """Every figure against values computed here with plain numpy / by hand, never by the code under test."""
    ref = np.array([[2.0, -1.0, 0.5, 4.0], [1.0, 3.0, -2.0, 0.0]], dtype=np.float32)
    out = np.array([[2.5, -1.0, 0.5, 3.0], [1.0, 3.25, -2.0, 0.0]], dtype=np.float32)
    d = drift_metrics("y", out, ref, classification=True, atol=0.3, rtol=0.0)
    diff = np.abs(out.astype(np.float64) - ref.astype(np.float64)).ravel()  # 0.5, 0, 0, 1, 0, .25, 0, 0
    assert d.max_abs == 1.0
    assert d.mean_abs == pytest.approx(1.75 / 8)
    # p99, numpy's linear interpolation by hand: sorted |diff| = [0,0,0,0,0,.25,.5,1]; rank 0.99*7 = 6.93
    # -> 0.5 + 0.93 * (1.0 - 0.5)
    assert d.p99_abs == pytest.approx(0.5 + 0.93 * 0.5)
    assert d.p99_abs == pytest.approx(np.sort(diff)[6] + (6.93 - 6) * (np.sort(diff)[7] - np.sort(diff)[6]))
    ref_sq = 4 + 1 + 0.25 + 16 + 1 + 9 + 4 + 0  # 35.25
    assert d.rel_l2 == pytest.approx(np.sqrt(0.25 + 1 + 0.0625) / np.sqrt(ref_sq))
    dot = 5 + 1 + 0.25 + 12 + 1 + 9.75 + 4  # 33.0
    out_sq = 6.25 + 1 + 0.25 + 9 + 1 + 10.5625 + 4  # 32.0625
    assert d.cosine == pytest.approx(dot / np.sqrt(out_sq * ref_sq))
    assert d.top1_agreement == 1.0  # arg-max per row: 3 and 1 in both
    assert d.allclose_violations == 2  # |diff| > 0.3: 0.5 and 1.0
    assert d.nonfinite == 0 and d.numel == 8


def test_worst_reports_p99_over_outputs_and_inf_for_nonfinite():
    ref = {"a": np.zeros(100), "b": np.zeros(100)}
    out = {"a": np.arange(100, dtype=np.float64) / 100, "b": np.full(100, 0.5)}
    res = compare(ref, out, Tolerance())
    assert res.worst()["p99_abs"] == pytest.approx(max(0.98 + 0.01 * 0.01, 0.5))
    bad = {"a": np.array([np.nan, 1.0]), "b": np.zeros(2)}
    assert math.isinf(compare({"a": np.zeros(2), "b": np.zeros(2)}, bad, Tolerance()).worst()["p99_abs"])


def test_blockwise_metrics_agree_with_one_pass_numpy(monkeypatch):
    """Large outputs are processed in blocks: the figures match a one-pass float64 numpy computation."""
    import numpy as np

    from harness.accuracy import drift

    monkeypatch.setattr(drift, "_CHUNK", 1000)
    rng = np.random.default_rng(7)
    ref = rng.standard_normal((7, 500)).astype(np.float32)
    out = (ref + rng.normal(0, 1e-3, ref.shape)).astype(np.float32)
    d = drift.drift_metrics("y", out, ref, classification=True, atol=1e-3, rtol=0.0)
    o, r = out.astype(np.float64).ravel(), ref.astype(np.float64).ravel()
    diff = np.abs(o - r)
    assert d.rel_l2 == pytest.approx(np.linalg.norm(o - r) / np.linalg.norm(r), rel=1e-9)
    assert d.cosine == pytest.approx(o @ r / (np.linalg.norm(o) * np.linalg.norm(r)), rel=1e-12)
    assert d.max_abs == pytest.approx(diff.max()) and d.mean_abs == pytest.approx(diff.mean(), rel=1e-9)
    assert d.p99_abs == pytest.approx(np.percentile(diff, 99), rel=1e-6)  # float32 |diff| beyond one block
    assert d.allclose_violations == int((diff > 1e-3).sum()) and d.numel == 3500
    assert d.top1_agreement == pytest.approx(float(np.mean(out.argmax(-1) == ref.argmax(-1))))
    bad = out.copy()
    bad[6, 499] = np.nan  # in the last block
    nan = drift.drift_metrics("y", bad, ref)
    assert nan.nonfinite == 1 and nan.max_abs == float("inf")
