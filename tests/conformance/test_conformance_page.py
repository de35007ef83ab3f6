"""The conformance page and summary: whose failure each status is, unsupported apart, the table fits the page."""

from __future__ import annotations

import re

from harness.report.conformance import conformance_html, failures, summary_rows, summary_text
from harness.results.schema import CaseId, RunResults
from harness.workloads.conform.workload import conformance_result
from harness.results.stored import RunEnvironmentRecord

REPLIES = {
    "test_relu": {"status": "passed", "infer_ns": 1000, "max_abs": 0.0, "max_rel": 0.0},
    "test_abs": {"status": "failed", "infer_ns": 1000, "max_abs": 1.0, "max_rel": 1.0,
                 "reason": "output 0: 3 of 3 values over tolerance"},
    "test_sigmoid": {"status": "unsupported", "phase": "load", "reason": "Could not find an implementation"},
    "test_cast_FLOAT_to_STRING": {"status": "conversion", "phase": "convert",
                                  "reason": "the harness's FP16 conversion failed: ValueError: boom"},
    "test_training_dropout": {"status": "nondeterministic", "phase": "accuracy", "infer_ns": 1000,
                              "reason": "training-mode Dropout draws a random mask: values not compared"},
    "test_abs_int": {"status": "skipped", "phase": "convert", "reason": "no FP32 tensor"},
}


def _run() -> RunResults:
    cases = []
    for name, reply in REPLIES.items():
        cid = CaseId(name, "ort-cpu", "fp16", 1, None, "cpu")
        info = {"suite": "onnx-backend", "op": name.split("_")[1].capitalize(), "domain": "ai.onnx", "opset": 13,
                "kind": "node", "test": name,
                "reproduce": f"harness conform --runtimes ort-cpu --precisions fp16 --case {name}"}
        cases.append(conformance_result(info, "f" * 16, cid, {"rtol": 1e-2, "atol": 1e-3, **reply}))
    return RunResults("conform-x", "2026-01-01T00:00:00", RunEnvironmentRecord(), {"onnx": "1.19"}, cases, complete=True)


def test_statuses_say_whose_failure_it_is():
    run = _run()
    assert {c.case.model: c.status for c in run.cases} == {
        "test_relu": "passed", "test_abs": "failed", "test_sigmoid": "skipped", "test_cast_FLOAT_to_STRING": "error",
        "test_training_dropout": "skipped", "test_abs_int": "skipped"}
    (row,) = summary_rows(run)
    # counted: passed, failed, unsupported; not: the harness's conversion, the random case, the FP16 no-op
    assert (row["passed"], row["counted"]) == (1, 3)
    assert [f["test"] for f in failures(run)] == ["test_abs"]
    assert [f["test"] for f in failures(run, ("unsupported",))] == ["test_sigmoid"]
    line = summary_text(run)
    assert line.startswith("ort-cpu fp16: 1/3 passed (33.3%): 1 failed, 1 unsupported, 1 passed")
    assert line.endswith("not counted: 1 skipped, 1 conversion, 1 nondeterministic")


def test_page_lists_unsupported_and_conversion_apart_and_fits():
    html = conformance_html(_run())
    sections = dict(re.findall(r'<h2 id="(\w+)">[^<]*\((\d+)\)</h2>', html))
    assert sections == {"failures": "1", "unsupported": "1", "conversion": "1", "nondeterministic": "1"}
    failures_part = html[html.index('id="failures"'):html.index('id="unsupported"')]
    assert "test_abs" in failures_part and "test_sigmoid" not in failures_part
    assert "test_cast_FLOAT_to_STRING" not in failures_part and "test_training_dropout" not in failures_part
    assert "not charged to the runtime" in html
    # long test names and commands wrap inside a fixed-width table; the wide matrix scrolls in its own box
    assert "table.list { table-layout: fixed; width: 100%; }" in html and "overflow-wrap: anywhere" in html
    assert '<div class="wide"><table>' in html
