"""Progress on a terminal (a live line) and off it (one line per case), the one-line case errors with their
log file, and the grouped skips and noise lines of the terminal summary."""

from __future__ import annotations

import io
import os
import pty
import select
import subprocess
import sys
import time

import pytest

from harness.report.progress import RunProgress, case_line, noise_lines, skipped_lines
from harness.results.schema import CaseId, CaseResult, RunResults
from harness.results.stored import CaseContentionRecord
from harness.results.stored import RunEnvironmentRecord
from fakes import fake_latency

FAST = ["--min-time", "0.05", "--min-iters", "3", "--warmup", "1", "--repeats", "1"]


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def _passed(model: str, runtime: str, p50: float, cv: float = 0.01, noisy: bool = False) -> CaseResult:
    return CaseResult(CaseId(model, runtime, "fp32", 1, None, "cpu"), "passed",
                      latency=fake_latency(p50, p99_ms=p50 * 1.1, cv=cv * 3, rcv=cv, noisy=noisy))


def test_plain_progress_prints_one_line_per_unit_with_i_of_n_and_no_escape_codes():
    out, clock = io.StringIO(), FakeClock()
    progress = RunProgress(out, live=False, clock=clock)
    progress.start("case", 2)
    progress.begin("mlp-ort-cpu-fp32-b1")
    clock.t += 1.5
    progress.end(case_line(_passed("mlp", "ort-cpu", 0.031)))
    progress.begin("mlp-torch-cpu-fp32-b1")
    clock.t += 2.0
    broken = CaseResult(CaseId("mlp", "torch-cpu", "fp32", 1, None, "cpu"), "error", phase="load",
                        reason="ValueError in phase load: model file is garbage\nsecond line")
    progress.end(case_line(broken, "reports/x/logs/mlp-torch-cpu-fp32-b1.log"))
    lines = out.getvalue().splitlines()
    assert lines == [
        "[1/2] passed  mlp-ort-cpu-fp32-b1  p50 0.031 ms  rcv 0.01  (1.5 s)",
        "[2/2] error   mlp-torch-cpu-fp32-b1 in phase load: ValueError in phase load: model file is garbage  "
        "(log: reports/x/logs/mlp-torch-cpu-fp32-b1.log)  (2.0 s)"]
    assert "\x1b" not in out.getvalue()


def test_the_status_line_names_the_case_i_of_n_elapsed_and_what_is_left():
    clock = FakeClock()
    progress = RunProgress(io.StringIO(), live=False, clock=clock)
    progress.start("case", 4)
    progress.begin("a")
    assert progress.status_line() == "case 1/4 a · elapsed 0:00"  # no estimate before a case finished
    for label in ("a", "b"):
        progress.begin(label)
        clock.t += 10
        progress.end(label)
    progress.begin("c")
    clock.t += 4
    # 2 cases took 10 s each: 2 more to go (c, d) at 10 s, of which c has run 4 s
    assert progress.status_line() == "case 3/4 c · elapsed 0:24 · ~0:16 left"


def test_skips_are_grouped_per_unavailable_runtime_and_noisy_cases_are_named(fakes):
    run = RunResults(run_id="r", started_at="", environment=RunEnvironmentRecord.from_dict({"cpu_busy_percent_at_start": 97.0,
                                                            "cpu_quiet_at_start": False,
                                                            "cpu_busy_others_percent": 40.0}),
                     config={"noise_cv": 0.1})
    for b in (1, 2, 3):
        run.cases.append(CaseResult(CaseId("fake-linear", "fake-unavailable", "fp32", b, None, "cpu"), "skipped",
                                    reason="FakeAcceleratorProvider not available: no fake device on this machine"))
    run.cases.append(_passed("fake-linear", "fake-ok", 1.0, cv=0.4, noisy=True))
    assert skipped_lines(run) == ["skipped fake-unavailable: FakeAcceleratorProvider not available: no fake device "
                                  "on this machine (3 cases)"]
    lines = noise_lines(run)
    assert lines[0].startswith("CPU busy at start: 97%")
    assert lines[1].startswith("CPU busy during the run: other processes used 40%")
    assert lines[2] == "noisy (robust cv > 0.1): 1 case(s): fake-linear-fake-ok-fp32-b1 (rcv 0.40)"
    run.cases[-1].contention = CaseContentionRecord(contended=True, cause="1 thread(s): waited 70%")
    run.environment.add(threads={"harness_threads": 2}, cpu_cores_free_at_start=0.6)
    lines = noise_lines(run)
    assert lines[2] == ("--threads 2 with 0.6 core(s) free at the start: a thread pool of more threads than free "
                        "cores waits whole scheduler slices at its barriers (stalls at multiples of ~24 ms were "
                        "measured); rerun with --threads 1 or on a quiet machine")
    assert lines[4] == (
        "contended: 1 case(s) measured while the machine kept the worker from the CPU (compare, gates and qualify "
        "call their figures inconclusive): fake-linear-fake-ok-fp32-b1: 1 thread(s): waited 70%")


def _run_args(out, *runtimes):
    return [sys.executable, "-m", "harness.cli", "run", "--models", "fake-linear", "--runtimes",
            ",".join(runtimes), "--batch-sizes", "1", "--out", str(out), *FAST]


@pytest.mark.e2e
def test_off_a_terminal_each_finished_case_is_one_plain_line_and_errors_point_at_their_log(fake_env, tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run(_run_args(out, "fake-ok", "fake-raises", "fake-segv-load", "fake-unavailable"),
                          env=fake_env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    text = proc.stdout
    assert "\x1b[" not in text
    assert "[1/4] passed  fake-linear-fake-ok-fp32-b1  p50 " in text
    raised = [ln for ln in text.splitlines() if ln.startswith("[2/4] error   fake-linear-fake-raises-fp32-b1")]
    assert len(raised) == 1 and "in phase load: ValueError" in raised[0] and "model file is garbage" in raised[0]
    log = raised[0].split("(log: ")[1].split(")")[0]
    assert os.path.isfile(log) and os.path.dirname(log) == str(out / "logs")
    assert 'raise ValueError("model file is garbage")' in open(log).read()  # the traceback is in the log
    crashed = [ln for ln in text.splitlines() if ln.startswith("[3/4] crashed fake-linear-fake-segv-load-fp32-b1")]
    assert len(crashed) == 1 and "SIGSEGV" in crashed[0] and "(log: " in crashed[0]
    # the worker's traceback and faulthandler dump are in the log files, not the terminal; no FAILURES block
    assert "Traceback" not in text and "Fatal Python error" not in text and "FAILURES" not in text
    # the unavailable runtime: one line with its reason, not a row per case
    assert text.count("fake-unavailable") == 2  # its progress line and the grouped summary line
    assert "skipped fake-unavailable: FakeAcceleratorProvider not available" in text


def _read_pty(master: int, proc: subprocess.Popen, timeout: float) -> bytes:
    data, deadline = b"", time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            data += chunk
        elif proc.poll() is not None:
            break
    return data


@pytest.mark.e2e
def test_on_a_terminal_a_live_line_shows_the_case_i_of_n_and_elapsed(fake_env, tmp_path):
    out = tmp_path / "run"
    master, slave = pty.openpty()
    env = {**fake_env, "TERM": "xterm", "COLUMNS": "200"}
    proc = subprocess.Popen(_run_args(out, "fake-slow", "fake-ok"), env=env, stdin=subprocess.DEVNULL,
                            stdout=slave, stderr=slave, close_fds=True)
    os.close(slave)
    try:
        text = _read_pty(master, proc, timeout=180).decode("utf-8", "replace")
    finally:
        os.close(master)
    assert proc.wait(timeout=30) == 0, text
    assert "\x1b[" in text  # the live line is drawn and erased with terminal control sequences
    assert "case 1/2 fake-linear-fake-slow-fp32-b1 · elapsed 0:0" in text
    assert "case 2/2 fake-linear-fake-ok-fp32-b1" in text
    assert "[1/2] passed  fake-linear-fake-slow-fp32-b1  p50 " in text
    assert "[2/2] passed  fake-linear-fake-ok-fp32-b1  p50 " in text


@pytest.mark.e2e
@pytest.mark.parametrize("runtime", ["fake-unavailable"])
def test_a_named_unavailable_runtime_is_one_summary_line(fake_env, tmp_path, runtime):
    out = tmp_path / "run"
    proc = subprocess.run([*_run_args(out, runtime, "fake-ok")[:-len(FAST)], "--batch-sizes", "1,2,3", *FAST],
                          env=fake_env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = proc.stdout.split("inference harness")[1]
    assert summary.count(runtime) == 1  # no table row per skipped case; the report keeps them all
    assert "(3 cases)" in summary
    from harness.results import load_results

    assert sum(c.status == "skipped" for c in load_results(out).cases) == 3


def test_summary_md_says_the_cpu_was_busy_and_names_the_noisy_cases(fakes):
    from harness.report.render import render_markdown

    run = RunResults(run_id="r", started_at="", environment=RunEnvironmentRecord.from_dict({"cpu_busy_percent_at_start": 3.0,
                                                            "cpu_quiet_at_start": True,
                                                            "cpu_busy_others_percent": 55.0}),
                     config={"noise_cv": 0.1}, complete=True)
    run.cases.append(_passed("fake-linear", "fake-ok", 1.0, cv=0.4, noisy=True))
    md = render_markdown(run)
    assert "### Noise" in md
    assert "- CPU busy during the run: other processes used 55%" in md
    assert "fake-linear-fake-ok-fp32-b1 (rcv 0.40)" in md
    assert "CPU busy at start" not in md  # 3% at the start was quiet


def _measured(lat: dict, blocks: int = 1, reason: str = "", status: str = "passed") -> CaseResult:
    case = CaseId("mlp", "ort-cpu", "fp32", 1, None, "cpu")
    return CaseResult(case, status, reason=reason, samples_ns=[1_000_000] * 5,
                      latency=fake_latency(2.71, 5, **lat),
                      blocks=[{"samples_ns": [1_000_000] * 5, "warmup_iters": 1}] * blocks)


@pytest.mark.parametrize("lo, hi, shown", [
    (None, None, "(CI needs more samples)"), (float("-inf"), float("inf"), "(CI needs more samples)"),
    (2.5, None, "[2.5, n/a]"), (2.5, float("inf"), "[2.5, n/a]"), (None, 2.9, "[n/a, 2.9]"),
    (float("nan"), 2.9, "[n/a, 2.9]"), (2.5, 2.9, "[2.5, 2.9]"),
])
def test_a_case_line_never_prints_an_unbounded_interval_as_infinities(lo, hi, shown):
    line = case_line(_measured({"p50_ci_low_ms": lo, "p50_ci_high_ms": hi, "ci_level": 0.95}))
    assert f"p50 2.71 ms {shown}  rcv" in line and "inf" not in line


def test_the_final_table_says_what_its_p50_is_over_when_cases_have_several_blocks():
    from harness.report.terminal import terminal_table

    run = RunResults(run_id="r", started_at="", cases=[_measured({}, blocks=3)])
    assert "p50/p99: over all of a case's samples, its 3 blocks (--repeats) together" in terminal_table(run)
    one = RunResults(run_id="r", started_at="", cases=[_measured({}, blocks=1)])
    assert "blocks (--repeats)" not in terminal_table(one)
    # a Ctrl-C left one case with 1 block of 2: never "its 2 blocks" for it
    mixed = RunResults(run_id="r", started_at="", cases=[_measured({}, blocks=2), _measured({}, blocks=1)])
    text = terminal_table(mixed)
    assert "its 2 blocks" not in text and "its blocks (1-2 per case: an interrupted case has fewer)" in text


@pytest.mark.parametrize("depth", [1, 4, 12])
def test_a_reason_in_the_final_table_keeps_its_advice_after_a_long_path(depth, tmp_path):
    """The reason column shortens paths and leaves out the middle, never the end where the advice is."""
    from harness.report.terminal import REASON_WIDTH, reason_cell, terminal_table

    path = "/" + "/".join(f"folder-{i:02d}-with-a-long-name" for i in range(depth)) + "/ch_PP-OCRv4_det.onnx"
    reason = (f"ModelError in phase load: {path}: 2 free axes are not batch or sequence axes: input 'x' axis 2 "
              "(dim_value -1), input 'x' axis 3 (dim_value -1); give them sizes with --shape x:2=N,x:3=N")
    cell = reason_cell(reason)
    assert cell.endswith("give them sizes with --shape x:2=N,x:3=N") and len(cell) <= REASON_WIDTH
    assert cell.startswith("ModelError in phase load: ")
    case = CaseResult(CaseId("det", "ort-cpu", "fp32", 1, None, "cpu"), "error", reason=reason)
    table = terminal_table(RunResults(run_id="r", started_at="", cases=[case]))
    assert "--shape x:2=N,x:3=N" in table
    assert reason_cell("short: /a/b/c.onnx kept whole") == "short: /a/b/c.onnx kept whole"
