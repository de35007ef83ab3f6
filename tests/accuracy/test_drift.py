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
