"""Operator-level conformance: ONNX's backend test cases run on every runtime that takes an ONNX model."""
