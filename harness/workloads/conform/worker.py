"""One conformance case inside a supervised worker: convert (FP16), load on the runtime, run, compare."""

from __future__ import annotations

import time
from typing import Any

from harness.workloads.conform.cases import compare_outputs
from harness.errors import UnsupportedModelError
from harness.precision import Precision

# A refusal message is kept to its first lines: ONNX Runtime and OpenVINO append long dumps of the graph.
_REASON_LINES = 4
_REASON_CHARS = 600


def short(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return "\n".join(text.splitlines()[:_REASON_LINES])[:_REASON_CHARS]


def run_case(payload: dict[str, Any]) -> dict[str, Any]:
    """payload: runtime (a Runtime class), precision, model (bytes), inputs, expected, rtol, atol, threads.

    Statuses: passed / failed (max_abs, max_rel), unsupported (loading or compiling raised: the runtime refused
    the model), error (inference raised), conversion (the harness's own FP16 conversion failed: not the
    runtime's fault), nondeterministic (the expected output is random, e.g. training-mode Dropout: the values
    differ but the shapes and dtypes match, so nothing is judged), skipped (FP16 left nothing to convert).
    payload["random"]: why the case's expected output is random ("" or absent when it is not).
    """
    runtime = payload["runtime"]
    precision = Precision(payload["precision"])
    model: bytes = payload["model"]
    out: dict[str, Any] = {"rtol": payload["rtol"], "atol": payload["atol"]}
    if precision is Precision.FP16:
        import onnx

        from harness.artifacts.fp16 import convert_to_fp16

        original = onnx.load_from_string(model)
        if not _has_fp32(original):
            return {**out, "status": "skipped", "phase": "convert",
                    "reason": "no FP32 tensor in the model: FP16 conversion leaves it as it is"}
        try:
            proto = convert_to_fp16(onnx.load_from_string(model))
        except Exception as exc:  # noqa: BLE001 - the case's row says why
            if "already converted to float16" in str(exc):  # a model with FP16 tensors: the converter declines
                return {**out, "status": "skipped", "phase": "convert",
                        "reason": f"the FP16 conversion declines a model that has FP16 tensors: {short(exc)}"}
            return {**out, "status": "conversion", "phase": "convert",
                    "reason": f"the harness's FP16 conversion failed: {short(exc)}"}
        changed = _io_changes(original, proto)
        if changed:  # keep_io_types promised FP32 inputs and outputs: a fault of the conversion, not the runtime
            return {**out, "status": "conversion", "phase": "convert",
                    "reason": f"the harness's FP16 conversion changed the graph's I/O types: {changed}"}
        converted = proto.SerializeToString()
        if not any(n.op_type == "Cast" for n in proto.graph.node):
            return {**out, "status": "skipped", "phase": "convert",
                    "reason": "the FP16 conversion left the model in FP32 (no float tensor, or a blocked op)"}
        model = converted
    t0 = time.perf_counter()
    try:
        run = runtime.onnx_runner(model, int(payload.get("threads") or 1))
    except Exception as exc:  # noqa: BLE001 - a refusal to load or compile: unsupported, with its message
        return {**out, "status": "unsupported", "phase": "load", "reason": short(exc)}
    out["load_s"] = round(time.perf_counter() - t0, 6)
    t1 = time.perf_counter_ns()
    try:
        actual = run(payload["inputs"])
    except UnsupportedModelError as exc:  # the adapter recognised a refusal (an input type its API lacks)
        return {**out, "status": "unsupported", "phase": "run", "reason": short(exc)}
    except Exception as exc:  # noqa: BLE001 - loaded, then raised: an error of the runtime on this case
        return {**out, "status": "error", "phase": "run", "reason": short(exc)}
    out["infer_ns"] = max(1, time.perf_counter_ns() - t1)
    verdict = compare_outputs(payload["expected"], list(actual), payload["rtol"], payload["atol"])
    random = str(payload.get("random") or "")
    if random and not verdict["ok"]:
        # values are random draws; only the structure (count, shape, dtype) can be judged
        shape = compare_outputs(payload["expected"], list(actual), payload["rtol"], payload["atol"], values=False)
        if shape["ok"]:
            return {**out, "status": "nondeterministic", "phase": "accuracy",
                    "reason": f"{random}: values not compared (shapes and dtypes match); {verdict['reason']}",
                    "max_abs": verdict["max_abs"], "max_rel": verdict["max_rel"]}
    return {**out, "status": "passed" if verdict["ok"] else "failed", "phase": "accuracy",
            "reason": verdict["reason"], "max_abs": verdict["max_abs"], "max_rel": verdict["max_rel"]}


def _io_changes(before: Any, after: Any) -> str:
    """Graph inputs/outputs whose element type the conversion changed ("" when none did). Inputs that name an
    initializer (IR version 3 weights) are weights, not what a caller feeds: the conversion may drop them."""
    from onnx import TensorProto

    def types(m: Any) -> dict[str, int]:
        weights = {t.name for t in m.graph.initializer}
        return {v.name: v.type.tensor_type.elem_type for v in (*m.graph.input, *m.graph.output)
                if v.name not in weights}

    a, b = types(before), types(after)
    name = TensorProto.DataType.Name
    return ", ".join(f"{k}: {name(a[k]) if a[k] else '?'} -> {name(b[k]) if b.get(k) else '?'}"
                     for k in a if b.get(k) != a[k])


def _has_fp32(model: Any) -> bool:
    """Any FP32 tensor the conversion would turn into FP16: graph inputs, outputs, values, initializers."""
    from onnx import TensorProto

    g = model.graph
    values = (*g.input, *g.output, *g.value_info)
    return (any(v.type.tensor_type.elem_type == TensorProto.FLOAT for v in values)
            or any(t.data_type == TensorProto.FLOAT for t in g.initializer))
