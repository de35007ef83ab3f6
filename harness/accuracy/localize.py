"""Layer-wise drift localisation: which node of a low-precision ONNX graph first drifts from the FP32 graph."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness.accuracy.drift import drift_metrics, relative_verdicts
from harness.precision import Tolerance
from harness.results.records import LocalizationFinding, LocalizationRecord

CHUNK = 64  # intermediate tensors added as outputs per session run: bounds the memory held at once
MAX_FINDINGS = 5  # stop after this many nodes over tolerance (the first one is the one that matters)
BUDGET_S = 120.0  # stop starting new chunks after this long (each chunk reruns both whole graphs)


def localize(fp32_path: str | Path, lowp_path: str | Path, feed: Mapping[str, np.ndarray], tolerance: Tolerance,
             *, trigger: str = "failure", threads: int = 1, chunk: int = CHUNK,
             max_findings: int = MAX_FINDINGS, budget_s: float = BUDGET_S) -> LocalizationRecord:
    """Run the FP32 and the low-precision graph on `feed` with intermediate tensors as outputs, `chunk` at a
    time (ORT CPU), and report the first nodes in topological order whose output is over `tolerance`.

    Tensors are matched by name: a tensor counts when a node of the FP32 graph produces it and the
    low-precision graph has it too (QDQ and Cast insertion add tensors but keep the original ones); others are
    skipped. A tensor is over tolerance when rel_l2 > max_rel_l2, cosine < min_cosine (each over the tolerance's
    absolute floor, accuracy.drift.relative_verdicts), or it holds NaN/Inf.
    Returns a LocalizationRecord: trigger, tolerance, checked, skipped, first_bad (LocalizationFindings: node,
    op_type, tensor, max_abs, p99_abs, rel_l2, cosine, nonfinite), plus truncated (why) when the time
    budget ran out before every tensor was checked. Marking a tensor as an output stops ORT
    from fusing across it, so a QDQ graph is measured as simulated quantisation (DequantizeLinear + FP32 op).
    """
    import onnx

    bounds = {"max_rel_l2": tolerance.max_rel_l2, "min_cosine": tolerance.min_cosine}
    fp32 = onnx.load(str(fp32_path))
    lowp = onnx.load(str(lowp_path))
    candidates, skipped = _candidates(fp32, lowp)
    feed = {k: np.ascontiguousarray(v) for k, v in feed.items()}
    first_bad: list[LocalizationFinding] = []
    checked = 0
    truncated = None
    t0 = time.monotonic()
    for part in _chunks(candidates, max(1, chunk)):
        if checked and time.monotonic() - t0 > budget_s:
            truncated = f"time budget of {budget_s:g} s reached after {checked} of {len(candidates)} tensors"
            break
        ref = _run_with_outputs(fp32, [t for t, _, _, _ in part], feed, threads)
        out = _run_with_outputs(lowp, [m for _, m, _, _ in part], feed, threads)
        for tensor, match, node, op_type in part:
            a, b = ref.get(tensor), out.get(match)
            if not (_is_float(a) and _is_float(b)) or a.shape != b.shape:
                skipped += 1
                continue
            checked += 1
            finding = _finding(node, op_type, tensor, a, b, tolerance)
            if finding is not None:
                first_bad.append(finding)
                if len(first_bad) >= max_findings:
                    break
        del ref, out
        if len(first_bad) >= max_findings:
            break
    return LocalizationRecord(trigger=trigger, tolerance=bounds, checked=checked, skipped=skipped,
                              first_bad=first_bad, **({"truncated": truncated} if truncated else {}))


def _candidates(fp32: Any, lowp: Any) -> tuple[list[tuple[str, str, str, str]], int]:
    """(FP32 tensor, its low-precision counterpart, node name, op type) of every node output of the FP32 graph in
    topological order that has a counterpart and may be a float, and how many outputs have none."""
    counterpart = _counterparts(lowp)
    fp32_types = _float_tensors(fp32)
    candidates: list[tuple[str, str, str, str]] = []
    skipped = 0
    for i, node in enumerate(_topological(fp32.graph)):
        for t in node.output:
            if not t:
                continue
            match = counterpart(t, node.op_type)
            if match is not None and fp32_types.get(t, True):
                candidates.append((t, match, node.name or f"#{i}", node.op_type))
            else:
                skipped += 1
    return candidates, skipped


def _finding(node: str, op_type: str, tensor: str, a: np.ndarray, b: np.ndarray,
             tolerance: Tolerance) -> LocalizationFinding | None:
    """The finding of a tensor whose low-precision value `b` is over `tolerance` against the FP32 one `a` (or
    holds NaN/Inf); None when within."""
    d = drift_metrics(tensor, b, a)
    if d.nonfinite > 0 or bool(relative_verdicts(d, tolerance)[0]):
        return LocalizationFinding(
            node=node, op_type=op_type, tensor=tensor, max_abs=_num(d.max_abs), p99_abs=_num(d.p99_abs),
            rel_l2=_num(d.rel_l2), cosine=_num(d.cosine), nonfinite=d.nonfinite)
    return None


def _counterparts(lowp: Any) -> Any:
    """A function (FP32 tensor name, FP32 producer op type) -> the low-precision tensor holding that value,
    or None.

    Where the quantiser put QuantizeLinear -> DequantizeLinear after a tensor, the DequantizeLinear output is
    what the next layer sees (it also stands in for an activation the quantiser folded into the Q range,
    e.g. a removed Relu whose name moved to the Conv/Gemm before it). Otherwise the tensor of the same name,
    if the same op type (or an inserted Cast / DequantizeLinear) produces it; a name that moved to a different
    op is skipped rather than compared with the wrong value.
    """
    producer = {o: n for n in lowp.graph.node for o in n.output if o}
    consumers: dict[str, list[Any]] = {}
    for n in lowp.graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)

    def match(name: str, op_type: str) -> str | None:
        for q in consumers.get(name, ()):
            if q.op_type == "QuantizeLinear":
                for dq in consumers.get(q.output[0], ()):
                    if dq.op_type == "DequantizeLinear":
                        return dq.output[0]
        node = producer.get(name)
        if node is not None and node.op_type in (op_type, "Cast", "DequantizeLinear"):
            return name
        return None

    return match


def _run_with_outputs(model: Any, names: Sequence[str], feed: Mapping[str, np.ndarray],
                      threads: int) -> dict[str, np.ndarray]:
    """One ORT CPU run of `model` with `names` as extra graph outputs; the model's own outputs are restored."""
    import onnx
    import onnxruntime as ort

    original = list(model.graph.output)
    have = {o.name for o in original}
    extra = [onnx.ValueInfoProto(name=n) for n in names if n not in have]
    model.graph.output.extend(extra)
    try:
        data = model.SerializeToString()
    finally:
        del model.graph.output[len(original):]
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.log_severity_level = 3
    session = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    wanted = [n for n in names]
    inputs = {i.name for i in session.get_inputs()}
    values = session.run(wanted, {k: v for k, v in feed.items() if k in inputs})
    return dict(zip(wanted, values))


def _topological(graph: Any) -> list[Any]:
    """The graph's nodes in a topological order (ONNX requires one; re-sorted stably if a file breaks it)."""
    known = {i.name for i in graph.input} | {t.name for t in graph.initializer} | {""}
    pending, order = list(graph.node), []
    while pending:
        rest = []
        for node in pending:
            if all(i in known for i in node.input):
                order.append(node)
                known.update(node.output)
            else:
                rest.append(node)
        if len(rest) == len(pending):  # subgraph-captured names or a cycle: keep the file's order
            order.extend(rest)
            break
        pending = rest
    return order


def _float_tensors(model: Any) -> dict[str, bool]:
    """Tensor name -> whether its element type is floating point, where shape inference knows it."""
    import onnx

    floats = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16, onnx.TensorProto.DOUBLE}
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - types are a filter only; unknown ones are checked at run time
        return {}
    out = {}
    for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
            out[vi.name] = vi.type.tensor_type.elem_type in floats
    return out


def _is_float(a: Any) -> bool:
    return isinstance(a, np.ndarray) and np.issubdtype(a.dtype, np.floating)


def _num(v: float) -> float | str:
    return v if math.isfinite(v) else ("nan" if math.isnan(v) else "inf")


def _chunks(items: list[Any], n: int) -> Iterator[list[Any]]:
    for i in range(0, len(items), n):
        yield items[i:i + n]
