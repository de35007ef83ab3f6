"""harness conform end to end on a fake runtime: each misbehaviour costs exactly its own rows; gating flips."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from harness.cli import main
from harness.config import ConformanceConfig, RunConfig
from harness.errors import UsageError
from harness.execution.session import HarnessSession
from harness.options import opset_bounds
from harness.workloads import get_workload
from harness.workloads.conform.cases import collect, compare_outputs
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
    return collect(ConformanceConfig(ops=OPS, light=False, expanded=False))


@pytest.fixture(scope="module")
def fake_run(cases, tmp_path_factory):
    """The conformance workload through the run session, as `harness conform` drives it: the fake runtime is
    registered here and, through HARNESS_PLUGINS, in the worker."""
    import os

    from conform_fakes import FakeConform

    from harness.runtimes import register_runtime

    register_runtime(FakeConform, replace=True)
    old = os.environ.get("HARNESS_PLUGINS")
    os.environ["HARNESS_PLUGINS"] = "conform_fakes"
    out = tmp_path_factory.mktemp("conform")
    config = RunConfig.build("conform", runtimes=("fake-conform",), ops=OPS, light=False, expanded=False,
                             case_timeout_s=5.0, threads=1, out_dir=out, run_id="conform-test")
    session = HarnessSession(config)
    try:
        for case in get_workload("conform").cases(config):
            session.execute(case)
    finally:
        session.finish(interrupted=False)
        if old is None:
            os.environ.pop("HARNESS_PLUGINS", None)
        else:
            os.environ["HARNESS_PLUGINS"] = old
    return session.run, out


# Not in the e2e tier: its cost is the module's `fake_run`, which test_page_and_summary pays in `pytest tests`
# anyway (in the e2e tier it ran the 8 cases, aborts and timeout again for this test alone).
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
    assert opset_bounds("13:17") == (13, 17) and opset_bounds("13") == (13, 13) and opset_bounds(":9") == (None, 9)
    with pytest.raises(UsageError):
        opset_bounds("x")
    with pytest.raises(UsageError):
        opset_bounds("18:13")


def test_plain_pytest_suite(pytester, cases, tmp_path):
    """The same workload through plain pytest and the plugin's option groups: one test per case."""
    from harness.commands.run import suites_dir

    result = pytester.runpytest_inprocess(str(suites_dir()), "-p", "no:cacheprovider", "--harness-workload",
                                          "conform", "--harness-runtimes", "ort-cpu", "--harness-ops", "Abs,Neg",
                                          "--harness-no-expanded", "--harness-no-light", "--harness-out",
                                          str(tmp_path / "out"), "-q")
    result.assert_outcomes(passed=sum(c.op in ("Abs", "Neg") and c.kind == "node" for c in cases))
    assert (tmp_path / "out" / "conformance.html").is_file() and (tmp_path / "out" / "results.json").is_file()


def test_cli_lists_filters_and_refuses_bad_options(cases, capsys):
    assert main(["conform", "--ops", "abs,neg", "--no-light", "-k", "test_neg_*", "--list"]) == 0
    out = capsys.readouterr().out
    assert "test_neg_example  Neg" in out and "test_abs " not in out and "1 case(s)" in out
    assert main(["conform", "--opset", "18:13", "--list"]) == 2
    assert main(["conform", "--runtimes", "torch-cpu", "--list"]) == 2  # runs no arbitrary ONNX model
    assert "no conformance" in capsys.readouterr().err


def test_harness_report_renders_the_conformance_page(fake_run, tmp_path):
    from harness.workloads import render_report

    run, _ = fake_run
    paths = render_report([run], tmp_path)
    assert paths["conformance"].read_text().count('class="cell ') == len(OPS)
    assert paths["html"].is_file()
    # the two pages of one run folder link to each other
    assert '<a href="conformance.html">' in paths["html"].read_text()
    assert '<a href="report.html">' in paths["conformance"].read_text()
    from harness.report.render import render_html

    assert "conformance.html" not in render_html([run])  # no page beside it: no link


@pytest.mark.e2e
def test_a_terminated_conform_keeps_every_finished_case(tmp_path, fake_env):
    """SIGTERM mid-run: every finished case is in results.json, which says interrupted, and the page is
    rendered, as for `harness run` (the session is the one driver)."""
    import json
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "run"
    env = {**fake_env, "HARNESS_PLUGINS": "conform_fakes"}
    # Abs answers wrong at once; each Relu case hangs until its 60 s timeout: the run is stopped inside one
    proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "conform", "--runtimes", "fake-conform",
                             "--ops", "Abs,Relu,Tanh", "--no-expanded", "--no-light", "--case-timeout", "60",
                             "--out", str(out)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    results = out / "results.json"
    deadline = time.monotonic() + 300  # a bound on a hang only: a loaded machine took over 120 s to the first case
    done = 0
    while time.monotonic() < deadline:
        try:
            done = len(json.loads(results.read_text())["cases"])
        except (OSError, ValueError, KeyError):
            done = 0
        if done >= 1:
            break
        time.sleep(0.2)
    assert done >= 1, proc.stdout.read().decode() if proc.poll() is not None else "no case finished in 300 s"
    time.sleep(1.0)  # inside the hanging Relu case
    proc.send_signal(signal.SIGTERM)
    output = proc.communicate(timeout=180)[0].decode()
    assert proc.returncode == 143, output
    stored = load_results(out)
    assert stored.interrupted and not stored.complete
    assert len(stored.cases) >= done and all(r.case.model.startswith("test_abs") for r in stored.cases[:done])
    assert (out / "conformance.html").is_file()
