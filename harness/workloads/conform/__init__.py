"""The operator conformance workload: ONNX backend test cases on every runtime that runs an ONNX model."""
