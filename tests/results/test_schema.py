"""Results round-trip, atomic writes, and clear errors for unreadable results files."""

from __future__ import annotations

import json
import math

import pytest

from harness.errors import ResultsError
from harness.results import CaseId, CaseResult, RunResults, atomic_write_text, load_results, write_results
from harness.results.schema import SCHEMA_VERSION
from harness.results.stats import latency_stats
from harness.results.stored import RunEnvironmentRecord


def sample_run() -> RunResults:
    c1 = CaseResult(CaseId("mlp", "ort-cpu", "fp32", 4, None, "cpu"), "passed", samples_ns=[10, 12, 11],
                    latency=latency_stats([10, 12, 11]), throughput_sps=4000.0,
                    accuracy={"passed": True, "max_abs": 1e-7, "rel_l2": math.inf})
    c2 = CaseResult(CaseId("bert", "torch-cpu", "fp32", 1, 128, "cpu"), "crashed", phase="run",
                    signal="SIGSEGV", reason="worker killed by SIGSEGV in phase run", stderr_tail="Fatal Python error")
    return RunResults(run_id="r1", started_at="2026-11-23T00:00:00+00:00", environment=RunEnvironmentRecord.from_dict({"machine": "m"}),
                      config={"models": ["mlp"]}, cases=[c1, c2], harness_version="0.1.0")


def test_round_trip(tmp_path):
    run = sample_run()
    path = write_results(run, tmp_path)
    back = load_results(path)
    assert back.schema_version == SCHEMA_VERSION
    assert back.cases[0].case == run.cases[0].case
    assert back.cases[0].samples_ns == [10, 12, 11]
    assert back.cases[1].signal == "SIGSEGV" and back.cases[1].case.seq == 128
    assert back.cases[0].accuracy["rel_l2"] == "inf"  # JSON has no Inf: written as a string
    assert load_results(tmp_path).run_id == "r1"  # a folder works too
    assert back.complete is False


def test_atomic_write_leaves_no_temporary_files(tmp_path):
    atomic_write_text(tmp_path / "a.json", "{}")
    atomic_write_text(tmp_path / "a.json", '{"x": 1}')
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]
    assert json.loads((tmp_path / "a.json").read_text()) == {"x": 1}


@pytest.mark.parametrize("content, message", [
    (None, "no such results file"),
    ('{"schema_version": 1, "run_id": "x"', "not valid JSON (truncated?)"),
    ("[1, 2]", "expected a JSON object"),
    ('{"run_id": "x"}', "no integer schema_version"),
    ('{"schema_version": 999, "run_id": "x"}', "newer than this harness reads"),
    ('{"schema_version": 1}', "run_id: field required"),
])
def test_bad_results_files_give_clear_errors(tmp_path, content, message):
    path = tmp_path / "results.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ResultsError) as info:
        load_results(path)
    assert message in str(info.value) and str(path) in str(info.value)


def test_unknown_status_is_rejected():
    with pytest.raises(ValueError):
        CaseResult(CaseId("m", "r", "fp32", 1, None, "cpu"), "exploded")
