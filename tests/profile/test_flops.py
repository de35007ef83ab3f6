"""FLOP and byte counts of hand-built ONNX graphs against analytic values, one per counted op kind."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from harness.errors import UsageError
from harness.profile.flops import graph_cost

F = TensorProto.FLOAT


def _model(nodes, inputs, outputs, inits=(), opset=20, domains=()):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                              [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
                              [numpy_helper.from_array(np.zeros(s, dtype=d), n) for n, s, d in inits])
    ops = [helper.make_opsetid("", opset), *(helper.make_opsetid(d, 1) for d in domains)]
    return helper.make_model(graph, opset_imports=ops)


def _one(model, dims=None):
    cost = graph_cost(model, dims or {})
    assert len(cost.nodes) >= 1
    return cost.nodes[0], cost


def test_conv_with_groups_stride_dilation_and_bias():
    # x (N=2, C=8, 17, 17), W (16, 8/2, 3, 3), groups 2, stride 2, dilation 2, pad 1 -> (2, 16, 8, 8)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], group=2, strides=[2, 2], dilations=[2, 2],
                            pads=[1, 1, 1, 1], kernel_shape=[3, 3])
    m = _model([node], [("x", F, ["batch", 8, 17, 17])], [("y", F, None)],
               [("w", (16, 4, 3, 3), np.float32), ("b", (16,), np.float32)])
    n, cost = _one(m, {"batch": 2})
    out = 2 * 16 * 8 * 8  # floor((17 + 2 - 2*(3-1) - 1) / 2) + 1 = 8
    assert n.flops == out * (2 * 4 * 9 + 1)
    assert n.bytes_moved == 4 * (2 * 8 * 17 * 17 + 16 * 4 * 9 + 16 + out)
    assert cost.flops == n.flops and cost.not_counted == {}


def test_batched_matmul_with_broadcast():
    # (2, 3, 5, 7) @ (7, 4): B broadcast over the batch dims -> (2, 3, 5, 4)
    m = _model([helper.make_node("MatMul", ["a", "b"], ["y"])], [("a", F, [2, 3, 5, 7])], [("y", F, None)],
               [("b", (7, 4), np.float32)])
    n, _ = _one(m)
    assert n.flops == 2 * 2 * 3 * 5 * 4 * 7
    assert n.bytes_moved == 4 * (2 * 3 * 5 * 7 + 7 * 4 + 2 * 3 * 5 * 4)
    # (1, 5, 7) @ (3, 7, 4): A broadcast -> (3, 5, 4); a 1-D vector @ (7, 4) -> (4,)
    m = _model([helper.make_node("MatMul", ["a", "b"], ["y"])], [("a", F, [1, 5, 7]), ("b", F, [3, 7, 4])],
               [("y", F, None)])
    assert _one(m)[0].flops == 2 * 3 * 5 * 4 * 7
    m = _model([helper.make_node("MatMul", ["a", "b"], ["y"])], [("a", F, [7])], [("y", F, None)],
               [("b", (7, 4), np.float32)])
    assert _one(m)[0].flops == 2 * 4 * 7


def test_gemm_with_trans_b_and_bias():
    # A (batch=3, 10), B (6, 10) transposed, C (6,): 2*M*N*K + M*N; alpha != 1 adds M*N more
    for alpha, extra in ((1.0, 0), (0.5, 3 * 6)):
        node = helper.make_node("Gemm", ["a", "b", "c"], ["y"], transB=1, alpha=alpha)
        m = _model([node], [("a", F, ["batch", 10])], [("y", F, None)],
                   [("b", (6, 10), np.float32), ("c", (6,), np.float32)])
        n, _ = _one(m, {"batch": 3})
        assert n.flops == 2 * 3 * 6 * 10 + 3 * 6 + extra
        assert n.bytes_moved == 4 * (3 * 10 + 6 * 10 + 6 + 3 * 6)


def test_layer_norm_softmax_and_pooling():
    ln = helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1)
    m = _model([ln], [("x", F, [2, 16, 32])], [("y", F, None)], [("g", (32,), np.float32), ("b", (32,), np.float32)])
    n, _ = _one(m)
    assert n.flops == 7 * 2 * 16 * 32
    assert n.bytes_moved == 4 * (2 * 2 * 16 * 32 + 2 * 32)
    ln = helper.make_node("LayerNormalization", ["x", "g"], ["y"], axis=-1)  # no bias: 6 per element
    m = _model([ln], [("x", F, [2, 16, 32])], [("y", F, None)], [("g", (32,), np.float32)])
    assert _one(m)[0].flops == 6 * 2 * 16 * 32

    m = _model([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], [("x", F, [4, 8, 8])], [("y", F, None)])
    n, _ = _one(m)
    assert (n.flops, n.bytes_moved) == (5 * 256, 4 * 2 * 256)

    mp = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    m = _model([mp], [("x", F, [1, 4, 16, 16])], [("y", F, None)])
    assert _one(m)[0].flops == 4 * 8 * 8 * (9 - 1)
    ap = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2])
    m = _model([ap], [("x", F, [1, 4, 16, 16])], [("y", F, None)])
    assert _one(m)[0].flops == 4 * 8 * 8 * 4
    m = _model([helper.make_node("GlobalAveragePool", ["x"], ["y"])], [("x", F, [2, 4, 7, 7])], [("y", F, None)])
    n, _ = _one(m)
    assert (n.flops, n.bytes_moved) == (2 * 4 * 49, 4 * (2 * 4 * 49 + 2 * 4))


def test_batch_norm_instance_norm_and_skip_layer_norm():
    bn = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"])
    m = _model([bn], [("x", F, [2, 3, 4, 4])], [("y", F, None)],
               [(k, (3,), np.float32) for k in ("s", "b", "m", "v")])
    assert _one(m)[0].flops == 2 * 2 * 3 * 16
    inorm = helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"])
    m = _model([inorm], [("x", F, [2, 3, 4, 4])], [("y", F, None)], [(k, (3,), np.float32) for k in ("s", "b")])
    assert _one(m)[0].flops == 7 * 2 * 3 * 16
    # com.microsoft SkipLayerNormalization (input, skip, gamma, beta, bias): 7 + skip add + bias add per element;
    # ONNX shape inference does not know the contrib op: the output shape falls back on the input's
    sln = helper.make_node("SkipLayerNormalization", ["x", "skip", "g", "b", "bias"], ["y"], domain="com.microsoft")
    m = _model([sln], [("x", F, [2, 8, 32]), ("skip", F, [2, 8, 32])], [("y", F, [2, 8, 32])],
               [(k, (32,), np.float32) for k in ("g", "b", "bias")], domains=["com.microsoft"])
    n, _ = _one(m)
    assert n.flops == 9 * 2 * 8 * 32
    assert n.bytes_moved == 4 * (3 * 2 * 8 * 32 + 3 * 32)


def test_elementwise_ops_per_element():
    for op, per in (("Add", 1), ("Mul", 1), ("Relu", 1), ("Erf", 1), ("Tanh", 1), ("Sigmoid", 4), ("Gelu", 5)):
        ins = ["x", "x2"] if op in ("Add", "Mul") else ["x"]
        inputs = [("x", F, [3, 5])] + ([("x2", F, [5])] if len(ins) == 2 else [])  # broadcast second input
        m = _model([helper.make_node(op, ins, ["y"])], inputs, [("y", F, None)])
        n, _ = _one(m)
        assert n.flops == per * 15, op
        assert n.bytes_moved == 4 * (15 + 15 + (5 if len(ins) == 2 else 0)), op
    # the same tensor read twice is read once
    m = _model([helper.make_node("Mul", ["x", "x"], ["y"])], [("x", F, [3, 5])], [("y", F, None)])
    assert _one(m)[0].bytes_moved == 4 * 30


def test_unknown_op_is_listed_not_counted_and_data_movement_is_zero():
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0]),
             helper.make_node("Hardmax", ["t"], ["h"]),
             helper.make_node("Add", ["h", "h"], ["y"])]
    m = _model(nodes, [("x", F, [4, 6])], [("y", F, None)])
    cost = graph_cost(m, {})
    kinds = {n.op_type: (n.kind, n.flops) for n in cost.nodes}
    assert kinds == {"Transpose": ("data movement", 0), "Hardmax": ("not counted", None), "Add": ("compute", 24)}
    assert cost.not_counted == {"Hardmax": 1} and cost.data_movement == {"Transpose": 1}
    assert cost.flops == 24 and cost.bytes_moved == 3 * 2 * 24 * 4  # each node: one tensor in (Add reads h once), one out
    assert cost.summary()["not_counted"] == {"Hardmax": 1}
    custom = helper.make_node("Frobnicate", ["x"], ["y"], domain="org.example")
    m = _model([custom], [("x", F, [4, 6])], [("y", F, [4, 6])], domains=["org.example"])
    assert graph_cost(m, {}).not_counted == {"org.example.Frobnicate": 1}


def test_free_dimension_without_a_size_is_one_line():
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, ["batch", 4])], [("y", F, None)])
    with pytest.raises(UsageError, match="free dimension 'batch'"):
        graph_cost(m, {})


def test_shape_arithmetic_is_folded_to_sizes():
    """Shape -> Gather -> Range -> Expand (as torch exports position ids): the later nodes get concrete shapes."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "one"], ["seq"], axis=0),
             helper.make_node("Range", ["zero", "seq", "step"], ["r"]),
             helper.make_node("Cast", ["r"], ["rf"], to=F),
             helper.make_node("Add", ["x", "rf"], ["y"])]
    inits = [numpy_helper.from_array(np.array(v, dtype=np.int64), n) for n, v in (("one", 1), ("zero", 0),
                                                                                 ("step", 1))]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, ["batch", "seq"])],
                              [helper.make_tensor_value_info("y", F, None)], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    cost = graph_cost(m, {"batch": 2, "seq": 9})
    add = cost.nodes[-1]
    assert (add.op_type, add.flops, add.bytes_moved) == ("Add", 18, 4 * (18 + 9 + 18))
    assert cost.not_counted == {"Range": 1} and cost.bytes_unknown == {}
    assert len(onnx.load_from_string(m.SerializeToString()).graph.node) == 5  # the caller's model is untouched


def test_gather_reads_the_rows_it_gathers_not_the_table():
    node = helper.make_node("Gather", ["table", "ids"], ["y"], axis=0)
    m = _model([node], [("ids", TensorProto.INT64, [2, 5])], [("y", F, None)], [("table", (1000, 16), np.float32)])
    n, _ = _one(m)
    assert (n.kind, n.flops) == ("data movement", 0)
    assert n.bytes_moved == 2 * (2 * 5 * 16 * 4) + 2 * 5 * 8  # rows read + rows written + the indices


def test_conv_transpose_and_gemm_trans_a():
    # x (1, 4, 5, 5), W (4, 6/2, 3, 3), groups 2, stride 2 -> (1, 6, 11, 11): 2 * C_out/g * k per input element
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], group=2, strides=[2, 2], kernel_shape=[3, 3])
    m = _model([node], [("x", F, [1, 4, 5, 5])], [("y", F, None)],
               [("w", (4, 3, 3, 3), np.float32), ("b", (6,), np.float32)])
    assert _one(m)[0].flops == 4 * 25 * 2 * 3 * 9 + 6 * 11 * 11
    node = helper.make_node("Gemm", ["a", "b"], ["y"], transA=1)  # A (K=10, M=3), B (10, 6), no bias
    m = _model([node], [("a", F, [10, 3])], [("y", F, None)], [("b", (10, 6), np.float32)])
    assert _one(m)[0].flops == 2 * 3 * 6 * 10
