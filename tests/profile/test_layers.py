"""Per-op profiles mapped onto ONNX nodes: an ONNX Runtime profile with fused nodes (a hand-written trace and
optimized graph), OpenVINO's originalLayersNames, torch module scopes, and exact per-op times."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from harness.profile.flops import graph_cost
from harness.profile.layers import OpProfile, OpTime, SourceGraph, layer_times, profile_record, top_layers
from harness.runtimes.onnxruntime import ort_profile_ops
from harness.runtimes.openvino import openvino_profile_ops
from harness.runtimes.torch_eager import torch_module_ops

F = TensorProto.FLOAT


def _model(nodes, inputs, outputs, inits=()):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, F, s) for n, s in inputs],
                              [helper.make_tensor_value_info(n, F, s) for n, s in outputs],
                              [numpy_helper.from_array(np.ones(s, np.float32), n) for n, s in inits])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


def source_graph():
    """x -> Conv(w, b) -> Relu -> Flatten -> MatMul(m) -> Add(bias) -> y"""
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="/conv/Conv", kernel_shape=[3, 3], pads=[1] * 4),
             helper.make_node("Relu", ["c"], ["r"], name="/relu/Relu"),
             helper.make_node("Flatten", ["r"], ["f"], name="/flatten/Flatten"),
             helper.make_node("MatMul", ["f", "m"], ["mm"], name="/fc/MatMul"),
             helper.make_node("Add", ["mm", "bias"], ["y"], name="/fc/Add")]
    return _model(nodes, [("x", [1, 2, 4, 4])], [("y", [1, 5])],
                  [("w", (3, 2, 3, 3)), ("b", (3,)), ("m", (48, 5)), ("bias", (5,))])


def optimized_graph():
    """What ONNX Runtime's optimizer makes of it: Conv+Relu fused (FusedConv, named by ORT), MatMul+Add fused
    into a Gemm keeping the Add's output, Flatten unchanged, and a layout node ORT added."""
    nodes = [helper.make_node("ReorderInput", ["x"], ["x_nchwc"], name="reorder_token_7", domain="com.microsoft.nchwc"),
             helper.make_node("FusedConv", ["x", "w", "b"], ["r"], name="fused /conv/Conv", domain="com.microsoft"),
             helper.make_node("Flatten", ["r"], ["f"], name="/flatten/Flatten"),
             helper.make_node("Gemm", ["f", "m", "bias"], ["y"], name="/fc/MatMul_Add_fusion")]
    return _model(nodes, [("x", [1, 2, 4, 4])], [("y", [1, 5])],
                  [("w", (3, 2, 3, 3)), ("b", (3,)), ("m", (48, 5)), ("bias", (5,))])


def _run(ts, dur):
    return {"cat": "Session", "name": "model_run", "ts": ts, "dur": dur}


def _kernel(node, op, ts, dur):
    return {"cat": "Node", "name": f"{node}_kernel_time", "ts": ts, "dur": dur, "args": {"op_name": op}}


def ort_trace():
    """A warm-up run (slow, must not count), then two runs: FusedConv 100+120 us, Flatten 2+2, Gemm 30+34,
    the reorder 5+7; fence events and non-Node events are ignored."""
    trace = [_run(0, 1000), _kernel("fused /conv/Conv", "FusedConv", 10, 900)]
    for start, (conv, flat, gemm, reorder) in ((2000, (100, 2, 30, 5)), (3000, (120, 2, 34, 7))):
        trace += [_run(start, 400), _kernel("reorder_token_7", "ReorderInput", start + 1, reorder),
                  _kernel("fused /conv/Conv", "FusedConv", start + 10, conv),
                  {"cat": "Node", "name": "fused /conv/Conv_fence_before", "ts": start + 9, "dur": 0},
                  _kernel("/flatten/Flatten", "Flatten", start + 200, flat),
                  _kernel("/fc/MatMul_Add_fusion", "Gemm", start + 250, gemm)]
    return trace


def test_ort_profile_with_fused_nodes_maps_onto_the_source_nodes():
    src = source_graph()
    ops = {o.name: o for o in ort_profile_ops(ort_trace(), optimized_graph(), src, runs=2)}
    assert ops["fused /conv/Conv"].covers == ("/conv/Conv", "/relu/Relu")
    assert ops["fused /conv/Conv"].fusion == "FusedConv" and ops["fused /conv/Conv"].time_us == 110.0
    assert ops["/flatten/Flatten"].covers == ("/flatten/Flatten",) and ops["/flatten/Flatten"].fusion == ""
    assert ops["/fc/MatMul_Add_fusion"].covers == ("/fc/MatMul", "/fc/Add")
    assert ops["/fc/MatMul_Add_fusion"].time_us == 32.0
    assert ops["reorder_token_7"].covers == () and ops["reorder_token_7"].time_us == 6.0

    cost = graph_cost(src)
    table = layer_times(OpProfile(tuple(ops.values()), 2, 200.0, "test"), cost)
    by = {r["node"]: r for r in table["nodes"]}
    assert [r["node"] for r in table["nodes"]] == ["/conv/Conv", "/relu/Relu", "/flatten/Flatten", "/fc/MatMul",
                                                   "/fc/Add"]  # graph order
    flops = {n.name: n.flops for n in cost.nodes}
    conv_share = flops["/conv/Conv"] / (flops["/conv/Conv"] + flops["/relu/Relu"])
    assert by["/conv/Conv"]["time_us"] == pytest.approx(110.0 * conv_share)
    assert by["/conv/Conv"]["time_us"] + by["/relu/Relu"]["time_us"] == pytest.approx(110.0)
    assert by["/relu/Relu"]["fusion"] == "FusedConv" and by["/fc/Add"]["fusion"] == "Gemm"
    assert by["/fc/MatMul"]["ops"] == ["/fc/MatMul_Add_fusion"]
    assert table["unmapped"] == [{"name": "reorder_token_7", "op_type": "ReorderInput", "time_us": 6.0}]
    assert table["total_us"] == pytest.approx(110 + 2 + 32 + 6)
    assert table["mapped_us"] == pytest.approx(144.0)


def test_a_node_the_optimizer_renamed_maps_by_the_source_name_it_contains():
    src = source_graph()
    opt = optimized_graph()
    opt.graph.node[1].output[0] = "r_nchwc"  # a layout-changed output: no source tensor to walk back from
    ops = {o.name: o for o in ort_profile_ops(ort_trace(), opt, src, runs=2)}
    assert ops["fused /conv/Conv"].covers == ("/conv/Conv",)


def test_fake_profiler_times_come_out_exactly():
    times = {"/conv/Conv": 123.25, "/relu/Relu": 4.5, "/flatten/Flatten": 0.75, "/fc/MatMul": 17.0, "/fc/Add": 1.0}
    prof = OpProfile(tuple(OpTime(n, "", t, (n,)) for n, t in times.items()), 3, 150.0, "fake")
    cost = graph_cost(source_graph())
    table = layer_times(prof, cost)
    assert {r["node"]: r["time_us"] for r in table["nodes"]} == times
    assert table["total_us"] == sum(times.values()) and table["unmapped"] == []
    rec = profile_record(prof, cost, measured_p50_ms=0.2, roofline=None)
    assert {r.node: r.time_ms for r in rec.nodes} == {n: t / 1e3 for n, t in times.items()}
    assert rec.total_ms == pytest.approx(sum(times.values()) / 1e3)
    assert rec.gap_percent == pytest.approx(100 * (sum(times.values()) / 1e3 - 0.2) / 0.2)
    conv = next(r for r in rec.nodes if r.node == "/conv/Conv")
    flops = next(n.flops for n in cost.nodes if n.name == "/conv/Conv")
    assert conv.gflops == pytest.approx(flops / 123.25e-6 / 1e9)
    top, rest = top_layers(rec.nodes, 2)
    assert [r.node for r in top] == ["/conv/Conv", "/fc/MatMul"] and rest == pytest.approx(6.25e-3)


def test_openvino_counts_map_through_original_layer_names():
    counts = {"/conv/Conv": ("Convolution", "brgconv_avx2_FP32", 50.0), "x": ("Parameter", "unknown_FP32", 0.0),
              "/fc/Add": ("FullyConnected", "gemm_avx2_FP32", 9.0), "reorder": ("Reorder", "ref_any", 1.5)}
    original = {"/conv/Conv": "/conv/Conv,/relu/Relu", "/fc/Add": "/fc/MatMul,y"}  # y: a tensor of /fc/Add
    ops = {o.name: o for o in openvino_profile_ops(counts, original, source_graph())}
    assert "x" not in ops  # did not run
    assert ops["/conv/Conv"].covers == ("/conv/Conv", "/relu/Relu")
    assert ops["/conv/Conv"].fusion == "Convolution (brgconv_avx2_FP32)"
    assert ops["/fc/Add"].covers == ("/fc/MatMul", "/fc/Add")
    assert ops["reorder"].covers == ()


def test_torch_module_self_times_map_onto_the_scopes_the_exporter_recorded():
    m = source_graph()
    # as torch.onnx (dynamo) records them: the enclosing modules' paths, then the node's own op; the Conv node
    # carries the BatchNorm's scope (the export folded conv + bn into it)
    scopes = {"/conv/Conv": ["", "bn", "batch_norm"], "/relu/Relu": ["", "act", "relu"],
              "/flatten/Flatten": ["", "flatten"], "/fc/MatMul": ["", "head", "head.fc", "linear"],
              "/fc/Add": ["", "head", "head.fc", "linear"]}
    for node in m.graph.node:
        for key, value in (("pkg.torch.onnx.name_scopes", scopes[node.name]),
                           ("pkg.torch.onnx.class_hierarchy", ["Net"] + ["torch.nn.X"] * (len(scopes[node.name]) - 2)
                            + ["aten.op.default"])):
            p = node.metadata_props.add()
            p.key, p.value = key, repr(value)
    graph = SourceGraph.from_model(m)
    assert graph.scopes["/fc/Add"] == "head.fc" and graph.scopes["/flatten/Flatten"] == ""
    assert graph.scopes["/conv/Conv"] == "bn"
    self_us = {"": 3.0, "conv": 40.0, "bn": 1.5, "act": 2.0, "head": 0.5, "head.fc": 8.0}  # first-call order
    kinds = {"": "Net", "conv": "Conv2d", "bn": "BatchNorm2d", "act": "ReLU", "head": "Sequential",
             "head.fc": "Linear"}
    ops = {o.name: o for o in torch_module_ops(self_us, kinds, graph)}
    assert ops["(root)"].covers == ("/flatten/Flatten",) and ops["bn"].covers == ("/conv/Conv",)
    assert ops["conv"].covers == ("/conv/Conv",)  # folded into the BatchNorm after it
    assert ops["conv"].fusion == "module Conv2d folded into BatchNorm2d by the export"
    assert ops["head.fc"].covers == ("/fc/MatMul", "/fc/Add") and ops["head.fc"].fusion == "module Linear"
    assert ops["head"].covers == ()  # a container's own time: unmapped
    table = layer_times(OpProfile(tuple(ops.values()), 1, 60.0, "hooks"), graph_cost(m))
    assert {r["node"]: r["time_us"] for r in table["nodes"]}["/conv/Conv"] == 41.5
    assert table["unmapped_us"] == 0.5


def test_passes_merge_into_one_profile_weighted_by_their_runs():
    from harness.profile.layers import merge_profiles

    a = OpProfile((OpTime("k", "Conv", 10.0, ("n",)), OpTime("r", "Reorder", 1.0)), 2, 12.0, "m")
    b = OpProfile((OpTime("k", "Conv", 16.0, ("n",)),), 1, 18.0, "m")
    merged = merge_profiles([a, b])
    assert merged.runs == 3 and merged.wall_us == 14.0 and merged.method == "m, in 2 passes"
    assert {o.name: o.time_us for o in merged.ops} == {"k": 12.0, "r": 2.0 / 3}
