"""`harness compare` and gating at the end of `harness run --baseline` (fake runtimes, generous gates)."""

from __future__ import annotations

import pytest

import json
import subprocess
import sys

from gating_synth import make_run

from harness.cli import main
from harness.gating.scale import scaled_copy
from harness.results import load_results, write_results


def cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], capture_output=True, text=True, env=env,
                          timeout=300)


def test_compare_exit_status_and_outputs(tmp_path, capsys):
    a = write_results(make_run(1), tmp_path / "a")
    b = write_results(make_run(2), tmp_path / "b")
    slow = write_results(make_run(2, scale={"ort-cpu": 1.25}), tmp_path / "slow")
    assert main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[-1].startswith("gate OK: 8 pass of 8 gated timing rows; other rows: 8 drift pass")
    assert "###" not in out and "**" not in out and "&lt;" not in out and "Method:" not in out
    assert main(["compare", str(a), str(b), "--verbose"]) == 0
    assert "Method: the gated latency statistic" in capsys.readouterr().out
    md, js = tmp_path / "v.md", tmp_path / "v.json"
    assert main(["compare", str(a), str(slow), "--markdown", str(md), "--json-out", str(js)]) == 1
    out = capsys.readouterr().out
    assert len([line for line in out.splitlines() if line.startswith("regressed  ")]) == 4 and "gate FAIL: " in out
    assert "❌" not in out and "|" not in out  # plain text on the terminal; Markdown in --markdown
    assert md.read_text().count("| ❌ regressed | `") == 4
    doc = json.loads(js.read_text())
    assert doc["exit_code"] == 1 and {r["case_id"] for r in doc["records"] if r["verdict"] == "regressed"} == {
        "mlp-ort-cpu-fp32-b1", "mlp-ort-cpu-fp32-b4", "resnet18-ort-cpu-fp32-b1", "resnet18-ort-cpu-fp32-b4"}
    assert main(["compare", str(a), str(slow), "--gate", "median:30%"]) == 0  # 25% < 30%
    capsys.readouterr()
    assert main(["compare", str(a), str(slow), "--gate", "median:10"]) == 2
    assert "as a percentage" in capsys.readouterr().err



def test_compare_json_file_is_json_out_and_the_old_spelling_says_so(tmp_path, capsys):
    """--json prints JSON in every other command; compare's FILE is --json-out (#56). `--json FILE` still writes the
    same file for one release, saying --json-out in one line on stderr; the new spelling says nothing."""
    a = write_results(make_run(1), tmp_path / "a")
    b = write_results(make_run(2), tmp_path / "b")
    assert main(["compare", str(a), str(b), "--json", str(tmp_path / "old.json")]) == 0
    assert capsys.readouterr().err.splitlines() == [
        "harness: --json is deprecated and goes in the next release: use --json-out"]
    assert main(["compare", str(a), str(b), "--json-out", str(tmp_path / "new.json")]) == 0
    assert capsys.readouterr().err == ""
    old, new = (json.loads((tmp_path / f).read_text()) for f in ("old.json", "new.json"))
    assert old["records"] == new["records"] and old["exit_code"] == new["exit_code"] == 0

def test_runs_with_no_case_in_common_are_refused_not_ok(tmp_path, capsys):
    run = make_run(1)
    mlp = write_results(run.__class__(**{**run.__dict__, "cases": [c for c in run.cases if c.case.model == "mlp"]}),
                        tmp_path / "mlp")
    resnet = write_results(run.__class__(**{**run.__dict__, "cases": [c for c in run.cases
                                                                      if c.case.model != "mlp"]}), tmp_path / "rn")
    for argv in (["compare", str(mlp), str(resnet)], ["report", str(resnet), "--baseline", str(mlp), "-o",
                                                       str(tmp_path / "rep")]):
        assert main(argv) == 2
        captured = capsys.readouterr()
        assert "gate OK" not in captured.out
        err = captured.err.strip()
        assert len(err.splitlines()) == 1 and err.startswith(f"harness {argv[0]}: error: ")
        assert f"{mlp} and {resnet} have no case in common (baseline 4 case(s), e.g. mlp-" in err, err


def test_scale_script(tmp_path):
    a = write_results(make_run(1, n=50), tmp_path / "a")
    res = subprocess.run([sys.executable, "-m", "harness.gating.scale", str(a), "--runtime", "ort-cpu",
                          "--factor", "1.25", "--out", str(tmp_path / "s")], capture_output=True, text=True)
    assert res.returncode == 0 and "4 ort-cpu case(s) scaled by 1.25" in res.stdout
    orig, scaled = load_results(a), load_results(tmp_path / "s")
    for o, s in zip(orig.cases, scaled.cases):
        f = 1.25 if o.case.runtime == "ort-cpu" else 1.0
        assert s.samples_ns == [int(round(v * f)) for v in o.samples_ns]
        assert abs(s.latency.p50_ms - o.latency.p50_ms * f) < 1e-3


RUN = ["run", "--models", "fake-linear", "--runtimes", "fake-ok,fake-ok-b", "--batch-sizes", "1",
       "--min-time", "0.05", "--min-iters", "20", "--warmup", "2"]


@pytest.mark.e2e
def test_run_with_baseline_gates_at_the_end(fake_env, tmp_path):
    env = {**fake_env, "HARNESS_BASELINE_DIR": str(tmp_path / "baselines")}
    first = cli(*RUN, "--out", str(tmp_path / "a"), env=env)
    assert first.returncode == 0, first.stdout + first.stderr
    assert cli("baseline", "save", str(tmp_path / "a" / "results.json"), "--name", "main", env=env).returncode == 0
    # a generous gate: fake runtimes take microseconds, and this test must not depend on the machine's load
    second = cli(*RUN, "--out", str(tmp_path / "b"), "--baseline", "main", "--gate", "median:400%", env=env)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "gate OK" in second.stdout
    md = (tmp_path / "b" / "verdicts.md").read_text()
    assert md.startswith("### gate OK: ") and "fake-linear-fake-ok-fp32-b1" in md  # the one wording (#52)
    assert "incomplete" not in md  # the run had finished: the gate judges it complete
    assert json.loads((tmp_path / "b" / "verdicts.json").read_text())["exit_code"] == 0
    # a baseline that shares no case with the run: a gate error that says so (exit 2), never "Gate: OK"
    other = cli(*RUN[:4], "fake-ok-b", *RUN[5:], "--out", str(tmp_path / "o"), env=env)
    assert other.returncode == 0, other.stdout + other.stderr
    apart = cli(*RUN[:4], "fake-ok", *RUN[5:], "--out", str(tmp_path / "d"), "--baseline",
                str(tmp_path / "o" / "results.json"), env=env)
    assert apart.returncode == 2, apart.stdout + apart.stderr
    assert "gate: error: " in apart.stdout and "have no case in common" in apart.stdout
    assert "gate OK" not in apart.stdout and not (tmp_path / "d" / "verdicts.md").exists()
    # a baseline 20x faster than anything measured: the next run regresses -> exit status 1
    fast = scaled_copy(load_results(tmp_path / "a"), 0.05, lambda c: c.case.runtime == "fake-ok")
    write_results(fast, tmp_path / "fast")
    third = cli(*RUN, "--out", str(tmp_path / "c"), "--baseline", str(tmp_path / "fast" / "results.json"),
                "--gate", "median:400%", env=env)
    assert third.returncode == 1, third.stdout + third.stderr
    assert "gate FAIL" in third.stdout and "regressed" in third.stdout
    # the confirmation re-measured the regressed case, which still regressed (a 20x faster baseline)
    md = (tmp_path / "c" / "verdicts.md").read_text()
    assert "--confirm 2: 1 case(s) judged regressed at first were measured again" in md and "1 still regressed" in md
    doc = json.loads((tmp_path / "c" / "results.json").read_text())
    [case] = [c for c in doc["cases"] if c["case"]["runtime"] == "fake-ok"]
    assert [b["kind"] for b in case["blocks"]] == ["case", "round", "round", "confirm", "confirm"]
    assert "This gate: not measured on this machine" in (tmp_path / "c" / "report.html").read_text()
    doc = json.loads((tmp_path / "c" / "verdicts.json").read_text())
    assert {r["case_id"] for r in doc["records"] if r["verdict"] == "regressed"} == {"fake-linear-fake-ok-fp32-b1"}
    assert all(c["status"] == "passed" for c in json.loads((tmp_path / "c" / "results.json").read_text())["cases"])
    html = (tmp_path / "c" / "report.html").read_text()  # the run's report carries the verdicts too
    assert "Against the baseline" in html and 'class="l v-regressed">regressed' in html


@pytest.mark.e2e
def test_run_with_a_bad_baseline_is_a_usage_error_before_running(fake_env, tmp_path):
    env = {**fake_env, "HARNESS_BASELINE_DIR": str(tmp_path / "baselines")}
    res = cli(*RUN, "--out", str(tmp_path / "a"), "--baseline", "nope", env=env)
    assert res.returncode == 2 and "no baseline named 'nope'" in res.stderr
    assert not (tmp_path / "a" / "results.json").exists()
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema_version": 1, "run_id"')
    res = cli(*RUN, "--out", str(tmp_path / "a"), "--baseline", str(bad), env=env)
    assert res.returncode == 2 and "bad.json: line 1 column 31: not valid JSON" in res.stderr
    res = cli(*RUN, "--out", str(tmp_path / "a"), "--gate", "median:5%", env=env)
    assert res.returncode == 2 and "need --baseline" in res.stderr


def test_session_gate_error_when_the_baseline_vanished(fakes, tmp_path):

    from harness.config import RunConfig
    from harness.execution.session import HarnessSession

    config = RunConfig.build(models=("fake-linear",), runtimes=("fake-ok",), out_dir=tmp_path / "run",
                       baseline=str(tmp_path / "gone.json"))
    session = HarnessSession(config)
    session.run = make_run(1)
    session._gate()
    assert session.gate_status() == 2 and "gone.json: no such results file" in session.gate_error
    session.config = config.replace(baseline=str(write_results(make_run(2), tmp_path / "b")))
    session.gate_error = None
    session._gate()
    assert session.gate_status() == 0 and session.gate_outputs["verdicts"].name == "verdicts.md"


@pytest.mark.e2e  # harness subprocesses, 10-28 s in CI: the end-to-end tier's rule (#56)
def test_run_with_a_baseline_it_cannot_judge_exits_3_and_says_so_last(fake_env, tmp_path):
    """Issue 39: `harness run --baseline` that judged nothing ended `gate OK` with exit 0. A baseline from another
    machine (its figures say nothing about this one): every gated row unjudged, named in the run's last line,
    exit 3; --allow-unjudged exits 0 with the line still there; summary.md's first line says it."""
    env = {**fake_env, "HARNESS_BASELINE_DIR": str(tmp_path / "baselines")}
    first = cli(*RUN, "--out", str(tmp_path / "a"), env=env)
    assert first.returncode == 0, first.stdout + first.stderr
    elsewhere = load_results(tmp_path / "a")
    elsewhere.environment.cpu_model = "Another CPU 1"
    write_results(elsewhere, tmp_path / "elsewhere")
    base = str(tmp_path / "elsewhere" / "results.json")
    second = cli(*RUN, "--out", str(tmp_path / "b"), "--baseline", base, "--confirm", "0", env=env)
    assert second.returncode == 3, second.stdout + second.stderr
    assert "gate COULD NOT JUDGE" in second.stdout and "gate OK" not in second.stdout
    harness_lines = [line for line in second.stdout.splitlines() if line.strip() and not line.startswith("=")]
    assert harness_lines[-1].startswith("could not judge 2 of 2 gated timing rows (different machine: "), \
        harness_lines[-3:]
    first_line = (tmp_path / "b" / "summary.md").read_text().splitlines()[0]
    assert first_line.startswith("**gate COULD NOT JUDGE: 2 not judged (different machine: 2) of 2 gated timing "
                                 "rows"), first_line
    # the rows not judged still show both runs' figures and their ratio
    rows = json.loads((tmp_path / "b" / "verdicts.json").read_text())["records"]
    assert all(r["ratio"] and r["baseline"] and r["current"] for r in rows if r["unjudged"]), rows
    assert json.loads((tmp_path / "b" / "verdicts.json").read_text())["exit_code"] == 3
    accepted = cli(*RUN, "--out", str(tmp_path / "c"), "--baseline", base, "--confirm", "0", "--allow-unjudged",
                   env=env)
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    assert "accepted (--allow-unjudged)" in accepted.stdout
