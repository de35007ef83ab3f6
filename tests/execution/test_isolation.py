"""Isolation: a crash, hang or memory blow-up costs one row, never the run; no worker outlives the run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from harness.results import load_results

FAST = ["--min-time", "0.05", "--min-iters", "3", "--warmup", "1"]


def harness(args, env, **kw):
    return subprocess.Popen([sys.executable, "-m", "harness.cli", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, **kw)


def survivors(token: str, within_s: float = 3.0) -> list[psutil.Process]:
    """Processes still alive, `within_s` after the harness exited, whose environment carries this test's token
    (the harness, its forkserver and workers; multiprocessing's resource tracker ends a moment after them)."""
    deadline = time.monotonic() + within_s
    while (alive := _alive(token)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return alive


def _alive(token: str) -> list[psutil.Process]:
    alive = []
    for p in psutil.process_iter():
        try:
            if p.environ().get("HARNESS_TEST_TOKEN") == token and p.status() != psutil.STATUS_ZOMBIE:
                alive.append(p)
        except (psutil.Error, OSError):
            continue
    return alive


@pytest.fixture
def env(fake_env):
    return {**fake_env, "HARNESS_TEST_TOKEN": uuid.uuid4().hex, "PYTHONUNBUFFERED": "1"}


@pytest.mark.e2e
def test_good_crash_good_hang_good_oom_good(env, tmp_path):
    out = tmp_path / "run"
    runtimes = "fake-ok,fake-segv-load,fake-ok-b,fake-hang,fake-ok-c,fake-oom,fake-ok-d"
    proc = harness(["run", "--models", "fake-linear", "--runtimes", runtimes, "--batch-sizes", "2",
                    "--case-timeout", "4", "--case-memory", "3", "--out", str(out), *FAST], env)
    stdout, _ = proc.communicate(timeout=180)
    assert proc.returncode == 1, stdout
    run = load_results(out / "results.json")
    assert run.complete
    by_rt = {c.case.runtime: c for c in run.cases}
    assert [c.status for c in run.cases] == ["passed", "crashed", "passed", "timeout", "passed", "oom", "passed"]
    assert sum(c.measured for c in run.cases) == 4
    crash, hang, oom = by_rt["fake-segv-load"], by_rt["fake-hang"], by_rt["fake-oom"]
    assert crash.signal == "SIGSEGV" and crash.phase == "load"
    assert "Fatal Python error: Segmentation fault" in crash.stderr_tail  # faulthandler's traceback
    assert hang.phase == "warmup" and "exceeded --case-timeout 4 s" in hang.reason
    assert oom.phase == "load" and "memory cap 3" in oom.reason
    for line in ("crashed", "timeout", "oom"):
        assert line in stdout
    assert survivors(env["HARNESS_TEST_TOKEN"]) == []


@pytest.mark.e2e
@pytest.mark.parametrize("runtime, signame", [("fake-abort-run", "SIGABRT"), ("fake-segv-run", "SIGSEGV")])
def test_crash_inside_the_timed_loop_names_signal_and_phase(env, tmp_path, runtime, signame):
    out = tmp_path / "run"
    proc = harness(["run", "--models", "fake-linear", "--runtimes", f"{runtime},fake-ok", "--batch-sizes", "1",
                    "--out", str(out), "--min-time", "0.05", "--min-iters", "10", "--warmup", "1"], env)
    stdout, _ = proc.communicate(timeout=120)
    assert proc.returncode == 1, stdout
    crashed, good = load_results(out).cases
    assert (crashed.status, crashed.signal, crashed.phase) == ("crashed", signame, "run")
    assert good.status == "passed"
    assert survivors(env["HARNESS_TEST_TOKEN"]) == []


def _wait_for_cases(path: Path, n: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if len(json.loads(path.read_text())["cases"]) >= n:
                return
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.1)
    raise AssertionError(f"{path} never held {n} cases")


@pytest.mark.e2e
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_keeps_finished_cases_writes_report_and_leaves_no_worker(env, tmp_path, sig):
    out = tmp_path / "run"
    proc = harness(["run", "--models", "fake-linear", "--runtimes", "fake-slow", "--batch-sizes",
                    "1,2,3,4,5,6,7,8", "--min-time", "1", "--out", str(out)], env)
    _wait_for_cases(out / "results.json", 2)
    t0 = time.monotonic()
    proc.send_signal(sig)
    stdout, _ = proc.communicate(timeout=30)
    assert time.monotonic() - t0 < 10, "the run did not stop within seconds"
    assert proc.returncode == 128 + sig, stdout  # 130 for SIGINT, 143 for SIGTERM
    run = load_results(out)
    assert 2 <= len(run.cases) < 8 and all(c.status == "passed" for c in run.cases)
    assert run.interrupted and not run.complete
    assert (out / "report.html").is_file()
    assert survivors(env["HARNESS_TEST_TOKEN"]) == []


@pytest.mark.e2e
@pytest.mark.alone  # the stop's 10 s bound (pytest -n 2 at load 6-10: past it once)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("during", ["cases", "rounds"])
def test_a_second_signal_during_the_stop_is_absorbed(env, tmp_path, sig, during):
    """Two stop signals 50 ms apart (what `timeout`, CI runners and impatient people send), while cases run or
    while the later --repeats rounds run: an orderly stop, never a traceback or a run marked complete."""
    out = tmp_path / "run"
    batches = "1,2,3,4,5,6,7,8" if during == "cases" else "1,2"
    proc = harness(["run", "--models", "fake-linear", "--runtimes", "fake-slow", "--batch-sizes", batches,
                    "--min-time", "1", "--repeats", "4", "--out", str(out)], env,
                   preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    if during == "cases":
        _wait_for_cases(out / "results.json", 2)
    else:  # both cases done: the rounds of --repeats are under way
        _wait_for_cases(out / "results.json", 2)
        time.sleep(1.5)
    t0 = time.monotonic()
    proc.send_signal(sig)
    time.sleep(0.05)
    proc.send_signal(sig)
    stdout, _ = proc.communicate(timeout=30)
    assert time.monotonic() - t0 < 10, "the run did not stop within seconds"
    assert proc.returncode == 128 + sig, stdout
    assert "Traceback" not in stdout, stdout
    run = load_results(out)
    assert run.interrupted and not run.complete
    assert run.cases and all(c.status == "passed" for c in run.cases)
    assert (out / "report.html").is_file() and (out / "summary.md").is_file()
    assert survivors(env["HARNESS_TEST_TOKEN"]) == []
    save = subprocess.run([sys.executable, "-m", "harness.cli", "baseline", "save", str(out), "--name", "partial",
                           "--dir", str(tmp_path / "baselines")], env=env, capture_output=True, text=True)
    assert save.returncode == 2 and "interrupted" in save.stderr, save.stderr
    assert not (tmp_path / "baselines" / "partial.json").exists()


@pytest.mark.e2e
def test_sigkill_leaves_a_readable_results_file_and_no_worker(env, tmp_path):
    out = tmp_path / "run"
    proc = harness(["run", "--models", "fake-linear", "--runtimes", "fake-slow", "--batch-sizes",
                    "1,2,3,4,5,6,7,8", "--min-time", "1", "--out", str(out)], env)
    _wait_for_cases(out / "results.json", 2)
    proc.kill()
    proc.communicate(timeout=30)
    run = load_results(out)
    assert len(run.cases) >= 2 and not run.complete
    deadline = time.monotonic() + 10  # the worker dies with its parent (PR_SET_PDEATHSIG)
    while survivors(env["HARNESS_TEST_TOKEN"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert survivors(env["HARNESS_TEST_TOKEN"]) == []
    report = subprocess.run([sys.executable, "-m", "harness.cli", "report", str(out / "results.json")],
                            env=env, capture_output=True, text=True)
    assert report.returncode == 0 and "incomplete" in report.stdout
    assert os.path.getsize(out / "report.html") > 0


CONV_FACTORY = '''
import torch
from torch import nn


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                                  nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                                  nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))

    def forward(self, x):
        return self.body(x)


def convnet():
    torch.manual_seed(0)
    return ConvNet().eval(), {"x": torch.randn(2, 3, 32, 32)}
'''


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.parametrize("isolation", ["isolated", "no-isolation"])
def test_a_user_conv_module_with_default_threads_is_measured(env, tmp_path, isolation):
    """The parent calls the user's factory and runs forward() (libgomp's thread pool starts there); a worker
    forked from that state used to wait forever in a libgomp barrier. Workers now start from a forkserver."""
    (tmp_path / "user_conv.py").write_text(CONV_FACTORY)
    env = {**env, "PYTHONPATH": os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")])}
    env.pop("OMP_NUM_THREADS", None)
    out = tmp_path / "run"
    args = ["run", "--model", "user_conv:convnet", "--runtimes", "torch-cpu,ort-cpu", "--batch-sizes", "2",
            "--repeats", "1", "--case-timeout", "90", "--out", str(out), *FAST]
    proc = harness(args + (["--no-isolation"] if isolation == "no-isolation" else []), env)
    stdout, _ = proc.communicate(timeout=240)
    assert proc.returncode == 0, stdout
    cases = load_results(out).cases
    assert [c.status for c in cases] == ["passed", "passed"], stdout
    assert all(c.latency and c.latency.p50_ms > 0 for c in cases)
    assert all(c.case.model == "user_conv.convnet" for c in cases)


def test_the_forkserver_ignores_ctrl_c_from_its_first_moment():
    """A Ctrl-C in the first seconds of `harness gate` printed the forkserver's KeyboardInterrupt traceback (it was
    still importing its preload, before multiprocessing ignores SIGINT there). The first module it preloads now
    ignores SIGINT, before the heavy ones; the server starts lazily, as before."""
    import subprocess
    import sys

    from harness.execution.supervisor import worker_context

    ctx = worker_context()
    from multiprocessing import forkserver

    preload = forkserver._forkserver._preload_modules
    assert preload[0] == "harness.execution.quiet_start" and "harness.execution.worker" in preload
    probe = subprocess.run([sys.executable, "-c", "import signal, harness.execution.quiet_start; "
                            "print(signal.getsignal(signal.SIGINT) is signal.SIG_IGN)"],
                           capture_output=True, text=True, timeout=60, check=True)
    assert probe.stdout.strip() == "True"
    assert ctx is not None


def test_a_forkserver_that_does_not_end_is_killed_within_the_grace(tmp_path):
    """stop_forkserver never waits without a limit (a server that did not end hung a Ray shard for minutes): a
    'server' that ignores its closed alive pipe is killed after the grace; one that ends is reaped as before."""
    from multiprocessing.forkserver import ForkServer

    from harness.execution.supervisor import stop_forkserver

    def server(code: str) -> tuple[ForkServer, subprocess.Popen]:
        alive_r, alive_w = os.pipe()
        proc = subprocess.Popen([sys.executable, "-c", code], pass_fds=(alive_r,))
        os.close(alive_r)
        fs = ForkServer()
        address = tmp_path / f"fs-{proc.pid}"
        address.write_text("")
        fs._forkserver_pid, fs._forkserver_alive_fd, fs._forkserver_address = proc.pid, alive_w, str(address)
        return fs, proc

    stuck, proc = server("import time; time.sleep(60)")
    t0 = time.monotonic()
    assert stop_forkserver(stuck, grace_s=0.5) is True
    assert 0.5 <= time.monotonic() - t0 < 10 and not psutil.pid_exists(proc.pid)  # killed and reaped
    assert stuck._forkserver_pid is None and not Path(f"{tmp_path}/fs-{proc.pid}").exists()
    polite, proc = server("import time; time.sleep(0.1)")  # ends by itself within the grace
    assert stop_forkserver(polite, grace_s=10) is False and not psutil.pid_exists(proc.pid)
    assert stop_forkserver(polite) is False  # stopped already: nothing to do


def _idle_worker(conn) -> None:
    conn.recv()  # a worker's loop: the executor's ("stop",) ends it


def test_renew_ends_every_worker_so_the_next_request_starts_a_new_process(tmp_path):
    """IsolatedExecutor.renew (the gate's new activation): the current worker and a worker parked for another
    environment both ended and reaped, their logs removed; the next request then starts a new process."""
    import multiprocessing as mp

    from harness.execution.supervisor import IsolatedExecutor

    ex = IsolatedExecutor()
    procs, logs = [], []
    for key in (None, "another-environment"):
        parent, child = mp.get_context("fork").Pipe()
        proc = mp.get_context("fork").Process(target=_idle_worker, args=(child,))
        proc.start()
        log = tmp_path / f"worker-{len(procs)}.log"
        log.write_text("")
        procs.append(proc)
        logs.append(log)
        if key is None:
            ex._proc, ex._conn, ex._log_path = proc, parent, str(log)
        else:
            ex._parked[key] = (proc, parent, str(log))
    t0 = time.monotonic()
    ex.renew()
    assert time.monotonic() - t0 < 2.0  # each asked to stop, not waited out and killed
    assert not any(p.is_alive() for p in procs) and all(p.exitcode == 0 for p in procs)
    assert ex._proc is None and ex._parked == {} and not any(log.exists() for log in logs)
