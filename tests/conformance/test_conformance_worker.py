"""One conformance case in-process (harness.workloads.conform.worker.run_case) on ort-cpu: FP16 path, refusals."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from harness.workloads.conform.worker import run_case
from harness.runtimes.onnxruntime import OrtCpu


def _model(op: str, elem: int, opset: int = 13) -> bytes:
    graph = helper.make_graph([helper.make_node(op, ["x"], ["y"])], f"test_{op.lower()}",
                              [helper.make_tensor_value_info("x", elem, [3])],
                              [helper.make_tensor_value_info("y", elem, [3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model.SerializeToString()


def _payload(model: bytes, x: np.ndarray, y: np.ndarray, precision: str = "fp32") -> dict:
    return {"runtime": OrtCpu, "precision": precision, "model": model, "inputs": {"x": x}, "expected": [y],
            "rtol": 1e-3, "atol": 1e-7, "threads": 1}


def test_fp32_passes_and_a_wrong_expectation_fails_with_its_errors():
    x = np.array([-1.0, 0.5, 2.0], dtype=np.float32)
    assert run_case(_payload(_model("Relu", TensorProto.FLOAT), x, np.maximum(x, 0)))["status"] == "passed"
    bad = run_case(_payload(_model("Relu", TensorProto.FLOAT), x, np.maximum(x, 0) + 0.5))
    assert bad["status"] == "failed" and bad["max_abs"] == 0.5 and bad["phase"] == "accuracy"


def test_fp16_runs_the_converted_model_and_skips_what_has_no_fp32():
    x = np.array([-1.0, 0.3333, 2.0], dtype=np.float32)
    out = run_case({**_payload(_model("Relu", TensorProto.FLOAT), x, np.maximum(x, 0), "fp16"),
                    "rtol": 1e-2, "atol": 1e-3})
    assert out["status"] == "passed" and out["max_abs"] < 1e-3  # ORT CPU may fold the Casts away: exact
    ints = np.array([-1, 0, 2], dtype=np.int32)
    assert run_case(_payload(_model("Abs", TensorProto.INT32), ints, np.abs(ints), "fp16"))["status"] == "skipped"


def test_refusals_are_unsupported_with_the_runtimes_message():
    x = np.ones(3, dtype=np.float32)
    late = run_case(_payload(_model("Relu", TensorProto.FLOAT, opset=99), x, x))  # an opset ORT does not know
    assert late["status"] == "unsupported" and late["phase"] == "load" and "ONNXRuntimeError" in late["reason"]
    bf16 = helper.tensor_dtype_to_np_dtype(TensorProto.BFLOAT16)  # an ml_dtypes array: the Python API refuses it
    b = np.ones(3, dtype=bf16)
    typed = run_case(_payload(_model("Identity", TensorProto.BFLOAT16), b, b))
    assert typed["status"] == "unsupported" and typed["phase"] == "run" and "input type" in typed["reason"]
    assert onnx.load_from_string(_model("Relu", TensorProto.FLOAT)).graph.name == "test_relu"
