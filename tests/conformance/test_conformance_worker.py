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


def test_a_failed_fp16_conversion_is_the_harnesss_conversion_status(monkeypatch):
    """The harness's own FP16 conversion failing is status "conversion" (not charged to the runtime)."""
    from harness.artifacts import fp16

    def broken(model, **_):
        raise ValueError("Type Error: Type (tensor(float16)) of output arg (y) does not match expected type")

    monkeypatch.setattr(fp16, "convert_to_fp16", broken)
    x = np.array([-1.0, 0.5, 2.0], dtype=np.float32)
    out = run_case(_payload(_model("Relu", TensorProto.FLOAT), x, np.maximum(x, 0), "fp16"))
    assert out["status"] == "conversion" and out["phase"] == "convert"
    assert out["reason"].startswith("the harness's FP16 conversion failed: ValueError: Type Error")


def test_training_mode_dropout_is_nondeterministic_not_failed():
    """ONNX's training-mode Dropout cases expect numpy's random mask: the shapes are judged, the values are not;
    with ratio 0 (no randomness) and in inference mode they are ordinary cases."""
    from harness.results.schema import CaseId
    from harness.workloads.conform.cases import case_by_name
    from harness.workloads.conform.workload import case_info, conformance_result

    def run(name: str) -> dict:
        c = case_by_name(name)
        return run_case({"runtime": OrtCpu, "precision": "fp32", "model": c.model, "inputs": c.inputs,
                         "expected": c.expected, "rtol": c.rtol, "atol": c.atol, "random": c.random, "threads": 1})

    assert case_by_name("test_training_dropout").random == "training-mode Dropout draws a random mask"
    assert case_by_name("test_bernoulli").random == "Bernoulli draws random numbers"
    assert case_by_name("test_training_dropout_zero_ratio").random == ""
    assert case_by_name("test_dropout_default").random == ""
    for name in ("test_training_dropout", "test_training_dropout_mask"):
        out = run(name)
        assert out["status"] == "nondeterministic", out
        assert "values not compared (shapes and dtypes match)" in out["reason"]
    assert run("test_training_dropout_zero_ratio")["status"] == "passed"
    assert run("test_dropout_default")["status"] == "passed"
    c = case_by_name("test_training_dropout")
    cid = CaseId(c.name, "ort-cpu", "fp32", 1, None, "cpu")
    stored = conformance_result(case_info(c, cid), c.fingerprint, cid, run(c.name))
    assert stored.status == "skipped" and stored.details["conformance"]["status"] == "nondeterministic"
