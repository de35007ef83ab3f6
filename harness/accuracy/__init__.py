"""Accuracy drift of a case's outputs against the FP32 reference outputs."""

from harness.accuracy.drift import AccuracyResult, OutputDrift, compare, drift_metrics

__all__ = ["AccuracyResult", "OutputDrift", "compare", "drift_metrics"]
