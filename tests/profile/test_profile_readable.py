"""The profile a person can read, over generated cases: layers named by module path (or the ONNX name the
exporter kept), never an exporter's node id when a name is known; a roofline with several labelled ticks on each
log axis and every point labelled; one terminal line per profiled case; "over the roof" in summary.md."""

from __future__ import annotations

import math
import random
import re

import pytest

from harness.profile.layers import OpProfile, OpTime, SourceGraph, layer_label, profile_record
from harness.report.charts import _log_tick, log_ticks
from harness.report.profile import peak_rows, roofline_chart, where_time_goes
from harness.report.render import render_markdown
from harness.report.terminal import profile_lines
from harness.results import CaseId, CaseResult, RunResults
from harness.results.stored import ProfileRecord
from harness.results.stored import RunEnvironmentRecord
from fakes import fake_latency

OPS = ("Conv", "Gemm", "Relu", "MaxPool", "Add", "MatMul")
MODULE_METHOD = "torch 2.13 forward hooks on every module, mapped by the export's module scopes"


def _graph(rng: random.Random, n: int) -> list[tuple[str, str, str]]:
    """(exporter node id, op type, module path) of a generated torch export."""
    out = []
    for i in range(n):
        op = rng.choice(OPS)
        out.append((f"node_{op}_{300 + i}", op, f"layer{i // 4 + 1}.{i % 2}.{op.lower()}{i % 3}"))
    return out


def _case(runtime, nodes, *, recorded, method, p50=5.0, roof=None, model="net"):
    total = sum(t for _, _, _, t in nodes)
    records = []
    for node, op, module, t in nodes:
        rec = {"node": node, "op_type": op, "time_ms": t, "share": t / total, "gflops": 1.0, "fusion": "",
               "ops": [module] if "module scopes" in method else [f"{node}_nchwc"]}
        if recorded:
            rec["module"] = module
        records.append(rec)
    profile = {"nodes": records, "unmapped": [], "unmapped_ms": 0.0, "total_ms": total, "measured_p50_ms": p50,
               "gap_percent": 0.0, "method": method, "cost": {"flops": 1e9, "bytes_moved": 1e8},
               "roofline": roof or {}}
    return CaseResult(CaseId(model, runtime, "fp32", 1, None, "cpu"), "passed",
                      latency=fake_latency(p50, 10), samples_ns=[int(p50 * 1e6)] * 10,
                      throughput_sps=200.0, profile=ProfileRecord.from_dict(profile))


def _run(cases):
    return RunResults(run_id="r", started_at="t", environment=RunEnvironmentRecord.from_dict({"machine": "m"}), config={}, cases=cases,
                      complete=True)


@pytest.mark.parametrize("seed", range(10))
def test_layers_are_named_by_module_path_whether_recorded_or_from_a_module_scoped_profile(seed):
    rng = random.Random(seed)
    graph = _graph(rng, rng.randint(3, 30))
    timed = [(n, op, m, rng.uniform(0.01, 3.0)) for n, op, m in graph]
    recorded = rng.random() < 0.5
    cases = [_case("ort-cpu", timed, recorded=recorded, method="onnxruntime enable_profiling"),
             _case("openvino-cpu", timed, recorded=recorded, method="openvino PERF_COUNT")]
    if not recorded:  # older results: only the module-scoped (torch) profile knows the module paths
        cases.append(_case("torch-cpu", timed, recorded=False, method=MODULE_METHOD))
    run = _run(cases)
    (t,) = where_time_goes([run], ["m"])
    module = {n: (m, op) for n, op, m, _ in timed}
    for row in t["rows"]:
        m, op = module[row["node"]]
        assert row["layer"] == f"{m} ({op})" and not row["layer"].startswith("node_")
    lines = profile_lines(run)
    assert len(lines) == len(cases)
    for line, c in zip(lines, cases):
        top = max(c.profile.nodes, key=lambda n: n.time_ms)
        assert line.startswith(f"{c.case.id}: profile: top layer {module[top.node][0]} ")
        assert f"{100 * top.share:.0f}% of the profile" in line and "node_" not in line
    md = render_markdown(run)
    assert all(f"| {row['layer']} " in md for row in t["rows"])


@pytest.mark.parametrize("name,op,module,ops,expected", [
    ("node_Conv_347", "Conv", "layer1.0.conv1", (), "layer1.0.conv1 (Conv)"),
    ("node_Conv_347", "Conv", None, ("layer1.0.conv1", "layer1.0.bn1"), "layer1.0.conv1 + bn1 (Conv)"),
    ("node_Conv_347", "Conv", "layer1.0.bn1", ("layer1.0.conv1", "layer1.0.bn1"), "layer1.0.conv1 + bn1 (Conv)"),
    ("node_Conv_347", "Conv", "layer1.0.bn1", ("stem.0",), "layer1.0.bn1 (Conv)"),  # ops that disagree: the record
    ("node_add", "Add", None, ("fc", "head.proj"), "fc + head.proj (Add)"),
    ("node_Conv_1", "Conv", "stem.1", ("stem.0", "stem.1"), "stem.0 + stem.1 (Conv)"),
    ("p2o.Conv.7", "Conv", None, (), "p2o.Conv.7"),  # a user's exporter kept its names: they are shown
    ("/encoder/layer.0/attention/MatMul", "MatMul", None, (), "/encoder/layer.0/attention/MatMul"),
    ("node_Conv_347", "Conv", None, ("node_Conv_347",), "node_Conv_347 (Conv)"),  # nothing better known
    ("node_linear", "Gemm", "", (), "node_linear (Gemm)"),  # the root module: no path to show
    ("#30", "Conv", None, (), "#30 (Conv)"),  # an unnamed node: at least its kind
])
def test_layer_label(name, op, module, ops, expected):
    assert layer_label(name, op, module, ops) == expected


def test_profile_record_stores_the_module_path_of_each_node_from_the_export_scopes():
    import onnx
    from onnx import TensorProto, helper

    nodes = []
    for i, (op, scope) in enumerate((("Relu", "['', 'stem', 'stem.0']"), ("Relu", "['', 'layer1', 'layer1.0']"))):
        n = helper.make_node(op, [f"t{i}"], [f"t{i + 1}"], name=f"node_{op}_{i}")
        n.metadata_props.add(key="pkg.torch.onnx.name_scopes", value=scope)
        nodes.append(n)
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("t0", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("t2", TensorProto.FLOAT, [2])])
    scopes = SourceGraph.from_model(helper.make_model(g)).scopes
    assert scopes == {"node_Relu_0": "stem.0", "node_Relu_1": "layer1.0"}
    prof = OpProfile((OpTime("k0", "Relu", 10.0, ("node_Relu_0",)), OpTime("k1", "Relu", 30.0, ("node_Relu_1",))),
                     1, 40.0, "m", None)
    rec = profile_record(prof, None, 0.05, None, scopes)
    assert [(n.node, n.module) for n in rec.nodes] == [("node_Relu_0", "stem.0"),
                                                                      ("node_Relu_1", "layer1.0")]
    onnx.checker.check_model(helper.make_model(g))


@pytest.mark.parametrize("seed", range(40))
def test_log_ticks_are_several_and_readable_over_any_range(seed):
    rng = random.Random(seed)
    lo = 10 ** rng.uniform(-9, 9)
    hi = lo * 10 ** rng.uniform(math.log10(4), 12)
    ticks = log_ticks(lo, hi)
    assert 3 <= len(ticks) <= 9, (lo, hi, ticks)
    assert all(lo * (1 - 1e-9) <= t <= hi * (1 + 1e-9) for t in ticks) and ticks == sorted(ticks)
    labels = [_log_tick(t) for t in ticks]
    assert all(labels) and len(set(labels)) == len(labels)


@pytest.mark.parametrize("seed", range(6))
def test_the_roofline_has_several_tick_labels_per_axis_and_every_point_labelled(seed):
    rng = random.Random(seed)
    cases = []
    for i, runtime in enumerate(("ort-cpu", "torch-cpu", "openvino-cpu")[: rng.randint(1, 3)]):
        gflops, intensity = rng.uniform(5, 60), rng.uniform(2, 40)
        roof = {"achieved_gflops": gflops, "achieved_gbs": gflops / intensity, "intensity": intensity,
                "percent_of_roof": gflops, "percent_of_peak": gflops / 1.5, "bound": "compute",
                "over_roof": gflops > 100, "peak_gflops": 150.0, "bandwidth_gbs": 30.0}
        cases.append(_case(runtime, [("node_Conv_1", "Conv", "stem.0", 1.0)], recorded=True, method="m", roof=roof))
    rows = peak_rows([_run(cases)], ["m"])
    svg = roofline_chart(rows)
    texts = [t.strip() for t in re.findall(r"<text[^>]*>([^<]*)</text>", svg)]  # svg.fonttype none: real text
    for c in cases:
        assert f"{c.case.runtime}-fp32-b1" in texts
    ticks = [t for t in texts if re.fullmatch(r"[0-9.e+-]+", t)]
    assert len(ticks) >= 6  # at least three on each axis


def test_over_the_roof_is_said_in_summary_md_and_on_the_terminal():
    roof = {"achieved_gflops": 300.0, "achieved_gbs": 3.0, "intensity": 100.0, "percent_of_roof": 200.0,
            "percent_of_peak": 200.0, "bound": "compute", "over_roof": True, "peak_gflops": 150.0,
            "bandwidth_gbs": 30.0}
    run = _run([_case("ort-cpu", [("node_Conv_1", "Conv", "stem.0", 1.0)], recorded=True, method="m",
                      roof=roof)])
    md = render_markdown(run)
    assert "over the roof" in md
    (line,) = profile_lines(run)
    assert "200% of peak" in line and "over the roof" in line and "stem.0 (Conv)" in line


def test_constant_nodes_are_weights_no_kernel_time_goes_to_them_and_feed_sizes_name_free_dims(tmp_path):
    """paddle2onnx writes weights as Constant nodes and free axes as p2o.DynamicDimension.N: a kernel's walk back
    stops at a Constant (no time credited to it), and the cost gets those axes' sizes from the case's feed."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from harness.workloads.forward.profiling import feed_dims

    w = helper.make_node("Constant", [], ["w"], value=numpy_helper.from_array(np.ones((4, 3, 1, 1), np.float32)))
    conv = helper.make_node("Conv", ["x", "w"], ["y"], name="p2o.Conv.0")
    relu = helper.make_node("Relu", ["y"], ["z"], name="p2o.Relu.0")
    dims = ["p2o.DynamicDimension.0", 3, "p2o.DynamicDimension.1", "p2o.DynamicDimension.2"]
    g = helper.make_graph([w, conv, relu], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g), str(path))
    graph = SourceGraph.from_model(path)
    assert graph.between(["x"], ["z"], kept=set()) == ("p2o.Conv.0", "p2o.Relu.0")  # not the Constant "#0"
    assert feed_dims(path, {"x": np.zeros((2, 3, 48, 320), np.float32)}) == {
        "p2o.DynamicDimension.0": 2, "p2o.DynamicDimension.1": 48, "p2o.DynamicDimension.2": 320}
