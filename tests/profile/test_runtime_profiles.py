"""The real profilers on the zoo's mlp: every op of ORT, OpenVINO and torch eager maps onto the FP32 export's
nodes (nothing unmapped but a runtime's own layout ops), and runtimes without a profiler say why."""

from __future__ import annotations

import pytest

from harness.artifacts import ArtifactCache
from harness.data import make_feed
from harness.model import get_model
from harness.precision import Precision
from harness.profile.flops import graph_cost
from harness.profile.layers import CannotProfile, layer_times
from harness.runtimes import RuntimeOptions, get_runtime


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return ArtifactCache(tmp_path_factory.mktemp("cache"))


@pytest.mark.parametrize("name", ["ort-cpu", "openvino-cpu", "torch-cpu"])
def test_a_real_profile_maps_onto_the_graph(name, cache):
    cls = get_runtime(name)
    if not cls.availability():
        pytest.skip(cls.availability().reason)
    spec = get_model("mlp")
    feed = make_feed(spec, {"batch": 2}, seed=0)
    with cls(spec, Precision.FP32, RuntimeOptions(threads=1, cache=cache)) as rt:
        rt.infer(feed)
        prof = rt.profile(feed, 5)
        graph = rt.cost_graph()
    assert prof.runs == 5 and prof.wall_us > 0 and prof.graph == graph
    cost = graph_cost(graph, {"batch": 2})
    table = layer_times(prof, cost)
    matmuls = [n.name for n in cost.nodes if n.op_type in ("MatMul", "Gemm")]
    timed = {r["node"] for r in table["nodes"]}
    assert matmuls and set(matmuls) <= timed  # every layer got its time
    assert table["mapped_us"] >= 0.5 * table["total_us"] > 0


@pytest.mark.parametrize("name", ["tvm-cpu", "litert-cpu", "torchscript-cpu", "torch-compile-cpu"])
def test_runtimes_without_a_profiler_say_why(name):
    cls = get_runtime(name)
    assert not cls.can_profile() and cls.cannot_profile
    rt = cls.__new__(cls)
    rt._active, rt.name = True, cls.name
    with pytest.raises(CannotProfile, match=f"{name} cannot profile: "):
        rt.profile({}, 1)
