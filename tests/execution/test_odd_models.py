"""Odd models measured honestly: fixed and absent batch axes, nondeterministic references, allocation failures."""

from __future__ import annotations

import multiprocessing as mp
import os
from pathlib import Path

import numpy as np
import pytest

from harness.config import RunConfig
from harness.execution import CaseRunner
from harness.workloads import get_workload
from harness.results.schema import CaseId, CaseResult
from harness.results.stored import RunEnvironmentRecord


def _onnx(path: Path, nodes, inputs, outputs, initializers=()) -> Path:
    import onnx
    from onnx import helper

    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save_model(model, str(path))
    return path


def _float(name, shape):
    from onnx import TensorProto, helper

    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _config(tmp_path, *paths: Path, batch_sizes: str = "1,4"):
    from harness.options import OPTIONS, parse_run_options

    raw = {o.dest: None for o in OPTIONS}
    raw.update(model=[str(p) for p in paths], runtimes="ort-cpu", batch_sizes=batch_sizes, min_time="0.05",
               min_iters="3", warmup="1", repeats="1", cache_dir=str(tmp_path / "cache"),
               out=str(tmp_path / "out"))
    return parse_run_options(raw)


def _run_all(tmp_path, path: Path, batch_sizes: str = "1,4") -> dict[int, object]:
    config = _config(tmp_path, path, batch_sizes=batch_sizes)
    runner = CaseRunner()
    try:
        return {c.batch: runner.run(c, config) for c in get_workload(config.workload).cases(config)}
    finally:
        runner.close()


def _samples_per_second(result, samples: int) -> float:
    return samples * 1000.0 / result.latency.p50_ms  # throughput is batch / p50


def test_fixed_batch_runs_at_its_size_and_a_contradicting_size_is_a_skip(tmp_path):
    from onnx import helper

    path = _onnx(tmp_path / "fixed1.onnx", [helper.make_node("Relu", ["X"], ["Y"])],
                 [_float("X", [1, 4])], [_float("Y", [1, 4])])
    by_batch = _run_all(tmp_path, path)
    assert sorted(by_batch) == [1, 4]
    b1, b4 = by_batch[1], by_batch[4]
    assert b1.status == "passed", b1.reason
    assert b1.throughput_sps == pytest.approx(_samples_per_second(b1, 1))
    assert b4.status == "skipped" and b4.samples_ns == [] and b4.throughput_sps is None
    assert b4.reason == "fixed1.onnx fixes input 'X' axis 0 at 1; --batch-sizes 4 does not apply"


def test_fixed_batch_not_requested_joins_the_matrix_at_its_own_size(tmp_path):
    from onnx import helper

    path = _onnx(tmp_path / "fixed2.onnx", [helper.make_node("Relu", ["X"], ["Y"])],
                 [_float("X", [2, 4])], [_float("Y", [2, 4])])
    by_batch = _run_all(tmp_path, path, batch_sizes="1,4")
    assert sorted(by_batch) == [1, 2, 4]
    assert [by_batch[b].status for b in (1, 4)] == ["skipped", "skipped"]
    assert "fixes input 'X' axis 0 at 2; --batch-sizes 1 does not apply" in by_batch[1].reason
    b2 = by_batch[2]
    assert b2.status == "passed", b2.reason
    assert b2.throughput_sps == pytest.approx(_samples_per_second(b2, 2))  # two samples per call, not four


def test_model_without_inputs_is_b1_only(tmp_path):
    from onnx import TensorProto, helper

    value = helper.make_tensor("v", TensorProto.FLOAT, [3], [1.0, 2.0, 3.0])
    path = _onnx(tmp_path / "noinput.onnx", [helper.make_node("Constant", [], ["Y"], value=value)],
                 [], [_float("Y", [3])])
    by_batch = _run_all(tmp_path, path)
    assert by_batch[1].status == "passed", by_batch[1].reason
    assert by_batch[1].throughput_sps == pytest.approx(_samples_per_second(by_batch[1], 1))
    assert by_batch[4].status == "skipped"
    assert by_batch[4].reason.startswith("noinput.onnx has no inputs") and "--batch-sizes 4 does not apply" \
        in by_batch[4].reason


def test_scalar_input_model_is_b1_only(tmp_path):
    from onnx import helper, numpy_helper

    two = numpy_helper.from_array(np.array(2.0, dtype=np.float32), name="two")
    path = _onnx(tmp_path / "scalar.onnx", [helper.make_node("Mul", ["X", "two"], ["Y"])],
                 [_float("X", [])], [_float("Y", [])], [two])
    by_batch = _run_all(tmp_path, path, batch_sizes="4,1")
    assert by_batch[1].status == "passed", by_batch[1].reason
    assert by_batch[4].status == "skipped" and "no batch axis" in by_batch[4].reason


def test_nondeterministic_model_is_flagged_not_a_silent_zero_drift(tmp_path):
    from onnx import helper

    from harness.report.terminal import terminal_table
    from harness.results.schema import RunResults

    path = _onnx(tmp_path / "noisy.onnx", [helper.make_node("RandomNormalLike", ["X"], ["R"]),
                                           helper.make_node("Add", ["X", "R"], ["Y"])],
                 [_float("X", ["batch", 8])], [_float("Y", ["batch", 8])])
    r = _run_all(tmp_path, path, batch_sizes="2")[2]
    assert r.is_reference and r.reference_deterministic is False
    assert r.drift_note == "nondeterministic reference"
    assert r.accuracy["max_abs"] > 0.1 and r.status == "failed"
    assert "nondeterministic reference: ort-cpu FP32 gave different outputs on two runs" in r.reason
    assert r.details["reference_repeat_max_abs"] > 0.1
    table = terminal_table(RunResults("r", "t", RunEnvironmentRecord(), {}, cases=[r]))
    assert "(nondeterministic ref)" in table


def test_own_reference_case_reads_reference_not_a_drift_of_zero(tmp_path):
    from onnx import helper

    from harness.report.render import render_html, render_markdown
    from harness.report.terminal import terminal_table
    from harness.results.schema import CaseResult, RunResults

    path = _onnx(tmp_path / "plain.onnx", [helper.make_node("Relu", ["X"], ["Y"])],
                 [_float("X", ["batch", 4])], [_float("Y", ["batch", 4])])
    r = _run_all(tmp_path, path, batch_sizes="2")[2]
    assert r.status == "passed" and r.is_reference and r.reference_deterministic is True
    assert r.drift_note == "reference" and r.as_dict()["is_reference"] is True
    assert CaseResult.from_dict(r.as_dict()).drift_note == "reference"
    run = RunResults("r", "t", RunEnvironmentRecord.from_dict({"machine": "m", "git": {}, "threads": {}, "libraries": {}}),
                     {"models": ["plain"], "runtimes": ["ort-cpu"], "precisions": ["fp32"], "batch_sizes": [2],
                      "seq_lens": [], "timing": {}, "isolation": False}, cases=[r], complete=True)
    line = next(ln for ln in terminal_table(run).splitlines() if r.case.id in ln)
    assert "reference" in line.split() and " 0 " not in f" {line} "
    md_line = next(ln for ln in render_markdown(run).splitlines() if "| plain" in ln)
    assert "| reference" in md_line
    html = render_html(run)
    assert html.count(">reference<") >= 4  # max |diff|, rel L2, cosine, top-1 of the all-cases table


def test_old_results_without_the_fields_still_load():
    from harness.results.schema import CaseResult

    old = CaseResult(CaseId("m", "ort-cpu", "fp32", 1, None, "cpu"), "passed").as_dict()
    del old["is_reference"], old["reference_deterministic"]
    r = CaseResult.from_dict(old)
    assert r.is_reference is False and r.reference_deterministic is None and r.drift_note == ""


def test_an_allocation_beyond_the_machine_is_oom_with_the_size(tmp_path):
    from onnx import helper, numpy_helper

    shape = numpy_helper.from_array(np.array([10**12], dtype=np.int64), name="shape")
    path = _onnx(tmp_path / "greedy.onnx", [helper.make_node("ConstantOfShape", ["shape"], ["big"]),
                                            helper.make_node("ReduceSum", ["big"], ["s"], keepdims=0),
                                            helper.make_node("Add", ["X", "s"], ["Y"])],
                 [_float("X", ["batch", 2])], [_float("Y", ["batch", 2])], [shape])
    r = _run_all(tmp_path, path, batch_sizes="1")[1]
    assert r.status == "oom", r.reason
    assert r.reason.startswith("out of memory in phase warmup: an allocation asked for 3.6 TiB (memory cap")
    assert "\n" not in r.reason and "Failed to allocate memory" in r.reason
    assert r.details["oom_requested_bytes"] == 4 * 10**12


def _die_of_bad_alloc(log: str) -> None:
    import faulthandler

    faulthandler.disable()  # pytest's handler would add a traceback to the test's output
    with open(log, "w") as f:
        f.write("terminate called after throwing an instance of 'std::bad_alloc'\n  what():  std::bad_alloc\n")
    os.abort()


def test_a_worker_that_dies_of_an_allocation_is_oom(tmp_path):
    from harness.execution.supervisor import IsolatedExecutor

    ex = IsolatedExecutor()
    ex._log_path = str(tmp_path / "worker.log")
    ex._proc = mp.get_context("fork").Process(target=_die_of_bad_alloc, args=(ex._log_path,))
    ex._proc.start()
    r = ex._worker_died(CaseId("m", "ort-cpu", "fp32", 1, None, "cpu"), "run", 0,
                        RunConfig.build(case_memory_gb=2.0), 1.5)
    assert r.status == "oom" and r.signal == "SIGABRT" and r.duration_s == 1.5
    assert r.reason == ("out of memory in phase run: an allocation failed (memory cap 2 GiB): what():  "
                        "std::bad_alloc; the worker died (SIGABRT)")


ODD_FACTORIES = '''
import torch
from torch import nn


class Noisy(nn.Module):
    def forward(self, x):
        return x + torch.rand_like(x)  # a fresh draw on every call


class Greedy(nn.Module):
    def forward(self, x):
        return x + torch.empty(2**40).sum()  # 4 TiB of float32


def noisy():
    return Noisy(), {"x": torch.randn(2, 8)}


def greedy():
    return Greedy(), {"x": torch.randn(2, 8)}, {"outputs": ["y"]}
'''


def _run_factory(tmp_path, monkeypatch, name: str, module: str = "odd_factories", source: str = ODD_FACTORIES):
    from harness.options import OPTIONS, parse_run_options

    (tmp_path / f"{module}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    raw = {o.dest: None for o in OPTIONS}
    raw.update(model=[f"{module}:{name}"], runtimes="torch-cpu", batch_sizes="2", min_time="0.02",
               min_iters="3", warmup="1", repeats="1", cache_dir=str(tmp_path / "cache"), out=str(tmp_path / "o"))
    config = parse_run_options(raw)
    (case,) = get_workload(config.workload).cases(config)
    runner = CaseRunner()
    try:
        return runner.run(case, config)
    finally:
        runner.close()


def test_torch_factory_drawing_random_numbers_in_forward_is_flagged(tmp_path, monkeypatch):
    r = _run_factory(tmp_path, monkeypatch, "noisy")
    assert r.reference_runtime == "torch-cpu" and r.is_reference and r.reference_deterministic is False
    assert r.accuracy["max_abs"] > 0 and "nondeterministic reference: torch-cpu FP32" in r.reason


def test_torch_factory_allocating_terabytes_is_oom(tmp_path, monkeypatch):
    r = _run_factory(tmp_path, monkeypatch, "greedy")
    assert r.status == "oom", r.reason
    assert "an allocation asked for 4.0 TiB" in r.reason and r.details["oom_requested_bytes"] == 2**42


def test_factory_whose_forward_runs_out_of_memory_at_registration_is_oom(tmp_path, monkeypatch):
    source = ODD_FACTORIES + '''

def greedy_probe():
    return Greedy(), {"x": torch.randn(2, 8)}  # no meta outputs: registration calls forward to name them
'''
    r = _run_factory(tmp_path, monkeypatch, "greedy_probe", "odd_probe", source)
    assert r.status == "oom" and r.phase == "load", r.reason
    assert r.reason.startswith("out of memory in phase load: an allocation asked for 4.0 TiB")
    assert "--model odd_probe:greedy_probe: forward(**example_inputs) raised" in r.reason


def test_repeat_difference_matches_nan_and_inf_and_flags_the_rest():
    from harness.workloads.forward.workload import repeat_max_abs

    a = {"y": np.array([1.0, np.nan, np.inf], np.float32)}
    assert repeat_max_abs(a, {"y": a["y"].copy()}) == 0.0
    assert repeat_max_abs(a, {"y": np.array([1.5, np.nan, np.inf], np.float32)}) == 0.5
    assert repeat_max_abs(a, {"y": np.array([1.0, 0.0, np.inf], np.float32)}) == np.inf  # NaN in one run only
    assert repeat_max_abs(a, {"z": a["y"]}) == np.inf and repeat_max_abs(a, {"y": a["y"][:2]}) == np.inf
    assert repeat_max_abs({"i": np.array([1, 2])}, {"i": np.array([1, 5])}) == 3.0
    assert repeat_max_abs({"b": np.array([True])}, {"b": np.array([False])}) == 1.0


def test_a_worker_result_the_strict_reader_refuses_costs_its_row_only(monkeypatch):
    """The parent reads each worker's result with the one strict reader: a figure it refuses (a NaN
    duration) is that case's `error` row naming the problem, never an exception out of the run."""
    from harness.execution.supervisor import IsolatedExecutor

    case = CaseId("m", "fake-ok", "fp32", 1, None, "cpu")
    ex = IsolatedExecutor()
    monkeypatch.setattr(ex, "_environment", lambda case, config: None)
    good = CaseResult(case, "passed").as_dict()
    monkeypatch.setattr(ex, "_exchange", lambda *a, **k: dict(good))
    assert ex.run(case, RunConfig.build()).status == "passed"
    monkeypatch.setattr(ex, "_exchange", lambda *a, **k: {**good, "duration_s": float("nan")})
    r = ex.run(case, RunConfig.build())
    assert r.status == "error" and r.phase == "results" and "refused" in r.reason and "duration_s" in r.reason, r
