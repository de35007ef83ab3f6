"""Benchmark and conformance harness for ML inference across runtimes, precisions and hardware."""

__version__ = "0.1.0"
