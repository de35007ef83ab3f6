"""ONNX's backend test cases (node cases and light models) as ConformanceCase, filters, tolerances, comparison."""

from __future__ import annotations

import fnmatch
import functools
import hashlib
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.config import ConformanceConfig
from harness.errors import UsageError
from harness.precision import Precision

SUITE = "onnx-backend"
# Tolerances per precision, in one place. FP32 uses each case's own (ONNX's backend runner: rtol 1e-3, atol 1e-7
# unless the case says otherwise); FP16 loosens them to at least these (an 11-bit mantissa: one rounding of an
# input is 4.9e-4 relative; a few of them through one operator stay under 1e-2).
PRECISION_TOLERANCES: dict[Precision, tuple[float, float]] = {
    Precision.FP32: (0.0, 0.0),
    Precision.FP16: (1e-2, 1e-3),
}
_EXPANDED = re.compile(r"_expanded(_ver\d+)?$")
# Operators whose outputs are random draws: ONNX's expected outputs come from numpy's generator, which no runtime
# reproduces, so a mismatch in value says nothing about the runtime (the case is "nondeterministic").
RANDOM_OPS = frozenset({"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial",
                        "Bernoulli"})


@dataclass(frozen=True)
class ConformanceCase:
    """One backend test case: a model (one node, its function expansion, or a light model), feeds, expected
    outputs and ONNX's tolerances for it."""

    name: str  # ONNX's test name, e.g. test_abs, test_softmax_axis_0_expanded, test_resnet50
    op: str  # the operator under test ("model:resnet50" for a light model)
    domain: str
    opset: int  # the ai.onnx opset the model imports
    kind: str  # node | expanded | model
    model: bytes  # serialized ModelProto
    inputs: dict[str, np.ndarray]
    expected: list[Any]  # arrays; lists for sequences; None for an absent optional
    rtol: float
    atol: float
    random: str = ""  # why the expected output is random ("" when it is not): see random_reason

    @property
    def fingerprint(self) -> str:
        return hashlib.sha256(self.model).hexdigest()[:16]

    def tolerance(self, precision: Precision) -> tuple[float, float]:
        rtol, atol = PRECISION_TOLERANCES[Precision(precision)]
        return max(self.rtol, rtol), max(self.atol, atol)


def _opset(model: Any) -> int:
    return max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)


@functools.cache
def node_cases() -> tuple[ConformanceCase, ...]:
    """Every node case of the installed onnx (`onnx.backend.test.case.node.collect_testcases`, a few seconds;
    once per process: onnx's collector registers its cases globally and refuses a second registration)."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the generators' own overflow/divide warnings
        raw = collect_testcases()
    ops = {c.name: (c.model.graph.node[0].op_type, c.model.graph.node[0].domain) for c in raw
           if len(c.model.graph.node) == 1}
    out = []
    for c in raw:
        base = _EXPANDED.sub("", c.name)
        expanded = base != c.name
        op, domain = ops.get(base) or ops.get(c.name) or (c.model.graph.node[0].op_type, "")
        inputs_arr, outputs_arr = c.data_sets[0]
        names = [i.name for i in c.model.graph.input]
        out.append(ConformanceCase(c.name, op, domain or "ai.onnx", _opset(c.model),
                                   "expanded" if expanded else "node", c.model.SerializeToString(),
                                   {n: _array(v) for n, v in zip(names, inputs_arr)},
                                   [_value(v) for v in outputs_arr], c.rtol, c.atol,
                                   random_reason(c.model, dict(zip(names, inputs_arr)))))
    return tuple(out)


def random_reason(model: Any, feeds: dict[str, Any]) -> str:
    """Why the outputs of `model` (a ModelProto) fed `feeds` are random draws, or "": a random operator, or a
    Dropout in training mode (its third input true, fed or a constant initializer) with a ratio above 0."""
    from onnx import numpy_helper

    consts = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type == "Constant" and n.output:
            for a in n.attribute:
                if a.name == "value":
                    consts[n.output[0]] = numpy_helper.to_array(a.t)

    def value(name: str) -> Any:
        v = feeds.get(name, consts.get(name))
        return None if v is None else np.asarray(_array(v))

    for n in model.graph.node:
        if n.op_type in RANDOM_OPS:
            return f"{n.op_type} draws random numbers"
        if n.op_type == "Dropout" and len(n.input) > 2 and n.input[2]:
            training = value(n.input[2])
            ratio = value(n.input[1]) if n.input[1] else np.asarray(0.5)
            if training is not None and bool(training.all()) and (ratio is None or float(ratio) > 0):
                return "training-mode Dropout draws a random mask"
    return ""


def light_cases() -> list[ConformanceCase]:
    """The small real models under onnx/backend/test/data/light, fed as ONNX's runner feeds them (a ramp,
    `generate_dummy_data(random=False)`); empty where the installed wheel lacks them."""
    import onnx
    from onnx import numpy_helper
    from onnx.backend.test.case.model import collect_testcases
    from onnx.backend.test.runner import Runner

    root = Path(onnx.__file__).resolve().parent.parent
    out = []
    for t in collect_testcases():
        path = root / (t.url or "")
        if not (t.url or "").startswith("onnx/backend/test/data/light/") or not path.is_file():
            continue
        model = onnx.load(str(path))
        inits = {i.name for i in model.graph.initializer}
        feeds = {x.name: Runner.generate_dummy_data(x, seed=0, name=t.model_name, random=False)
                 for x in model.graph.input if x.name not in inits}
        expected = []
        for i in range(len(model.graph.output)):
            pb = path.with_name(f"{path.stem}_output_{i}.pb")
            if not pb.is_file():
                break
            tensor = onnx.TensorProto()
            tensor.ParseFromString(pb.read_bytes())
            expected.append(numpy_helper.to_array(tensor))
        if len(expected) != len(model.graph.output):
            continue  # no stored expected outputs: ONNX would compute them with its reference evaluator
        out.append(ConformanceCase(t.name, f"model:{t.model_name}", "ai.onnx", _opset(model), "model",
                                   model.SerializeToString(), feeds, expected, t.rtol, t.atol,
                                   random_reason(model, feeds)))
    return out


def _array(v: Any) -> Any:
    from onnx import TensorProto, numpy_helper

    if isinstance(v, TensorProto):
        return numpy_helper.to_array(v)
    if isinstance(v, np.generic):  # a numpy scalar (some cases feed one): the 0-d array ONNX means
        return np.asarray(v)
    return v


def _value(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        return [_value(x) for x in v]
    return None if v is None else _array(v)


def keeps(selected: ConformanceConfig, c: ConformanceCase) -> bool:
    """Whether the filter keeps case `c`: operators (exact, case-insensitive), name patterns (-k: substrings or
    globs, any of them), exact names, opset bounds, node / expanded / light models."""
    if selected.ops and c.op.lower() not in {o.lower() for o in selected.ops}:
        return False
    if selected.names and c.name not in selected.names:
        return False
    if selected.keywords and not any((fnmatch.fnmatchcase(c.name, k) if any(ch in k for ch in "*?[") else
                                      k in c.name) for k in selected.keywords):
        return False
    if selected.opset_min is not None and c.opset < selected.opset_min:
        return False
    if selected.opset_max is not None and c.opset > selected.opset_max:
        return False
    return selected.expanded or c.kind != "expanded"


def collect(selected: ConformanceConfig) -> list[ConformanceCase]:
    """The node cases (and light models) of the installed onnx that `selected` keeps, in ONNX's order."""
    cases = [*node_cases(), *(light_cases() if selected.light else [])]
    return [c for c in cases if keeps(selected, c)]


def case_by_name(name: str) -> ConformanceCase:
    """One case by its test name (node cases first, then light models), once collected per process."""
    index = _index()
    if name not in index:
        raise UsageError(f"no ONNX backend conformance case named {name!r} (see `harness conform --list`)")
    return index[name]


@functools.cache
def _index() -> dict[str, ConformanceCase]:
    out: dict[str, ConformanceCase] = {}
    for c in (*node_cases(), *light_cases()):
        out.setdefault(c.name, c)
    return out


# ------------------------------------------------------------------ comparison, as ONNX's backend runner does
def compare_outputs(expected: Sequence[Any], actual: Sequence[Any], rtol: float, atol: float,
                    values: bool = True) -> dict[str, Any]:
    """{"ok", "max_abs", "max_rel", "reason"}: every output matches in count, shape, dtype and value
    (|a - e| <= atol + rtol |e|, NaN where NaN, exact for strings), as onnx's assert_similar_outputs;
    `values` False: count, shape and dtype only (a random expected output)."""
    worst = {"max_abs": 0.0, "max_rel": 0.0, "values": values}
    try:
        problem = _compare_list(list(expected), list(actual), rtol, atol, worst, "")
    except Exception as exc:  # noqa: BLE001 - an output we cannot compare is a failure with its reason
        problem = f"outputs not comparable: {type(exc).__name__}: {exc}"
    worst.pop("values")
    return {"ok": problem is None, "reason": problem or "", **worst}


def _compare_list(expected: list[Any], actual: list[Any], rtol: float, atol: float, worst: dict[str, Any],
                  where: str) -> str | None:
    if len(expected) != len(actual):
        return f"{where or 'outputs'}: {len(actual)} values, expected {len(expected)}"
    for i, (e, a) in enumerate(zip(expected, actual)):
        at = f"{where}[{i}]" if where else f"output {i}"
        if isinstance(e, list):
            if not isinstance(a, (list, tuple)):
                return f"{at}: a {type(a).__name__}, expected a sequence"
            problem = _compare_list(e, list(a), rtol, atol, worst, at)
        elif e is None:
            problem = None if a is None else f"{at}: a value, expected none (an empty optional)"
        else:
            problem = _compare_array(np.asarray(e), a, rtol, atol, worst, at)
        if problem:
            return problem
    return None


def _compare_array(e: np.ndarray, a: Any, rtol: float, atol: float, worst: dict[str, Any],
                   at: str) -> str | None:
    if a is None:
        return f"{at}: none, expected an array of shape {e.shape}"
    a = np.asarray(a)
    if a.shape != e.shape:
        return f"{at}: shape {a.shape}, expected {e.shape}"
    if e.dtype == object or e.dtype.kind in "US":
        return None if np.array_equal(a.astype(object), e.astype(object)) else f"{at}: strings differ"
    if a.dtype != e.dtype:
        return f"{at}: dtype {a.dtype}, expected {e.dtype}"
    if e.size == 0 or not worst["values"]:
        return None
    if e.dtype.kind == "b":
        bad = int(np.count_nonzero(a != e))
        return f"{at}: {bad} of {e.size} booleans differ" if bad else None
    ef, af = e.astype(np.float64), a.astype(np.float64)
    nan_e, nan_a = np.isnan(ef), np.isnan(af)
    if not np.array_equal(nan_e, nan_a):
        return f"{at}: NaN at {int(np.count_nonzero(nan_e != nan_a))} places where the other side has a number"
    inf_e = np.isinf(ef)
    if not np.array_equal(ef[inf_e], af[inf_e]) or np.isinf(af[~inf_e]).any():
        return f"{at}: infinities differ"
    finite = ~(nan_e | inf_e)
    diff = np.abs(af[finite] - ef[finite])
    ref = np.abs(ef[finite])
    if diff.size:
        max_abs = float(diff.max())
        nonzero = ref > 0
        max_rel = float((diff[nonzero] / ref[nonzero]).max()) if nonzero.any() else (0.0 if max_abs == 0 else
                                                                                     float("inf"))
        worst["max_abs"] = max(worst["max_abs"], max_abs)
        worst["max_rel"] = max(worst["max_rel"], max_rel)
        over = diff > atol + rtol * ref
        if over.any():
            return (f"{at}: {int(over.sum())} of {e.size} values over tolerance (rtol {rtol:g}, atol {atol:g}); "
                    f"max abs error {max_abs:.3g}, max rel error {max_rel:.3g}")
    return None
