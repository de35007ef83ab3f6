"""harness conform end to end on a fake runtime: each misbehaviour costs exactly its own rows; gating flips."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from harness.cli import main
from harness.conformance.cases import CaseFilter, collect, compare_outputs, parse_opset
from harness.errors import UsageError
from harness.execution.conformance import ConformanceConfig, run_conformance
from harness.gating.compare import compare_runs
from harness.gating.conformance import conformance_status
from harness.gating.verdicts import Verdict
from harness.report.conformance import conformance_html, summary_text
from harness.results.schema import load_results
from harness.results.store import write_results

OPS = ("Abs", "Neg", "Relu", "Sigmoid", "Tanh")
WANT = {"Abs": "failed", "Neg": "crashed", "Relu": "timeout", "Sigmoid": "unsupported", "Tanh": "passed"}


@pytest.fixture(scope="module")
def cases():
    # ONNX's own node cases of the installed onnx (not the *_expanded ones: one hang, one timeout to wait for)
    return collect(CaseFilter(ops=OPS, light=False, expanded=False))


@pytest.fixture(scope="module")
def fake_run(cases, tmp_path_factory):
    from conform_fakes import FakeConform

    out = tmp_path_factory.mktemp("conform")
    run = run_conformance(cases, ConformanceConfig(case_timeout_s=5.0), out, runtimes=[FakeConform])
    return run, out


def test_each_misbehaviour_costs_exactly_its_rows(cases, fake_run):
    run, out = fake_run
    assert run.complete and len(run.cases) == len(cases)
    assert {c.op for c in cases} == set(OPS)
    by_op = {c.name: c.op for c in cases}
    got = {(by_op[r.case.model], conformance_status(r)) for r in run.cases}
    assert got == set(WANT.items())  # every row of an operator carries its operator's status, nothing else
    crashed = [r for r in run.cases if r.status == "crashed"]
    assert crashed and all(r.signal == "SIGABRT" for r in crashed)
    failed = next(r for r in run.cases if r.status == "failed")
    info = failed.details["conformance"]
    assert info["max_abs"] == pytest.approx(1.0) and info["rtol"] == 1e-3 and "over tolerance" in failed.reason
    refused = next(r for r in run.cases if conformance_status(r) == "unsupported")
    assert refused.status == "skipped" and "Could not find an implementation" in refused.reason
    stored = load_results(out)  # the strict reader accepts the run folder
    assert Counter(conformance_status(r) for r in stored.cases) == Counter(conformance_status(r) for r in run.cases)
    assert stored.config["onnx"] and stored.config["onnx_opset"] >= 13


def test_page_and_summary(fake_run):
    run, _ = fake_run
    html = conformance_html(run)
    assert 'class="cell failed" title="failed 1"' in html
    assert "harness conform --runtimes fake-conform --precisions fp32 --case test_neg" in html
    assert "crashed" in html and "timeout" in html
    assert "fake-conform fp32:" in summary_text(run)


def test_compare_flags_the_new_failure(fake_run, tmp_path):
    run, out = fake_run
    base = load_results(out)
    for r in base.cases:  # the baseline: Abs passed, Relu failed
        op = r.details["conformance"]["op"]
        if op == "Abs":
            r.status, r.details["conformance"]["status"], r.samples_ns = "passed", "passed", [1000]
        if op == "Relu":
            r.status, r.details["conformance"]["status"], r.samples_ns = "failed", "failed", [1000]
    cmp = compare_runs(base, run)
    verdicts = {r.case.model: r.verdict for r in cmp.records}
    ops = {r.case.model: r.details["conformance"]["op"] for r in run.cases}
    assert {v for k, v in verdicts.items() if ops[k] == "Abs"} == {Verdict.REGRESSED}
    assert {v for k, v in verdicts.items() if ops[k] == "Tanh"} == {Verdict.PASS}
    assert {v for k, v in verdicts.items() if ops[k] == "Relu"} == {Verdict.BROKE}  # failed -> timeout
    assert cmp.exit_code == 1
    write_results(base, tmp_path / "base")
    base.cases = [r for r in base.cases if r.details["conformance"]["op"] != "Relu"]
    assert main(["compare", str(tmp_path / "base"), str(out)]) == 1
    fixed = compare_runs(run, base)  # the reverse: failed then passed is fixed
    assert {r.verdict for r in fixed.records if ops[r.case.model] == "Abs"} == {Verdict.FIXED}


def test_compare_outputs_rules():
    e = np.array([1.0, np.nan, np.inf], dtype=np.float32)
    assert compare_outputs([e], [e.copy()], 1e-3, 1e-7)["ok"]
    assert "dtype" in compare_outputs([e], [e.astype(np.float64)], 1e-3, 1e-7)["reason"]
    assert "shape" in compare_outputs([e], [e[:2]], 1e-3, 1e-7)["reason"]
    off = compare_outputs([e], [np.array([1.01, np.nan, np.inf], dtype=np.float32)], 1e-3, 1e-7)
    assert not off["ok"] and off["max_abs"] == pytest.approx(0.01, rel=1e-3)
    assert compare_outputs([[e]], [[e]], 1e-3, 1e-7)["ok"] and compare_outputs([None], [None], 0, 0)["ok"]


def test_filters():
    assert parse_opset("13:17") == (13, 17) and parse_opset("13") == (13, 13) and parse_opset(":9") == (None, 9)
    with pytest.raises(UsageError):
        parse_opset("x")
    with pytest.raises(UsageError):
        parse_opset("18:13")


def test_plain_pytest_suite(pytester, cases):
    """suites/conformance by path with plain pytest: one test per case; -k and --conform-ops filter."""
    from harness.cli import suites_dir

    suite = suites_dir() / "conformance" / "conform_onnx_backend.py"
    result = pytester.runpytest_inprocess(str(suite), "-p", "no:cacheprovider", "--conform-runtimes", "ort-cpu",
                                          "--conform-ops", "Abs,Neg", "-k", "not expanded", "-q")
    result.assert_outcomes(passed=sum(c.op in ("Abs", "Neg") and c.kind == "node" for c in cases))


def test_cli_lists_filters_and_refuses_bad_options(cases, capsys):
    assert main(["conform", "--ops", "abs,neg", "--no-light", "-k", "test_neg_*", "--list"]) == 0
    out = capsys.readouterr().out
    assert "test_neg_example  Neg" in out and "test_abs " not in out and "1 case(s)" in out
    assert main(["conform", "--opset", "18:13", "--list"]) == 2
    assert main(["conform", "--runtimes", "torch-cpu", "--list"]) == 2  # runs no arbitrary ONNX model
    assert "no conformance" in capsys.readouterr().err


def test_harness_report_renders_the_conformance_page(fake_run, tmp_path):
    from harness.report import write_outputs

    run, _ = fake_run
    paths = write_outputs([run], tmp_path)
    assert paths["conformance"].read_text().count('class="cell ') == len(OPS)
    assert paths["html"].is_file()
    # the two pages of one run folder link to each other
    assert '<a href="conformance.html">' in paths["html"].read_text()
    assert '<a href="report.html">' in paths["conformance"].read_text()
    from harness.report.render import render_html

    assert "conformance.html" not in render_html([run])  # no page beside it: no link
