"""The pytest plugin driven through pytester: matrix ids, skip reasons, exit status, output files."""

from __future__ import annotations

import json

import pytest

from harness.commands.run import suites_dir

SUITES_DIR = suites_dir()  # this checkout's suites (found by path, as `harness run` finds them)

from harness.results.schema import SCHEMA_VERSION  # noqa: E402 - after the suites folder is found

INI = str(SUITES_DIR / "pytest.ini")
FAST = ["--harness-min-time=0.01", "--harness-min-iters=3", "--harness-warmup=1"]


def run_suite(pytester: pytest.Pytester, out, *args):
    return pytester.runpytest_subprocess(str(SUITES_DIR), "-c", INI, "--rootdir", str(SUITES_DIR), "-rs",
                                         f"--harness-out={out}", *FAST, *args)


@pytest.mark.e2e
def test_passing_matrix_writes_results_and_exits_zero(pytester, fake_env, tmp_path):
    out = tmp_path / "run"
    res = run_suite(pytester, out, "--harness-models=fake-linear", "--harness-runtimes=fake-ok,fake-ok-b",
                    "--harness-batch-sizes=1,3", "-v")
    assert res.ret == 0, res.stdout.str()
    res.stdout.fnmatch_lines(["*test_case?fake-linear-fake-ok-fp32-b1? PASSED*",
                              "*test_case?fake-linear-fake-ok-b-fp32-b3? PASSED*", "*4 passed*"])
    doc = json.loads((out / "results.json").read_text())
    assert doc["complete"] is True and doc["schema_version"] == SCHEMA_VERSION
    assert [c["status"] for c in doc["cases"]] == ["passed"] * 4
    assert doc["environment"]["harness_overhead"]["overhead_p50_ns"] > 0
    for name in ("results.csv", "report.html", "benchmark.json"):
        assert (out / name).is_file()


@pytest.mark.e2e
def test_skips_carry_their_reasons(pytester, fake_env, tmp_path):
    res = run_suite(pytester, tmp_path / "run", "--harness-models=fake-linear",
                    "--harness-runtimes=fake-ok,fake-unavailable", "--harness-precisions=fp32,int8",
                    "--harness-batch-sizes=1")
    assert res.ret == 0
    res.stdout.fnmatch_lines(["*skipped fake-linear-fake-ok-int8-b1  fake-ok does not run int8*",
                              "skipped 1 case: fake-ok does not run int8 (supported: fp16, fp32)",
                              "skipped fake-unavailable: FakeAcceleratorProvider not available: no fake device*"
                              "(2 cases)",
                              "*1 passed, 3 skipped*"])


@pytest.mark.e2e
def test_drift_failure_sets_the_exit_status_and_shows_figures(pytester, fake_env, tmp_path):
    res = run_suite(pytester, tmp_path / "run", "--harness-models=fake-linear",
                    "--harness-runtimes=fake-ok,fake-drift", "--harness-batch-sizes=2")
    assert res.ret == 1
    res.stdout.fnmatch_lines(["*failed  fake-linear-fake-drift-fp32-b2  p50 * drift over tolerance: *rel_l2=*",
                              "*1 passed, 1 case failed*"])
    assert "FAILURES" not in res.stdout.str()  # the harness reported the case: no pytest block for it


def test_unknown_names_are_usage_errors(pytester, fake_env, tmp_path):
    res = run_suite(pytester, tmp_path / "run", "--harness-models=fake-linear,nope")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*unknown model 'nope'; valid models:*fake-linear*"])


@pytest.mark.e2e
def test_plugin_is_inert_without_the_case_fixture(pytester):
    pytester.makepyfile("def test_plain():\n    assert True\n")
    res = pytester.runpytest_subprocess()
    assert res.ret == 0
    assert "inference harness" not in res.stdout.str()
