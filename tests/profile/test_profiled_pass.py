"""--profile end to end on a fake runtime: the profiled pass runs after the timed loop (never inside it), its
per-op times come out exactly in the stored case, a runtime without a profiler says why, and the roofline point
uses the graph's cost and the (injected) ceilings."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper, save

from harness.execution.worker import CaseRunner
from harness.options import parse_run_options
from harness.profile.layers import OpProfile, OpTime
from harness.runtimes import register_runtime
from harness.workloads import get_workload

CEILINGS = {"peak_gflops": {"fp32": 100.0}, "bandwidth_gbs": 10.0,
            "compute": [{"precision": "fp32", "best": 100.0, "method": "fake GEMM"}],
            "bandwidth": {"method": "fake triad"}}
TIMES = {"fc": 30.5, "act": 2.25}  # us per inference, what the fake profiler reports


def _graph(path):
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="fc"), helper.make_node("Relu", ["h"], ["y"], name="act")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])],
                          [numpy_helper.from_array(np.ones((8, 8), np.float32), "w")])
    save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)]), str(path))
    return path


@pytest.fixture
def runtimes(fakes, tmp_path):
    graph = _graph(tmp_path / "fake.onnx")

    class Profiled(fakes.FakeOk):
        """Logs each inference with whether a profiler was on; its profiled pass reports TIMES."""

        name: ClassVar[str] = "fake-profiled"
        log: ClassVar[list[str]] = []
        profiling = False

        def _infer(self, prepared: Any) -> dict[str, np.ndarray]:
            type(self).log.append("profiled" if self.profiling else "plain")
            return super()._infer(prepared)

        def _profile(self, feed: Any, runs: int) -> OpProfile:
            self.profiling = True
            try:
                for _ in range(runs):
                    self._infer(dict(feed))
            finally:
                self.profiling = False
            return OpProfile(tuple(OpTime(f"k_{n}", "Kernel", t, (n,)) for n, t in TIMES.items()), runs, 40.0,
                             "fake profiler", graph)

        def cost_graph(self):
            return graph

    class Unprofiled(fakes.FakeOk):
        name: ClassVar[str] = "fake-unprofiled"
        cannot_profile: ClassVar[str] = "a fake without a profiler"

        def cost_graph(self):
            return graph

    register_runtime(Profiled, replace=True)
    register_runtime(Unprofiled, replace=True)
    Profiled.log.clear()
    return Profiled


def _run(tmp_path, runtime, profile=True):
    raw = {"models": "fake-linear", "runtimes": runtime, "batch_sizes": "2", "min_time": "0", "min_iters": "7",
           "warmup": "0", "repeats": "1", "cache_dir": str(tmp_path), "out": str(tmp_path / "out")}
    if profile:
        raw["profile"] = True
    config = parse_run_options(raw)
    assert config.measure.profile is profile
    runner = CaseRunner()
    try:
        state = runner.state(config.workload)
        state.profiler._measure_ceilings = lambda threads: CEILINGS
        [case] = get_workload(config.workload).cases(config)
        return runner.run(case, config)
    finally:
        runner.close()


def test_the_profiled_pass_runs_after_the_timed_loop_and_its_times_come_out_exactly(runtimes, tmp_path):
    r = _run(tmp_path, "fake-profiled")
    assert r.status == "passed", r.reason
    log = runtimes.log
    runs = r.profile.runs
    assert log.count("profiled") == runs >= 5
    # after the timed loop (and everything else): unprofiled and profiled chunks alternating, as many calls each
    tail = log[-2 * runs:]
    assert tail.count("plain") == tail.count("profiled") == runs and tail[0] == "plain" and tail[-1] == "profiled"
    assert "profiled" not in log[:-2 * runs]  # no timed call was profiled
    assert len(r.samples_ns) >= 7 and log[:-2 * runs].count("plain") >= len(r.samples_ns)
    assert r.profile.adjacent_p50_ms > 0 and r.profile.method.endswith("passes")
    p = r.profile
    assert {n.node: n.time_ms for n in p.nodes} == {n: t / 1e3 for n, t in TIMES.items()}
    assert p.total_ms == pytest.approx(sum(TIMES.values()) / 1e3) and p.unmapped == []
    assert p.measured_p50_ms == r.latency.p50_ms
    assert p.gap_percent == pytest.approx(100 * (p.total_ms - r.latency.p50_ms) / r.latency.p50_ms)
    flops = 2 * 2 * 8 * 8 + 2 * 8  # MatMul (2 x 8) x (8 x 8), then Relu on 16 elements
    assert p.cost.flops == flops
    fc = next(n for n in p.nodes if n.node == "fc")
    assert fc.gflops == pytest.approx(2 * 2 * 8 * 8 / 30.5e-6 / 1e9)
    roof = p.roofline
    assert roof.flops == flops and roof.peak_gflops == 100.0 and roof.peak_method == "fake GEMM"
    assert roof.latency_s == pytest.approx(r.latency.p50_ms / 1e3)
    assert roof.bound in ("compute", "memory") and roof.percent_of_peak > 0


def test_without_profile_no_profiled_pass_runs(runtimes, tmp_path):
    r = _run(tmp_path, "fake-profiled", profile=False)
    assert r.status == "passed" and r.profile is None and "profiled" not in runtimes.log


def test_a_runtime_without_a_profiler_says_why_and_keeps_its_roofline(runtimes, tmp_path):
    r = _run(tmp_path, "fake-unprofiled")
    assert r.status == "passed"
    assert r.profile.unsupported == "fake-unprofiled cannot profile: a fake without a profiler"
    assert "nodes" not in r.profile.as_dict() and r.profile.roofline.percent_of_roof > 0


# ------------------------------------------------------------------ cost bounded by the graph's size
def _chain(n: int):
    """A model of `n` nodes in a chain (Neg/Relu alternating), each named, as exporters write large graphs."""
    x = "x"
    nodes = []
    for i in range(n):
        nodes.append(helper.make_node("Relu" if i % 2 else "Neg", [x], [f"h{i}"], name=f"n{i}"))
        x = f"h{i}"
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 16])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("n", [20_000])
def test_mapping_a_profile_of_a_large_graph_costs_in_proportion_to_it(n):
    """ONNX Runtime's events for every node of a 20,000-node graph mapped onto it, and the per-layer table: a few
    seconds (the quadratic walk took over 100 s, past --case-timeout, and the case lost its p50)."""
    import time

    from harness.profile.layers import layer_times
    from harness.runtimes.onnxruntime import ort_profile_ops

    model = _chain(n)
    events = [{"cat": "Session", "name": "model_run", "ts": 0, "dur": 10 ** 9}]
    events += [{"cat": "Node", "name": f"n{i}_kernel_time", "ts": 1 + i, "dur": 2, "args": {"op_name": "Relu"}}
               for i in range(n)]

    class Cost:
        nodes = [type("N", (), {"name": f"n{i}", "flops": 16, "op_type": "Relu"})() for i in range(n)]

    t0 = time.perf_counter()
    ops = ort_profile_ops(events, model, model, 1)
    table = layer_times(OpProfile(ops, 1, 1.0, "test"), Cost())
    took = time.perf_counter() - t0
    assert len(ops) == n and all(op.covers == (op.name,) for op in ops[:100])
    assert len(table["nodes"]) == n and table["nodes"][0]["node"] == "n0"
    assert took < 20, f"{took:.1f} s for {n} nodes"


@pytest.mark.parametrize("p50_ms, nodes, runs", [
    (1.0, None, 200), (1.0, 10, 200), (1.0, 20_001, 9), (1.0, 2_000, 100), (50.0, 20_001, 9),
    (500.0, 20_001, 5), (1.0, 10 ** 7, 1), (0.0, 20_001, 5), (1.0, 0, 200),
])
def test_the_profiled_runs_are_held_to_a_number_of_node_executions(p50_ms, nodes, runs):
    from harness.workloads.forward.profiling import profile_runs

    assert profile_runs(p50_ms, nodes) == runs


@pytest.mark.parametrize("pass_s, budget_s, passes_done", [(4.0, 10.0, 2), (1.0, 10.0, 4), (20.0, 10.0, 1),
                                                           (3.0, 9.0, 3), (3.0, 8.9, 2)])
def test_a_profile_stops_before_a_pass_that_would_end_past_its_budget(pass_s, budget_s, passes_done):
    """Passes timed on a fake clock: the profile keeps those done and says it was cut short; the case's figures
    come out either way."""
    from harness.results.schema import CaseId
    from harness.workloads.forward.profiling import CaseProfiler

    now = [0.0]
    done = []

    class Fake:
        device = "cpu"

        def cost_graph(self):
            raise RuntimeError("no graph here")

        def bind(self, feed):
            return lambda: None

        def synchronize(self):
            pass

        def profile(self, feed, runs):
            now[0] += pass_s
            done.append(runs)
            return OpProfile((OpTime("a", "Relu", 5.0, ("a",), ""),), runs, 6.0, "fake")

    case = CaseId("m", "fake-ok", "fp32", 1, None, "cpu")
    out = CaseProfiler().profile(Fake(), {}, case, p50_ms=1.0, threads=1, dims={}, budget_s=budget_s,
                                 clock=lambda: now[0])
    assert len(done) == passes_done and out.error is None
    cut = [n for n in out.notes if n.startswith("profile cut short")]
    assert bool(cut) == (passes_done < 4)
    if cut:
        assert f"{passes_done} of 4 passes" in cut[0] and f"its {budget_s:g} s budget" in cut[0]


def test_the_profile_budget_is_a_share_of_the_case_timeout():
    from harness.workloads.forward.profiling import profile_budget_s

    assert profile_budget_s(600) == 120 and profile_budget_s(60) == 15 and profile_budget_s(4) == 1
