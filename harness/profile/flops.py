"""FLOPs and bytes moved per node of an ONNX graph, from its inferred shapes at a case's concrete sizes
(conventions: graph_cost's docstring and docs/method.md)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import ModelError, UsageError

Shape = tuple[int, ...]

# ops with no arithmetic: they move, select, reshape or create data
DATA_MOVEMENT = frozenset({
    "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Concat", "Split", "Slice", "Gather",
    "GatherElements", "GatherND", "ScatterND", "ScatterElements", "Expand", "Tile", "Pad", "Cast", "CastLike",
    "Where", "Shape", "Size", "Constant", "ConstantOfShape", "DepthToSpace", "SpaceToDepth", "Dropout",
    "Compress", "ReverseSequence", "Trilu", "OneHot",
})
_METADATA_ONLY = frozenset({"Shape", "Size"})
_READS_WHAT_IT_WRITES = frozenset({"Gather", "GatherElements", "GatherND", "Slice"})  # data read: output's size

# element-wise: FLOPs per output element
ELEMENTWISE: Mapping[str, int] = {
    **dict.fromkeys(("Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Reciprocal", "Exp", "Log", "Neg", "Abs", "Sign",
                     "Floor", "Ceil", "Round", "Erf", "Tanh", "Sin", "Cos", "Tan", "Relu", "Mod", "BitShift",
                     "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or", "Xor", "Not",
                     "IsNaN", "IsInf"), 1),
    "Sigmoid": 4,  # 1 / (1 + exp(-x)): negate, exp, add, divide
    "LeakyRelu": 2, "PRelu": 2,  # compare, multiply
    "Clip": 2,  # min, max
    "HardSigmoid": 4,  # max(0, min(1, a*x + b))
    "HardSwish": 5,  # x * HardSigmoid(x)
    "Softplus": 3, "Softsign": 3, "Mish": 5, "Elu": 4, "Selu": 5,
    "Gelu": 5,  # 0.5 * x * (1 + erf(x / sqrt 2)): divide, erf, add, 2 multiplies (approximate="tanh": 9)
    "QuickGelu": 6,  # com.microsoft: x * sigmoid(1.702 x)
    "FastGelu": 9,  # com.microsoft, the tanh approximation (+1 with its bias input)
    "BiasGelu": 6,  # com.microsoft: bias add + Gelu
    "DequantizeLinear": 2,  # (x - zero_point) * scale
    "QuantizeLinear": 4,  # divide, round, add zero point, saturate
}
_VARIADIC = frozenset({"Sum", "Max", "Min", "Mean"})  # n inputs: n - 1 per output element (Mean: n)
_REDUCE_PER_INPUT: Mapping[str, int] = {"ReduceSum": 1, "ReduceMean": 1, "ReduceMax": 1, "ReduceMin": 1,
                                        "ReduceProd": 1, "ReduceSumSquare": 2, "ReduceL1": 2, "ReduceL2": 2,
                                        "ReduceLogSum": 1, "ReduceLogSumExp": 2, "ArgMax": 1, "ArgMin": 1}
_REDUCE_PER_OUTPUT: Mapping[str, int] = {"ReduceMean": 1, "ReduceL2": 1, "ReduceLogSum": 1, "ReduceLogSumExp": 1}
LAYER_NORM, RMS_NORM, BATCH_NORM, SOFTMAX = 7, 4, 2, 5


@dataclass(frozen=True)
class NodeCost:
    """One node's FLOPs and bytes moved. `flops` None: not counted (`note` says why); 0 with kind "data
    movement": no arithmetic. `bytes_moved` None: a tensor's shape or type is unknown."""

    name: str
    op_type: str
    domain: str
    kind: str  # "compute", "data movement" or "not counted"
    flops: int | None
    bytes_moved: int | None
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "op_type": self.op_type, "domain": self.domain, "kind": self.kind,
                "flops": self.flops, "bytes_moved": self.bytes_moved, "note": self.note}


@dataclass(frozen=True)
class GraphCost:
    """A graph's per-node costs at concrete sizes and their sums.

    flops: the sum over counted nodes; bytes_moved: the sum over nodes whose tensors are known;
    not_counted: op type -> nodes whose FLOPs are not counted; bytes_unknown: op type -> nodes whose bytes are
    not known; data_movement: op type -> nodes of 0 FLOPs by nature."""

    nodes: tuple[NodeCost, ...]
    dims: Mapping[str, int] = field(default_factory=dict)

    @property
    def flops(self) -> int:
        return sum(n.flops for n in self.nodes if n.flops is not None)

    @property
    def bytes_moved(self) -> int:
        return sum(n.bytes_moved for n in self.nodes if n.bytes_moved is not None)

    @property
    def not_counted(self) -> dict[str, int]:
        return dict(sorted(Counter(_label(n) for n in self.nodes if n.flops is None).items()))

    @property
    def bytes_unknown(self) -> dict[str, int]:
        return dict(sorted(Counter(_label(n) for n in self.nodes if n.bytes_moved is None).items()))

    @property
    def data_movement(self) -> dict[str, int]:
        return dict(sorted(Counter(_label(n) for n in self.nodes if n.kind == "data movement").items()))

    def by_op_type(self) -> dict[str, dict[str, int]]:
        """op type -> {"nodes", "flops", "bytes_moved"} over its counted nodes, most FLOPs first."""
        out: dict[str, dict[str, int]] = {}
        for n in self.nodes:
            row = out.setdefault(_label(n), {"nodes": 0, "flops": 0, "bytes_moved": 0})
            row["nodes"] += 1
            row["flops"] += n.flops or 0
            row["bytes_moved"] += n.bytes_moved or 0
        return dict(sorted(out.items(), key=lambda kv: -kv[1]["flops"]))

    def summary(self) -> dict[str, Any]:
        return {"dims": dict(self.dims), "nodes": len(self.nodes), "flops": self.flops,
                "bytes_moved": self.bytes_moved, "not_counted": self.not_counted,
                "bytes_unknown": self.bytes_unknown, "data_movement": self.data_movement}


def _label(n: NodeCost) -> str:
    return n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}"


# ------------------------------------------------------------------------------------------- graph reading
def graph_cost(model: Any, dims: Mapping[str, int] | None = None, *, source: str = "model") -> GraphCost:
    """FLOPs and bytes moved of every node of `model` (an onnx.ModelProto or a path), with the graph inputs'
    free dimensions set from `dims` ({"batch": 1, "seq": 128}) before shape inference.

    A free input dimension missing from `dims` is a UsageError naming it; local functions are inlined first;
    the nodes of subgraphs (If, Loop, Scan) are not entered: the node is listed as not counted.

    Conventions (every figure below is per output element unless said otherwise):

    - A multiply-add is 2 FLOPs (one multiply, one add): a GEMM of (M, K) x (K, N) is 2*M*N*K FLOPs.
    - Each arithmetic operation, comparison, min/max and elementary function (exp, log, sqrt, erf, tanh, sin...)
      in an op's defining formula counts 1 FLOP, whatever its cost in cycles.
    - Conv: 2 * C_in/groups * prod(kernel) per output element, + 1 with a bias (strides, dilations and padding
      act through the output shape). ConvTranspose: 2 * C_out/groups * prod(kernel) per input element, + 1 per
      output element with a bias. Gemm: 2*M*N*K, + M*N for the bias C, + M*N for alpha != 1, + M*N for beta != 1
      with C. MatMul (batched, broadcast, 1-D): 2*K per output element.
    - Attention is counted through the MatMul, Softmax, Mul/Div and Add nodes it is exported as.
    - LayerNormalization: 7 (mean: 1 add; variance: subtract, square, add; normalise: 1 multiply by 1/std with the
      deviation reused; scale 1; bias 1), 6 without a bias; the per-row scalars (the divisions, eps, sqrt) are
      not counted. InstanceNormalization and GroupNormalization: 7. RMSNormalization / SimplifiedLayer-
      Normalization: 4 (square, add, multiply by 1/rms, scale). com.microsoft SkipLayerNormalization: the
      LayerNorm's 7 (6 without beta) + 1 for the skip add + 1 for the bias when given; SkipSimplified...: 4 + 1
      (+1). BatchNormalization (inference): 2 (one multiply-add with the per-channel constants folded once).
    - Softmax / LogSoftmax: 5 (max, subtract, exp, sum, divide or subtract the log).
    - Reductions: 1 per input element (ReduceSumSquare, ReduceL1, ReduceL2 2; ReduceLogSumExp 2), + 1 per output
      element for ReduceMean's division (and ReduceL2's sqrt, ReduceLogSumExp's log).
    - Pooling: MaxPool prod(kernel) - 1 comparisons per output element; AveragePool prod(kernel) (the adds and the
      division; the whole window, padding included); GlobalAveragePool 1 per input element; GlobalMaxPool 1 per
      input element less 1 per output element.
    - Data movement (Reshape, Transpose, Concat, Slice, Gather, Cast, Where, Expand, Pad, ...) is 0 FLOPs, listed
      by op type as such; any other op is "not counted" and listed by op type: never a silent zero.

    Bytes moved: each node reads each distinct input tensor once (initializers included) and writes each output
    once, at its element type; Shape and Size read metadata only (output bytes only); Gather, GatherElements,
    GatherND and Slice read from their data input only as many bytes as they write (an embedding lookup reads the
    rows it gathers, not the table). This is the unfused traffic: a runtime that fuses nodes or keeps a tensor
    in cache moves less. A node whose tensors' shapes or types are
    unknown after inference has bytes None and is listed.
    """
    model, source = _own_copy(model, source)
    dims = dict(dims or {})
    _fix_input_dims(model, dims, source)
    _fix_output_dims(model, dims)
    inferred = _infer_folded(model, source)
    tensors = _tensor_types(inferred.graph)
    nodes = tuple(node_cost(node, tensors, i) for i, node in enumerate(model.graph.node))
    return GraphCost(nodes=nodes, dims=dims)


def _own_copy(model: Any, source: str) -> tuple[Any, str]:
    """A copy of `model` (an onnx.ModelProto, or a path read; ModelError when unreadable) that may be changed,
    local functions inlined, and the source to name in messages (the path when given one)."""
    import onnx

    if isinstance(model, (str, Path)):
        source = str(model)
        try:
            model = onnx.load(str(model))
        except Exception as exc:  # noqa: BLE001 - a protobuf or file error becomes one line
            raise ModelError(f"{source}: not a readable ONNX model ({type(exc).__name__}: {exc})") from None
    else:
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        model = copy
    if model.functions:
        from onnx import inliner

        model = inliner.inline_local_functions(model)
    return model, source


def _fix_output_dims(model: Any, dims: Mapping[str, int]) -> None:
    """The graph outputs' named dims set from `dims` (others cleared) and the stored value_info dropped, so that
    shape inference works them out at the concrete sizes."""
    del model.graph.value_info[:]  # re-inferred at the concrete sizes
    for out in model.graph.output:
        for d in out.type.tensor_type.shape.dim:
            if d.HasField("dim_param"):
                if d.dim_param in dims:
                    d.dim_value = dims[d.dim_param]
                else:
                    d.Clear()


def _infer_folded(model: Any, source: str) -> Any:
    """`model` shape-inferred, its shape arithmetic (Shape -> Slice -> Range -> Expand) folded to constants and
    inferred again until nothing more folds (at most MAX_FOLD_ROUNDS times)."""
    inferred = _infer(model, source)
    for _ in range(MAX_FOLD_ROUNDS):
        folded = _fold_small_constants(inferred)
        if folded is None:
            break
        inferred = _infer(folded, source)
    return inferred


MAX_FOLD_ROUNDS = 8
FOLD_LIMIT = 1 << 16  # elements: only small tensors (shapes, indices, masks' index grids) are folded


def _infer(model: Any, source: str) -> Any:
    import onnx

    try:
        return onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception as exc:  # noqa: BLE001 - fall back to what the file says: unknown shapes are listed
        import warnings

        warnings.warn(f"{source}: ONNX shape inference failed ({exc}); costs from the shapes the file declares",
                      stacklevel=2)
        return model


def _fold_small_constants(model: Any) -> Any | None:
    """A copy of `model` in which every node computable from small constants (initializers, Constant nodes,
    the Shape of a tensor whose shape is known) is replaced by a Constant node holding its value, so that the
    next shape inference sees the concrete sizes; None when nothing new folds. Only for shape inference: the
    costs are those of the original nodes."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    graph = model.graph
    tensors = _tensor_types(graph)
    known: dict[str, Any] = {t.name: numpy_helper.to_array(t) for t in graph.initializer
                             if math.prod(t.dims) <= FOLD_LIMIT}
    new_nodes, changed = [], False
    for node in graph.node:
        value = _folded_value(node, known, tensors)
        if value is not None and all(np.size(v) <= FOLD_LIMIT for v in value):
            for out, v in zip(node.output, value):
                if out:
                    known[out] = np.asarray(v)
                    new_nodes.append(onnx.helper.make_node("Constant", [], [out],
                                                           value=numpy_helper.from_array(np.asarray(v), out)))
            changed = True
        else:
            new_nodes.append(node)
    if not changed:
        return None
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    out.graph.node.extend(new_nodes)
    return out


def _folded_value(node: Any, known: dict[str, Any], tensors: Mapping[str, Any]) -> list[Any] | None:
    """The outputs of `node` computed from small constants (`known`, by tensor name), None when it cannot be; a
    Constant node's value goes into `known` (it is kept as it is: None)."""
    import numpy as np
    import onnx
    from onnx import numpy_helper
    from onnx.reference import ReferenceEvaluator

    inputs = [i for i in node.input if i]
    if node.op_type == "Constant" and not node.domain:
        for a in node.attribute:
            if a.name == "value" and a.HasField("t"):
                known[node.output[0]] = numpy_helper.to_array(a.t)
    elif node.op_type in ("Shape", "Size") and not node.domain:
        shape = tensors.get(node.input[0], (None, None))[0]
        if shape is not None:
            if node.op_type == "Size":
                return [np.array(math.prod(shape), dtype=np.int64)]
            start, end = _attr(node, "start", 0), _attr(node, "end", None)
            return [np.array(shape[start:end], dtype=np.int64)]
    elif (not node.domain and inputs and all(i in known for i in inputs)
          and not any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute)):
        try:
            return list(ReferenceEvaluator(node).run(None, {i: known[i] for i in inputs}))
        except Exception:  # noqa: BLE001 - an op the reference cannot run stays a node
            return None
    return None


def _fix_input_dims(model: Any, dims: Mapping[str, int], source: str) -> None:
    inits = {t.name for t in model.graph.initializer}
    for inp in model.graph.input:
        if inp.name in inits or not inp.type.HasField("tensor_type"):
            continue
        for i, d in enumerate(inp.type.tensor_type.shape.dim):
            if d.HasField("dim_value"):
                continue
            if d.dim_param and d.dim_param in dims:
                d.dim_value = int(dims[d.dim_param])
            else:
                name = d.dim_param or f"axis {i}"
                raise UsageError(f"{source}: input {inp.name!r} has the free dimension {name!r}: give its size "
                                 f"(known: {', '.join(sorted(dims)) or 'none'})")


TensorInfo = tuple[Shape | None, int | None]  # (shape or None, bytes per element or None)


def _tensor_types(graph: Any) -> dict[str, TensorInfo]:
    out: dict[str, TensorInfo] = {}
    for vi in [*graph.input, *graph.value_info, *graph.output]:
        if not vi.type.HasField("tensor_type"):
            continue
        tt = vi.type.tensor_type
        shape: Shape | None = None
        if tt.HasField("shape") and all(d.HasField("dim_value") for d in tt.shape.dim):
            shape = tuple(int(d.dim_value) for d in tt.shape.dim)
        out[vi.name] = (shape, _itemsize(tt.elem_type))
    for t in graph.initializer:
        out[t.name] = (tuple(int(d) for d in t.dims), _itemsize(t.data_type))
    for node in graph.node:  # Constant nodes: their value's shape, even where inference left it out
        if node.op_type == "Constant" and node.output and node.output[0] not in out:
            for a in node.attribute:
                if a.name == "value" and a.HasField("t"):
                    out[node.output[0]] = (tuple(int(d) for d in a.t.dims), _itemsize(a.t.data_type))
    return out


def _itemsize(elem_type: int) -> int | None:
    import onnx

    if not elem_type:
        return None
    if elem_type == onnx.TensorProto.STRING:
        return None
    try:
        import numpy as np

        return int(np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)).itemsize)
    except (KeyError, TypeError, ValueError):
        return None


# ---------------------------------------------------------------------------------------------- per node
def node_cost(node: Any, tensors: Mapping[str, TensorInfo], index: int = 0) -> NodeCost:
    """The cost of one node, given every tensor's (shape, bytes per element)."""
    name = node.name or f"#{index}"
    domain = node.domain or ""
    op = node.op_type
    shapes = _Shapes(node, tensors)
    nbytes = _bytes(node, tensors)
    if domain not in ("", "ai.onnx", "com.microsoft"):
        return NodeCost(name, op, domain, "not counted", None, nbytes, f"operator domain {domain!r}")
    if op in DATA_MOVEMENT and domain != "com.microsoft":
        return NodeCost(name, op, domain, "data movement", 0, nbytes)
    counter = _COUNTERS.get(op)
    if counter is None:
        return NodeCost(name, op, domain, "not counted", None, nbytes, "no FLOP formula for this op type")
    try:
        flops = counter(node, shapes)
    except _Unknown as why:
        return NodeCost(name, op, domain, "not counted", None, nbytes, str(why))
    return NodeCost(name, op, domain, "compute", int(flops), nbytes)


class _Unknown(Exception):
    """A shape the formula needs is unknown."""


class _Shapes:
    """The node's input and output shapes; a missing one raises _Unknown (the node is then not counted).
    Shape-preserving ops fall back on their first input where inference left an output out (contrib ops)."""

    def __init__(self, node: Any, tensors: Mapping[str, TensorInfo]) -> None:
        self.node, self.tensors = node, tensors

    def has_input(self, i: int) -> bool:
        return len(self.node.input) > i and bool(self.node.input[i])

    def input(self, i: int) -> Shape:
        if not self.has_input(i):
            raise _Unknown(f"input {i} is absent")
        shape = self.tensors.get(self.node.input[i], (None, None))[0]
        if shape is None:
            raise _Unknown(f"the shape of input {self.node.input[i]!r} is unknown")
        return shape

    def output(self, i: int = 0, *, like_input: bool = False) -> Shape:
        name = self.node.output[i] if len(self.node.output) > i else ""
        shape = self.tensors.get(name, (None, None))[0]
        if shape is None and like_input:
            return self.input(0)
        if shape is None:
            raise _Unknown(f"the shape of output {name!r} is unknown")
        return shape

    def n_inputs(self) -> int:
        return sum(1 for i in self.node.input if i)


def _bytes(node: Any, tensors: Mapping[str, TensorInfo]) -> int | None:
    names = [] if node.op_type in _METADATA_ONLY else list(dict.fromkeys(i for i in node.input if i))
    if node.op_type in _READS_WHAT_IT_WRITES and names and node.output:
        names[0] = node.output[0]  # an embedding lookup reads the rows it gathers, not the whole table
    names += [o for o in node.output if o]
    total = 0
    for n in names:
        shape, size = tensors.get(n, (None, None))
        if shape is None or size is None:
            return None
        total += math.prod(shape) * size
    return total


def _attr(node: Any, name: str, default: Any) -> Any:
    import onnx

    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def _numel(shape: Shape) -> int:
    return math.prod(shape)


def _conv(node: Any, s: _Shapes) -> int:
    w_index = {"QLinearConv": 3}.get(node.op_type, 1)
    bias_index = {"QLinearConv": 8, "ConvInteger": -1}.get(node.op_type, 2)
    w = s.input(w_index)
    out = _numel(s.output())
    flops = out * 2 * w[1] * _numel(w[2:])  # W: (C_out, C_in / groups, *kernel)
    if bias_index > 0 and s.has_input(bias_index):
        flops += out
    return flops


def _conv_transpose(node: Any, s: _Shapes) -> int:
    x, w = s.input(0), s.input(1)  # W: (C_in, C_out / groups, *kernel)
    flops = _numel(x) * 2 * w[1] * _numel(w[2:])
    if s.has_input(2):
        flops += _numel(s.output())
    return flops


def _matmul(node: Any, s: _Shapes) -> int:
    a_index, b_index = {"QLinearMatMul": (0, 3)}.get(node.op_type, (0, 1))
    a = s.input(a_index)
    s.input(b_index)
    if node.op_type == "FusedMatMul" and _attr(node, "transA", 0) and len(a) >= 2:
        k = a[-2]
    else:
        k = a[-1]
    out = s.output()
    flops = 2 * _numel(out) * k
    if node.op_type == "FusedMatMul" and _attr(node, "alpha", 1.0) != 1.0:
        flops += _numel(out)
    return flops


def _gemm(node: Any, s: _Shapes) -> int:
    a = s.input(0)
    s.input(1)
    k = a[0] if _attr(node, "transA", 0) else a[1]
    mn = _numel(s.output())
    flops = 2 * mn * k
    if _attr(node, "alpha", 1.0) != 1.0:
        flops += mn
    if s.has_input(2):
        flops += mn
        if _attr(node, "beta", 1.0) != 1.0:
            flops += mn
    return flops


def _elementwise(node: Any, s: _Shapes) -> int:
    per = ELEMENTWISE[node.op_type]
    if node.op_type == "Gelu" and _attr(node, "approximate", b"none") in (b"tanh", "tanh"):
        per = 9
    if node.op_type == "FastGelu" and s.has_input(1):
        per += 1
    return per * _numel(s.output(like_input=True))


def _variadic(node: Any, s: _Shapes) -> int:
    n = s.n_inputs()
    per = n if node.op_type == "Mean" else n - 1
    return per * _numel(s.output())


def _softmax(node: Any, s: _Shapes) -> int:
    return SOFTMAX * _numel(s.output(like_input=True))


def _reduce(node: Any, s: _Shapes) -> int:
    flops = _REDUCE_PER_INPUT[node.op_type] * _numel(s.input(0))
    if node.op_type in _REDUCE_PER_OUTPUT:
        flops += _REDUCE_PER_OUTPUT[node.op_type] * _numel(s.output())
    return flops


def _layer_norm(node: Any, s: _Shapes) -> int:
    op = node.op_type
    n = _numel(s.output(like_input=True))
    if op in ("LayerNormalization", "InstanceNormalization", "GroupNormalization"):
        per = LAYER_NORM if op != "LayerNormalization" or s.has_input(2) else LAYER_NORM - 1
    elif op in ("RMSNormalization", "SimplifiedLayerNormalization"):
        per = RMS_NORM
    elif op == "SkipLayerNormalization":  # input, skip, gamma, beta?, bias?
        per = (LAYER_NORM if s.has_input(3) else LAYER_NORM - 1) + 1 + (1 if s.has_input(4) else 0)
    elif op == "SkipSimplifiedLayerNormalization":  # input, skip, gamma, bias?
        per = RMS_NORM + 1 + (1 if s.has_input(3) else 0)
    elif op == "BatchNormalization":
        if _attr(node, "training_mode", 0):
            raise _Unknown("training-mode BatchNormalization")
        per = BATCH_NORM
    else:  # LpNormalization: |x| or x^2, sum, divide
        per = 3
    return per * n


def _pool(node: Any, s: _Shapes) -> int:
    op = node.op_type
    if op in ("GlobalAveragePool", "GlobalMaxPool"):
        n_in = _numel(s.input(0))
        return n_in if op == "GlobalAveragePool" else n_in - _numel(s.output())
    kernel = _numel(tuple(_attr(node, "kernel_shape", ())))
    if not kernel:
        raise _Unknown("no kernel_shape")
    out = _numel(s.output())
    return out * (kernel - 1 if op == "MaxPool" else kernel)


_COUNTERS: dict[str, Callable[[Any, _Shapes], int]] = {
    **dict.fromkeys(("Conv", "ConvInteger", "QLinearConv"), _conv),
    "ConvTranspose": _conv_transpose,
    **dict.fromkeys(("MatMul", "MatMulInteger", "QLinearMatMul", "FusedMatMul"), _matmul),
    "Gemm": _gemm,
    **dict.fromkeys(ELEMENTWISE, _elementwise),
    **dict.fromkeys(_VARIADIC, _variadic),
    **dict.fromkeys(("Softmax", "LogSoftmax"), _softmax),
    **dict.fromkeys(_REDUCE_PER_INPUT, _reduce),
    **dict.fromkeys(("LayerNormalization", "InstanceNormalization", "GroupNormalization", "RMSNormalization",
                     "SimplifiedLayerNormalization", "SkipLayerNormalization", "SkipSimplifiedLayerNormalization",
                     "BatchNormalization", "LpNormalization"), _layer_norm),
    **dict.fromkeys(("MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"), _pool),
}


def counted_op_types() -> Sequence[str]:
    """The op types with a FLOP formula (data movement aside)."""
    return sorted(_COUNTERS)
