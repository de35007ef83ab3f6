"""`harness gate BASELINE`: the baseline re-measured tonight as side A (its stored artifact, its runtime release)
beside tonight's build as side B, interleaved and judged by the paired test; cases that cannot be reproduced fall
back to the stored figures, labelled; the exit code never says OK for a gate that judged nothing.

The unit tests run in-process on a fake clock with `fake-graph` (tests/fakes.py), a runtime whose cost per call
is written in the model file it runs: what side A measured tells which file it ran."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.cli import main
from harness.config import RunConfig
from harness.execution.gate_run import GateDriver, plan_gate
from harness.workloads.ab.pairs import renews_workers
from harness.execution.session import HarnessSession
from harness.gating import load_gate_config
from harness.gating.baseline import blob_path, list_baselines, load_baseline_runs, load_replay, save_baseline
from harness.gating.verdicts import EXIT_CLEAN, EXIT_REGRESSION, EXIT_UNJUDGED
from harness.measure.contention import snapshot
from harness.measure.timer import Timer, TimingPolicy
from harness.model import get_model, register_model
from harness.results.schema import CaseId, CaseResult, RunResults
from harness.results.stats import latency_stats
from harness.results.store import write_results
from harness.results.stored import RunEnvironmentRecord

TESTS_DIR = Path(__file__).resolve().parents[1]


class Clock:
    def __init__(self) -> None:
        self.now = 0
        self.rng = np.random.default_rng(0)

    def __call__(self) -> int:
        return self.now

    def tick(self, ns: int) -> None:  # a call's cost with a seeded +-1% jitter
        self.now += int(ns * (1 + 0.01 * self.rng.standard_normal()))


@pytest.fixture
def clock(fakes, monkeypatch):
    c = Clock()
    monkeypatch.setattr(fakes.FakeGraph, "tick", c.tick)
    return c


def _model_file(path: Path, cost_us: float) -> Path:
    path.write_text(f"cost_us={cost_us}\n")
    return path


def _register(fakes, path: Path) -> None:
    register_model(dataclasses.replace(fakes.FAKE_MODEL, name="fake-file", build=None, onnx_path=path),
                   replace=True)


def _baseline_run(tmp_path: Path, fakes, cost_us: float, cases: list[tuple[str, str]]) -> Path:
    """A finished baseline run of `cases` (model, runtime) as `harness run` stores one, its samples at the
    model file's cost; the file is the artifact fake-graph ran."""
    results = []
    for model, runtime in cases:
        case = CaseId(model, runtime, "fp32", 1, None, "cpu")
        samples = [int(cost_us * 1000 * (1 + 0.001 * (i % 7))) for i in range(40)]
        artifact = str(tmp_path / "model.onnx") if runtime == "fake-graph" else None
        # a runtime without an artifact rebuilds the module: the run recorded the model's real fingerprint
        fingerprint = "0" * 64 if artifact else get_model(model).fingerprint()
        results.append(CaseResult(case, "passed", samples_ns=samples, latency=latency_stats(samples),
                                  timing_scope="host_to_host", artifact=artifact, feed_sha256="f" * 64,
                                  model_fingerprint=fingerprint))
    run = RunResults(run_id="base-1", started_at="2026-11-26T01:00:00+00:00", cases=results,
                     environment=RunEnvironmentRecord.from_dict({"machine": "test", "libraries": {"numpy": "2.0"}}),
                     config={"threads": 1, "seed": 0, "repeats": 1})
    run.finished_at = "2099-01-01T00:00:00+00:00"
    run.complete = True
    out = tmp_path / "base"
    write_results(run, out)
    return out


def _config(tmp_path: Path, **extra) -> RunConfig:
    values = {"isolation": False, "threads": 1, "ab_pairs": 10, "ab_block_time_s": 0.002, "contention_limit": 1.0,
              "timing": TimingPolicy(warmup_iters=2, warmup_time_s=0.0, min_iters=5, min_time_s=0.001),
              "cache_dir": tmp_path / "cache", "out_dir": tmp_path / "gate", "repeats": 1}
    values.update(extra)
    return RunConfig.build(workload="gate", **values)


def _gate(tmp_path: Path, clock: Clock, name: str = "main", read_proc=None, **extra):
    runs = load_baseline_runs(name, tmp_path / "baselines")
    replay = load_replay(name, tmp_path / "baselines")
    plans = plan_gate(runs[-1], replay)
    session = HarnessSession(_config(tmp_path, **extra))
    session.start()
    session.executor.runner.timer = Timer(clock)  # the in-process worker's timer on the fake clock
    if read_proc is not None:
        from harness.workloads.gate.workload import GateState

        state = session.executor.runner.state("gate")
        assert isinstance(state, GateState)
        state.read_proc = read_proc
    driver = GateDriver(session, runs, replay, load_gate_config(None, ()))
    if read_proc is not None:  # the pairs' quiet waits look at the fake machine too
        driver.wait = lambda threads, timeout_s, window_s: {"waited_s": timeout_s, "quiet": False}
    outcome = driver.run(plans)
    return outcome, plans


def test_the_baseline_is_saved_with_its_artifact_and_re_measured_as_side_a(tmp_path, fakes, clock):
    """The model file held a 100 us model when the baseline was saved; tonight the same path holds one that does
    40% more work (a changed model: today `not_comparable`, gate OK). The gate runs the stored copy as side A and
    tonight's file as side B: regressed, B/A 1.4, exit 1."""
    model = _model_file(tmp_path / "model.onnx", 100)
    _register(fakes, model)
    save_baseline(_baseline_run(tmp_path, fakes, 100, [("fake-file", "fake-graph")]), "main",
                  tmp_path / "baselines")
    replay = load_replay("main", tmp_path / "baselines")
    stored = replay.cases["fake-file-fake-graph-fp32-b1"]
    blob = blob_path(tmp_path / "baselines" / "artifacts", stored.artifact_sha256)
    assert blob.read_text() == "cost_us=100\n" and stored.artifact_bytes == len("cost_us=100\n")
    [info] = list_baselines(tmp_path / "baselines")
    assert "1 artifact stored (0.0 KiB)" in info.artifacts
    _model_file(model, 140)  # tonight: the same path, 40% more work
    _register(fakes, model)
    outcome, plans = _gate(tmp_path, clock)
    assert not plans[0].fallback
    [rec] = outcome.records
    assert rec.verdict.value == "regressed" and abs(rec.ratio - 1.4) < 0.02 and rec.ci_low > 1.0, rec.reason
    assert outcome.exit_code(allow_unjudged=False) == EXIT_REGRESSION
    assert "re-measured A/B tonight" in rec.reason
    [row] = outcome.run.cases
    side_a = row.details["gate"]["side_a"]
    assert side_a["artifact_sha256"] == stored.artifact_sha256 and side_a["case"].startswith("fake-file@baseline")
    assert abs(side_a["latency"]["p50_ms"] - 0.100) < 0.003 and abs(row.latency.p50_ms - 0.140) < 0.004
    assert sorted(row.ab.order) == ["ab"] * 5 + ["ba"] * 5
    # the written results keep both sides' blocks
    doc = json.loads((tmp_path / "gate" / "results.json").read_text())
    assert len(doc["cases"][0]["ab"]["blocks"]) == 20 and doc["complete"]


@pytest.mark.parametrize("cpus", [1, 2])
def test_both_sides_are_activated_anew_every_pairs_over_activations_in_new_workers_on_one_cpu(tmp_path, fakes, clock,
                                                                                             monkeypatch, cpus):
    """--ab-activations 5 over 10 pairs: each side activated 5 times (a new activation every 2 pairs; in new
    workers where the gate may use one CPU), every block labelled with its activation; the planted 40% is still
    found."""
    from harness.execution.worker import InProcessExecutor
    from harness.results import environment
    from harness.workloads.gate.workload import GateState

    model = _model_file(tmp_path / "model.onnx", 100)
    _register(fakes, model)
    save_baseline(_baseline_run(tmp_path, fakes, 100, [("fake-file", "fake-graph")]), "main",
                  tmp_path / "baselines")
    _model_file(model, 140)
    _register(fakes, model)
    sides: list[str] = []
    real = GateState.run

    def counted(self, case, config, payload, on_phase):
        sides.append(payload.side)
        return real(self, case, config, payload, on_phase)

    monkeypatch.setattr(GateState, "run", counted)
    monkeypatch.setattr(InProcessExecutor, "renew", lambda self: sides.append("new worker"))
    monkeypatch.setattr(environment, "default_threads", lambda: cpus)
    outcome, _ = _gate(tmp_path, clock, ab_activations=5)
    # with one CPU each activation after the first in new workers (IsolatedExecutor.renew; in process here:
    # counted); with two in the same worker
    assert sides == (["b", "a"] + ["new worker", "b", "a"] * 4 if cpus == 1 else ["b", "a"] * 5)
    [row] = outcome.run.cases
    assert [b.activation for b in row.ab.blocks if b.side == "a"] == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    [rec] = outcome.records
    assert rec.verdict.value == "regressed" and abs(rec.ratio - 1.4) < 0.02, rec.reason


def test_an_unchanged_model_passes_and_exits_0(tmp_path, fakes, clock):
    model = _model_file(tmp_path / "model.onnx", 100)
    _register(fakes, model)
    save_baseline(_baseline_run(tmp_path, fakes, 100, [("fake-file", "fake-graph")]), "main",
                  tmp_path / "baselines")
    outcome, _ = _gate(tmp_path, clock)
    [rec] = outcome.records
    assert rec.verdict.value == "pass" and rec.ci_low < 1.0 < rec.ci_high, rec.reason
    assert outcome.exit_code(allow_unjudged=False) == EXIT_CLEAN
    assert outcome.unjudged_line(False) == "not judged: none (every gated row was judged)"


def test_a_case_that_cannot_be_reproduced_falls_back_and_is_labelled(tmp_path, fakes, clock):
    """fake-ok runs no artifact and does not run the torch module itself either (it has no capability to rebuild
    side A from): judged on the stored figures, labelled in the plan, the records, gate.md and the exit
    reasoning."""
    model = _model_file(tmp_path / "model.onnx", 100)
    _register(fakes, model)
    save_baseline(_baseline_run(tmp_path, fakes, 100, [("fake-file", "fake-graph"), ("fake-linear", "fake-ok")]),
                  "main", tmp_path / "baselines")
    replay = load_replay("main", tmp_path / "baselines")
    stored = replay.cases["fake-linear-fake-ok-fp32-b1"]
    assert stored.artifact_sha256 is None and stored.model_definition["fingerprint"] == fakes.FAKE_MODEL.fingerprint()
    outcome, plans = _gate(tmp_path, clock)
    why = "fake-ok ran no ONNX artifact and does not run the torch module itself: nothing to re-run"
    assert [p.fallback for p in plans] == ["", why]
    assert outcome.fallbacks == {"fake-linear-fake-ok-fp32-b1": why}
    fallback = [r for r in outcome.records if r.case_id == "fake-linear-fake-ok-fp32-b1" and r.metric != "drift"]
    assert fallback and all(r.reason.startswith(f"stored figures (not re-measured: {why}): ") for r in fallback)
    md = outcome.markdown(False)
    assert "stored figures (not re-measured)" in md and why in md
    assert md.splitlines()[0].startswith("**gate ")
    row = next(c for c in outcome.run.cases if c.case.id == "fake-linear-fake-ok-fp32-b1")
    assert row.details["gate"] == {"mode": "stored figures", "why": why} and row.ab is None
    # a stored artifact deleted from the blob store: that case falls back too, saying so
    blob = blob_path(replay.blobs, replay.cases["fake-file-fake-graph-fp32-b1"].artifact_sha256)
    os.chmod(blob.parent, 0o755)
    blob.unlink()
    plans = plan_gate(load_baseline_runs("main", tmp_path / "baselines")[-1], load_replay("main",
                                                                                      tmp_path / "baselines"))
    assert plans[0].fallback.startswith("its stored artifact is missing from ")
    # a baseline saved before baseline_schema 2 stores nothing to re-run: every case on the stored figures
    old = plan_gate(load_baseline_runs("main", tmp_path / "baselines")[-1], None, runtimes=["fake-graph"])
    assert [(p.case.id, p.fallback) for p in old] == [
        ("fake-file-fake-graph-fp32-b1", "the baseline stores no artifacts (saved by an older harness: save it again)")]


class FakeProc:
    """A /proc of this process whose threads waited `wait` of their runnable time for a CPU between reads."""

    def __init__(self, root: Path, wait: float) -> None:
        self.root, self.wait, self.run_ns, self.wait_ns = root, wait, 0, 0
        (root / "task" / "1").mkdir(parents=True)
        (root / "pressure").mkdir()
        self._write()

    def _write(self) -> None:
        (self.root / "task" / "1" / "schedstat").write_text(f"{self.run_ns} {self.wait_ns} 10\n")
        (self.root / "pressure" / "cpu").write_text("some avg10=50.00 avg60=50.00 avg300=50.00 total=0\n")
        (self.root / "stat").write_text("cpu  100 0 100 1000 0 0 0 0 0 0\n")

    def __call__(self):
        self.run_ns += 50_000_000
        self.wait_ns += int(50_000_000 * self.wait / (1 - self.wait))
        self._write()
        return snapshot(proc=self.root, pressure=self.root / "pressure" / "cpu", stat=self.root / "stat")


def test_an_all_inconclusive_gate_exits_3_and_names_the_rows(tmp_path, fakes, clock):
    model = _model_file(tmp_path / "model.onnx", 100)
    _register(fakes, model)
    save_baseline(_baseline_run(tmp_path, fakes, 100, [("fake-file", "fake-graph")]), "main",
                  tmp_path / "baselines")
    proc = FakeProc(tmp_path / "proc", wait=0.5)  # every block: the threads waited half their runnable time
    outcome, _ = _gate(tmp_path, clock, read_proc=proc, contention_limit=0.10, ab_budget_s=0.0)
    [rec] = outcome.records
    assert rec.verdict.value == "inconclusive" and "contended: 10 of 10 pairs" in rec.reason, rec.reason
    assert outcome.exit_code(allow_unjudged=False) == EXIT_UNJUDGED
    assert outcome.exit_code(allow_unjudged=True) == EXIT_CLEAN
    line = outcome.unjudged_line(False)
    assert line.startswith("could not judge 1 of 1 gated timing rows (contended: fake-file-fake-graph-fp32-b1 "
                           "latency_median)"), line
    # not judged, its evidence shown: B/A over every pair, in the row, gate.md and gate.json
    assert rec.ratio is not None and rec.ci_low is not None and "over all 10 pairs, contended ones included" in \
        rec.reason
    assert "| inconclusive (not judged: contended) | fake-file-fake-graph-fp32-b1 | latency_median |" in \
        outcome.markdown(False)
    assert outcome.as_dict(False)["unjudged"][0]["ratio"] == rec.ratio
    # with a budget the gate measures more pairs (new activations) hoping for clean ones; still contended: the
    # budget ends it, the row stays unjudged
    more, _ = _gate(tmp_path, clock, read_proc=proc, contention_limit=0.10, ab_budget_s=0.5,
                    out_dir=tmp_path / "gate2")
    [row] = more.run.cases
    assert row.ab.extra_pairs > 0 and len(row.ab.order) == 10 + row.ab.extra_pairs
    assert more.records[0].verdict.value == "inconclusive" and more.exit_code(allow_unjudged=False) == EXIT_UNJUDGED
    assert outcome.summary(False).startswith("gate COULD NOT JUDGE: 1 not judged (contended: 1) of 1 gated timing "
                                             "rows")
    assert "accepted (--allow-unjudged): exit 0" in outcome.unjudged_line(True)


def _fake_file_env(tmp_path: Path, fake_env: dict[str, str], model: Path) -> dict[str, str]:
    """A subprocess environment whose plugins register `fake-file`, a model whose file is `model`."""
    env = dict(fake_env, HARNESS_BASELINE_DIR=str(tmp_path / "baselines"), HARNESS_CONTENTION_LIMIT="1")
    factory = tmp_path / "gate_models.py"
    factory.write_text(
        "import dataclasses\nfrom pathlib import Path\nimport fakes\nfrom harness.model import register_model\n"
        f"register_model(dataclasses.replace(fakes.FAKE_MODEL, name='fake-file', build=None, "
        f"onnx_path=Path({str(model)!r})), replace=True)\n")
    env["HARNESS_PLUGINS"] = "fakes,gate_models"
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env["PYTHONPATH"]])
    return env


def _saved_baseline(tmp_path: Path, env: dict[str, str]) -> None:
    cli = [sys.executable, "-m", "harness.cli"]
    run = subprocess.run([*cli, "run", "--models", "fake-file", "--runtimes", "fake-graph", "--batch-sizes", "1",
                          "--threads", "1", "--min-time", "0.05", "--repeats", "1", "--out", str(tmp_path / "r")],
                         env=env, capture_output=True, text=True, check=False, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    saved = subprocess.run([*cli, "baseline", "save", str(tmp_path / "r"), "--name", "main"], env=env,
                           capture_output=True, text=True, check=False, timeout=120)
    assert saved.returncode == 0 and "for `harness gate`: 1 artifact stored (0.0 KiB)" in saved.stdout, saved.stdout


@pytest.fixture(scope="module")
def saved_main(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The CLI tests' baseline `main`, run and saved once for the module (`harness run` of fake-file at 300 us a
    call, `harness baseline save`, the artifact's size shown): its baselines folder. Each test gates against a copy
    of it, tonight's side from a model file of its own (the same bytes, so the same model until a test changes
    its copy)."""
    root = tmp_path_factory.mktemp("saved-main")
    base = dict(os.environ, HARNESS_PLUGINS="fakes", HARNESS_CACHE_DIR=str(root / "cache"),
                PYTHONPATH=os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")]))
    _saved_baseline(root, _fake_file_env(root, base, _model_file(root / "model.onnx", 300)))
    return root / "baselines"


def _gate_env(tmp_path: Path, fake_env: dict[str, str], saved_main: Path) -> tuple[dict[str, str], Path]:
    """A test's copy of the saved baseline and its own model file (300 us a call): its environment and the file."""
    import shutil

    shutil.copytree(saved_main, tmp_path / "baselines")
    model = _model_file(tmp_path / "model.onnx", 300)
    return _fake_file_env(tmp_path, fake_env, model), model


@pytest.mark.e2e  # harness subprocesses, 10-28 s in CI: the end-to-end tier's rule (#56)
def test_the_cli_gate_saves_measures_and_exits_1_on_a_changed_model(tmp_path, fake_env, saved_main, monkeypatch,
                                                                    capsys):
    """Through the CLI and the supervised worker: run, baseline save (the artifact's size shown: `saved_main`), a
    slowdown of 30% planted in side B (--inject) is regressed; the model file replaced by one with 40% more work,
    `harness gate` exits 1 and writes gate.md whose first line is the summary; a crash of tonight's side is broke;
    a bad baseline name is exit 2."""
    env, model = _gate_env(tmp_path, fake_env, saved_main)
    cli = [sys.executable, "-m", "harness.cli"]
    planted = subprocess.run([*cli, "gate", "main", "--ab-pairs", "8", "--ab-block-time", "0.01", "--inject", "30",
                              "--out", str(tmp_path / "p")], env=env, capture_output=True, text=True, check=False, timeout=300)
    assert planted.returncode == EXIT_REGRESSION, planted.stdout + planted.stderr  # a slowdown planted in side B
    assert re.search(r"regressed +fake-file-fake-graph-fp32-b1  latency_median  A [\d.e-]+ B [\d.e-]+ ms  "
                     r"B/A 1\.(2[5-9]|3[0-5])", planted.stdout), planted.stdout
    _model_file(model, 420)
    gate = subprocess.run([*cli, "gate", "main", "--ab-pairs", "8", "--ab-block-time", "0.01", "--out",
                           str(tmp_path / "g")], env=env, capture_output=True, text=True, check=False, timeout=300)
    assert gate.returncode == EXIT_REGRESSION, gate.stdout + gate.stderr
    assert re.search(r"regressed +fake-file-fake-graph-fp32-b1  latency_median  A [\d.e-]+ B [\d.e-]+ ms  "
                     r"B/A 1\.(3[5-9]|4[0-5])", gate.stdout), \
        gate.stdout
    assert "the model changed since the baseline" in gate.stdout
    assert re.search(r"\nfake-file-fake-graph-fp32-b1: can detect a slowdown of [\d.]+% with ", gate.stdout), gate.stdout
    assert gate.stdout.rstrip().splitlines()[-2] == "not judged: none (every gated row was judged)"
    md = (tmp_path / "g" / "gate.md").read_text()
    assert md.startswith("**gate FAIL: 1 regressed")
    assert json.loads((tmp_path / "g" / "gate.json").read_text())["exit_code"] == EXIT_REGRESSION
    # tonight's build crashes (SIGSEGV) during its blocks: that case broke (exit 1), the worker is replaced, the
    # row is kept in results.json
    _model_file(model, "300 crash_after_s=0.7")  # past both sides' warm-ups (0.2 s each)
    crash = subprocess.run([*cli, "gate", "main", "--ab-pairs", "20", "--ab-block-time", "0.01", "--ab-activations",
                            "1", "--out",
                            str(tmp_path / "c")], env=env, capture_output=True, text=True, check=False, timeout=300)
    assert crash.returncode == EXIT_REGRESSION, crash.stdout + crash.stderr
    assert re.search(r"broke +fake-file-fake-graph-fp32-b1  case  re-measured A/B: tonight's side crashed: side B "
                     r"\(tonight's\) failed in pair \d+: ", crash.stdout), crash.stdout
    row = json.loads((tmp_path / "c" / "results.json").read_text())["cases"][0]
    assert row["status"] == "crashed" and "SIGSEGV" in row["reason"]
    # a usage error ends before anything runs: in this process (a subprocess only paid the CLI's start again)
    monkeypatch.setenv("HARNESS_BASELINE_DIR", env["HARNESS_BASELINE_DIR"])
    assert main(["gate", "nope"]) == 2 and "no baseline named 'nope'" in capsys.readouterr().err


@pytest.mark.e2e  # harness subprocesses, 10-28 s in CI: the end-to-end tier's rule (#56)
def test_a_release_pinned_in_the_baseline_runs_in_its_own_environment_beside_tonights(tmp_path, fake_env):
    """The baseline ran fakert-cpu with harness-fakert 1.0.0 (the only release then); tonight a fresh machine (a
    new cache) installs 1.1.0, 30% slower per call. The gate runs side A as fakert-cpu@1.0.0 in an environment
    of its own and side B in tonight's: two supervised workers taking blocks in turn; B is regressed."""
    from env_fakes import make_wheel

    then, now = tmp_path / "wheels-then", tmp_path / "wheels-now"
    make_wheel(then, "1.0.0", 0.001)
    make_wheel(now, "1.0.0", 0.001)
    make_wheel(now, "1.1.0", 0.0013)
    env = dict(fake_env, HARNESS_PLUGINS="env_fakes", HARNESS_BASELINE_DIR=str(tmp_path / "baselines"),
               HARNESS_CONTENTION_LIMIT="1")  # this test is about environments: a loaded CI machine may not judge
    cli = [sys.executable, "-m", "harness.cli"]
    run = subprocess.run([*cli, "run", "--models", "mlp", "--runtimes", "fakert-cpu", "--batch-sizes", "1",
                          "--threads", "1", "--min-time", "0.1", "--repeats", "1", "--env-wheels", str(then),
                          "--cache-dir", str(tmp_path / "cache-then"), "--out", str(tmp_path / "r")],
                         env=env, capture_output=True, text=True, check=False, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    case = json.loads((tmp_path / "r" / "results.json").read_text())["cases"][0]
    assert case["environment"]["packages"] == {"harness-fakert": "1.0.0"}
    saved = subprocess.run([*cli, "baseline", "save", str(tmp_path / "r"), "--name", "main"], env=env,
                           capture_output=True, text=True, check=False, timeout=120)
    assert saved.returncode == 0 and "1 artifact stored" in saved.stdout, saved.stdout + saved.stderr
    gate = subprocess.run([*cli, "gate", "main", "--ab-pairs", "10", "--ab-block-time", "0.02", "--env-wheels",
                           str(now), "--cache-dir", str(tmp_path / "cache-now"), "--out", str(tmp_path / "g")],
                          env=env, capture_output=True, text=True, check=False, timeout=600)
    # 1.0.0's calls take 1.0 ms, 1.1.0's 1.3 ms: regressed; a machine loaded past what the under-load rule
    # judges leaves it not judged (exit 3) with its ratio shown: the release pinning is what this test holds
    # (the verdicts under load are tested on fakes, tests/gating/test_unjudged.py)
    assert gate.returncode in (EXIT_REGRESSION, EXIT_UNJUDGED), gate.stdout + gate.stderr
    assert "side A runs harness-fakert 1.0.0 (the baseline's release) in its own environment, side B tonight's " \
           "1.1.0" in gate.stdout, gate.stdout
    row = json.loads((tmp_path / "g" / "results.json").read_text())["cases"][0]
    side_a = row["details"]["gate"]["side_a"]
    assert side_a["runtime"] == "fakert-cpu@1.0.0" and side_a["environment"]["packages"] == {"harness-fakert": "1.0.0"}
    assert row["environment"]["packages"] == {"harness-fakert": "1.1.0"}
    verdict = "regressed" if gate.returncode == EXIT_REGRESSION else "inconclusive"
    assert row["ab"]["verdict"] == verdict and 1.1 < row["ab"]["ratio"] < 1.6, row["ab"]["reason"]
    # two workers (one per side, in their two interpreters), alive through the blocks, taking them in turn; a new
    # pair of them for each activation where the gate has one CPU (pairs.renews_workers)
    activations = {b["activation"] for b in row["ab"]["blocks"]}
    assert len(activations) >= 4 and json.loads((tmp_path / "g" / "gate.json").read_text())["workers_started"] == \
        2 * (len(activations) if renews_workers() else 1)


# ------------------------------------------------------------------ cases of a runtime that runs the torch module
def _module_runtime(fakes, monkeypatch):
    """fake-module-rt: runs the model's "torch module" itself (runs_torch_module), built by `model.build()` at
    activation; a call costs what the built module says (on the fake clock). Unregistered after the test."""
    from harness import runtimes
    from harness.runtimes import register_runtime

    monkeypatch.setitem(runtimes._RUNTIMES, "fake-module-rt", fakes.FakeOk)

    class FakeModuleRt(fakes.FakeOk):
        name = "fake-module-rt"
        runs_torch_module = True

        def _activate(self) -> None:
            self.cost_ns = int(self.model.build().cost_us * 1000)
            super()._activate()

        def _infer(self, prepared):
            fakes.FakeGraph.tick(self.cost_ns)
            return {"y": prepared["x"] * 2.0}

    register_runtime(FakeModuleRt, replace=True)


def _module_model(tmp_path: Path, fakes, monkeypatch, cost_us: int, config: dict | None = None):
    """`fake-module`, built by gate_zoo.build() (a file in tmp_path, written afresh: its source is the model's)."""
    import importlib

    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "gate_zoo.py").write_text(f"COST_US = {cost_us}\n\n\nclass Module:\n    cost_us = COST_US\n\n\n"
                                          "def build():\n    return Module()\n")
    sys.modules.pop("gate_zoo", None)
    importlib.invalidate_caches()
    module = importlib.import_module("gate_zoo")
    monkeypatch.setitem(sys.modules, "gate_zoo", module)
    from harness import model as registry

    if "fake-module" not in registry._MODELS:  # unregistered after the test
        monkeypatch.setitem(registry._MODELS, "fake-module", fakes.FAKE_MODEL)
    return register_model(dataclasses.replace(fakes.FAKE_MODEL, name="fake-module", build=module.build,
                                              config=config or {"hidden": 8}, tags=frozenset()), replace=True)


MODULE_CASE = "fake-module-fake-module-rt-fp32-b1"


def test_a_torch_module_case_is_saved_by_its_definition_and_re_measured_as_side_a(tmp_path, fakes, clock,
                                                                                  monkeypatch):
    """A runtime that runs the torch module itself stores no artifact: the baseline stores what builds the module
    (its source file's digest, config, version, libraries), and tonight, the definition unchanged, side A is the
    module rebuilt from it: an interleaved A/B row, not a fallback to the stored figures."""
    _module_runtime(fakes, monkeypatch)
    spec = _module_model(tmp_path, fakes, monkeypatch, 100)
    save_baseline(_baseline_run(tmp_path, fakes, 100, [("fake-module", "fake-module-rt")]), "main",
                  tmp_path / "baselines")
    stored = load_replay("main", tmp_path / "baselines").cases[MODULE_CASE]
    assert stored.artifact_sha256 is None and not stored.not_kept
    assert stored.model_definition == spec.definition()
    assert list(stored.model_definition["sources"]) == ["gate_zoo"] and stored.model_definition["config"] == {
        "hidden": 8}
    [info] = list_baselines(tmp_path / "baselines")
    assert info.artifacts == (f"1 case rebuilt from its model's stored definition (its runtime runs the torch "
                              f"module: {MODULE_CASE}); 0 artifacts stored (0.0 KiB)")
    outcome, plans = _gate(tmp_path, clock)
    assert plans[0].fallback == "" and plans[0].rebuilt and outcome.fallbacks == {}
    [rec] = outcome.records
    assert rec.verdict.value == "pass" and rec.ratio is not None and rec.ci_low < 1.0 < rec.ci_high, rec.reason
    assert rec.reason.startswith("re-measured A/B tonight (side A: the torch module rebuilt from the model's "
                                 "definition, unchanged since the baseline"), rec.reason
    assert outcome.summary(False).endswith("(1 case(s) re-measured A/B tonight, 0 on stored figures)")
    [row] = outcome.run.cases
    side_a = row.details["gate"]["side_a"]
    assert side_a["model_definition"] == spec.fingerprint() and side_a["artifact_sha256"] is None
    assert side_a["case"].startswith("fake-module@baseline") and abs(side_a["latency"]["p50_ms"] - 0.100) < 0.003
    assert row.ab is not None and len(row.ab.blocks) == 20
    assert row.ab.a.startswith(f"baseline base-1: model fake-module rebuilt from its definition {spec.fingerprint()[:12]}")
    assert f"| pass | {MODULE_CASE} | latency_median | " in outcome.markdown(False)
    assert "| re-measured A/B | re-measured A/B tonight (side A: the torch module rebuilt" in outcome.markdown(False)


def test_a_torch_module_whose_source_changed_falls_back_with_what_changed(tmp_path, fakes, clock, monkeypatch):
    """The model's source file edited since the baseline (tonight's module does 40% more work): side A cannot be
    rebuilt as the baseline built it, so the case is judged on the stored figures, and the reason says what
    changed; so does a changed config. The worker refuses a definition that differs from the stored one too."""
    from harness.errors import HarnessError
    from harness.workloads.gate.workload import GateState, SidePayload

    _module_runtime(fakes, monkeypatch)
    _module_model(tmp_path, fakes, monkeypatch, 100)
    save_baseline(_baseline_run(tmp_path, fakes, 100, [("fake-module", "fake-module-rt")]), "main",
                  tmp_path / "baselines")
    stored = load_replay("main", tmp_path / "baselines").cases[MODULE_CASE]
    _module_model(tmp_path, fakes, monkeypatch, 140)  # tonight: the source edited
    outcome, plans = _gate(tmp_path, clock)
    why = plans[0].fallback
    assert re.fullmatch(r"the model's source changed since the baseline: gate_zoo was edited \([0-9a-f]{12} -> "
                        r"[0-9a-f]{12}\)", why), why
    assert outcome.fallbacks == {MODULE_CASE: why}
    timing = [r for r in outcome.records if r.metric != "drift"]
    assert timing and all(r.reason.startswith(f"stored figures (not re-measured: {why}): ") for r in timing)
    [row] = outcome.run.cases
    assert row.details["gate"] == {"mode": "stored figures", "why": why} and row.ab is None
    assert abs(row.latency.p50_ms - 0.140) < 0.004  # tonight's module measured for the stored-figure verdict
    # the same source, another config: said as the keys that changed
    _module_model(tmp_path, fakes, monkeypatch, 100, {"hidden": 16})
    [plan] = plan_gate(load_baseline_runs("main", tmp_path / "baselines")[-1], load_replay("main",
                                                                                           tmp_path / "baselines"))
    assert plan.fallback == "the model's source changed since the baseline: config hidden: 8 -> 16"
    # a baseline saved before model definitions were stored says to save it again
    old = dataclasses.replace(load_replay("main", tmp_path / "baselines"))
    old.cases[MODULE_CASE] = dataclasses.replace(stored, model_definition=None,
                                                 not_kept="fake-module-rt ran no ONNX artifact (it runs the model "
                                                          "itself)")
    [plan] = plan_gate(load_baseline_runs("main", tmp_path / "baselines")[-1], old)
    assert plan.fallback == ("fake-module-rt runs the torch module and the baseline stores no definition of model "
                             "fake-module (saved by an older harness: save it again)")
    # side A's worker checks the definition it would build against the stored one (another environment)
    state = GateState(Timer(clock))
    a_case = CaseId("fake-module@baseline", "fake-module-rt", "fp32", 1, None, "cpu")
    with pytest.raises(HarnessError, match=r"side A: the model's source here differs from the baseline's: config "
                                           r"hidden: 8 -> 16"):
        state.run(a_case, _config(tmp_path), SidePayload("a", "fake-module", {"x": np.ones((1, 8), np.float32)},
                                                         definition=stored.model_definition), lambda phase: None)


def test_definition_changes_name_libraries_and_leave_out_the_pinned_release():
    from harness.model import definition_changes

    old = {"fingerprint": "a" * 64, "sources": {"zoo.m": "1" * 64, "zoo._text": "2" * 64},
           "libraries": {"torch": "2.12.0", "transformers": "4.40.0"}, "config": {"seed": 0}, "version": "1"}
    same_but_torch = dict(old, libraries={"torch": "2.13.0", "transformers": "4.40.0"})
    assert definition_changes(old, same_but_torch, ignore=("torch",)) == ""
    assert definition_changes(old, same_but_torch) == "torch 2.12.0 -> 2.13.0"
    new = dict(old, sources={"zoo.m": "1" * 64, "zoo._text": "3" * 64, "zoo.extra": "4" * 64},
               libraries={"torch": "2.13.0"}, version="2", fingerprint="b" * 64)
    assert definition_changes(old, new, ignore=("Torch",)) == (
        "zoo._text was edited (222222222222 -> 333333333333); zoo.extra newly imported; transformers 4.40.0 -> not "
        "installed; version 1 -> 2")
    assert definition_changes(old, dict(old, fingerprint="b" * 64)) == \
        "its name, inputs or outputs (fingerprint aaaaaaaaaaaa -> bbbbbbbbbbbb)"


@pytest.mark.e2e  # harness subprocesses, 10-28 s in CI: the end-to-end tier's rule (#56)
def test_a_torch_release_pinned_in_the_baseline_runs_side_a_in_its_own_environment(tmp_path, fake_env):
    """fakemod-cpu runs mlp's torch module itself (as torch-cpu does), its cost per call behind harness-fakert:
    the baseline ran 1.0.0; tonight 1.1.0 (30% slower) is installed. The case stores mlp's definition, not an
    artifact; the gate rebuilds side A from it as fakemod-cpu@1.0.0 in an environment of its own, beside
    tonight's side B: regressed, an A/B row, not the stored figures."""
    from env_fakes import make_wheel

    then, now = tmp_path / "wheels-then", tmp_path / "wheels-now"
    make_wheel(then, "1.0.0", 0.001)
    make_wheel(now, "1.0.0", 0.001)
    make_wheel(now, "1.1.0", 0.0013)
    env = dict(fake_env, HARNESS_PLUGINS="env_fakes", HARNESS_BASELINE_DIR=str(tmp_path / "baselines"),
               HARNESS_CONTENTION_LIMIT="1")
    cli = [sys.executable, "-m", "harness.cli"]
    run = subprocess.run([*cli, "run", "--models", "mlp", "--runtimes", "fakemod-cpu", "--batch-sizes", "1",
                          "--threads", "1", "--min-time", "0.1", "--repeats", "1", "--env-wheels", str(then),
                          "--cache-dir", str(tmp_path / "cache-then"), "--out", str(tmp_path / "r")],
                         env=env, capture_output=True, text=True, check=False, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    saved = subprocess.run([*cli, "baseline", "save", str(tmp_path / "r"), "--name", "main"], env=env,
                           capture_output=True, text=True, check=False, timeout=120)
    assert saved.returncode == 0, saved.stdout + saved.stderr
    assert ("for `harness gate`: 1 case rebuilt from its model's stored definition (its runtime runs the torch "
            "module: mlp-fakemod-cpu-fp32-b1); 0 artifacts stored") in saved.stdout, saved.stdout
    gate = subprocess.run([*cli, "gate", "main", "--ab-pairs", "10", "--ab-block-time", "0.02", "--env-wheels",
                           str(now), "--cache-dir", str(tmp_path / "cache-now"), "--out", str(tmp_path / "g")],
                          env=env, capture_output=True, text=True, check=False, timeout=600)
    assert gate.returncode in (EXIT_REGRESSION, EXIT_UNJUDGED), gate.stdout + gate.stderr  # as the test above
    assert "mlp-fakemod-cpu-fp32-b1: side A rebuilt from the model's definition" in gate.stdout, gate.stdout
    assert "side A: the torch module rebuilt from the model's definition, unchanged since the baseline; side A runs " \
           "harness-fakert 1.0.0 (the baseline's release) in its own environment, side B tonight's 1.1.0" in \
           gate.stdout, gate.stdout
    row = json.loads((tmp_path / "g" / "results.json").read_text())["cases"][0]
    side_a = row["details"]["gate"]["side_a"]
    assert side_a["runtime"] == "fakemod-cpu@1.0.0" and side_a["environment"]["packages"] == {"harness-fakert": "1.0.0"}
    assert side_a["artifact_sha256"] is None and side_a["model_definition"] == row["model_fingerprint"]
    assert row["environment"]["packages"] == {"harness-fakert": "1.1.0"}
    verdict = "regressed" if gate.returncode == EXIT_REGRESSION else "inconclusive"
    assert row["ab"]["verdict"] == verdict and 1.1 < row["ab"]["ratio"] < 1.6, row["ab"]["reason"]
    doc = json.loads((tmp_path / "g" / "gate.json").read_text())
    renewed = len({b["activation"] for b in row["ab"]["blocks"]}) if renews_workers() else 1
    assert doc["workers_started"] == 2 * renewed and doc["fallbacks"] == {}


def test_a_graph_with_external_weights_is_stored_self_contained_and_shared(tmp_path):
    """The dynamo exporter writes `model.onnx` + `model.onnx.data`: the blob is one file holding both; a second
    baseline of the same graph shares the blob."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from onnx.external_data_helper import uses_external_data

    from harness.gating.baseline import replay_record

    w = numpy_helper.from_array(np.arange(4096, dtype=np.float32).reshape(64, 64), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])], [w])
    folder = tmp_path / "export"
    folder.mkdir()
    onnx.save(helper.make_model(g), str(folder / "model.onnx"), save_as_external_data=True,
              location="model.onnx.data", size_threshold=0)
    assert uses_external_data(onnx.load(str(folder / "model.onnx"), load_external_data=False).graph.initializer[0])
    case = CaseId("m", "ort-cpu", "fp32", 1, None, "cpu")
    samples = [1000] * 10
    run = RunResults(run_id="r", started_at="2026-11-26T01:00:00+00:00", finished_at="2099-01-01T00:00:00+00:00",
                     cases=[CaseResult(case, "passed", samples_ns=samples, latency=latency_stats(samples),
                                       artifact=str(folder / "model.onnx"))])
    first = replay_record(run, tmp_path / "blobs")["cases"][case.id]
    assert first["not_kept"] == "" and first["artifact_bytes"] > 4096 * 4
    blob = blob_path(tmp_path / "blobs", first["artifact_sha256"])
    stored = onnx.load(str(blob), load_external_data=False)
    assert not uses_external_data(stored.graph.initializer[0])
    assert np.array_equal(numpy_helper.to_array(stored.graph.initializer[0]), numpy_helper.to_array(w))
    again = replay_record(run, tmp_path / "blobs")["cases"][case.id]
    assert again["artifact_sha256"] == first["artifact_sha256"] and len(list((tmp_path / "blobs").rglob("*.onnx"))) == 1
    (folder / "model.onnx.data").unlink()  # its weights gone: not kept, with the reason
    gone = replay_record(run, tmp_path / "blobs2")["cases"][case.id]
    assert gone["artifact_sha256"] is None and "external weights beside" in gone["not_kept"]


@pytest.mark.e2e  # harness subprocesses, 10-28 s in CI: the end-to-end tier's rule (#56)
def test_gate_check_nightly_counts_false_alarms_power_and_unjudged_rows(tmp_path, fake_env, saved_main):
    """`harness gate-check --nightly main`: whole gate runs per round, A/A and with side B slowed 30%."""
    env, _ = _gate_env(tmp_path, fake_env, saved_main)
    out = tmp_path / "gc"
    p = subprocess.run([sys.executable, "-m", "harness.cli", "gate-check", "--nightly", "main", "--rounds", "2",
                        "--levels", "30", "--ab-pairs", "8", "--ab-block-time", "0.01", "--out", str(out)],
                       env=env, capture_output=True, text=True, check=False, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert re.search(r"false alarms \(A/A rows called regressed or improved\): \d of 2; power at 30%: 2 of 2",
                     p.stdout), p.stdout
    rows = json.loads((out / "gatecheck-nightly.json").read_text())["rows"]
    assert {(r["trial"], r["trials"], r["how"]) for r in rows} == {("A/A", 2, "re-measured A/B"),
                                                                    ("slowed 30%", 2, "re-measured A/B")}
    assert len(list((out / "runs").glob("r*-*/gate.md"))) == 0  # gate-check keeps results, not gate.md
    assert len(list((out / "runs").glob("r*-*/results.json"))) == 4


@pytest.mark.e2e  # harness subprocesses, 10-28 s in CI: the end-to-end tier's rule (#56)
def test_sigterm_stops_the_gate_keeps_what_finished_and_exits_143(tmp_path, fake_env, saved_main):
    """SIGTERM in the middle of the blocks: the orderly stop of every session (no verdict, results.json written
    with interrupted: true, the worker ended), exit 143."""
    import signal
    import time

    env, _ = _gate_env(tmp_path, fake_env, saved_main)
    out = tmp_path / "g"
    p = subprocess.Popen([sys.executable, "-m", "harness.cli", "gate", "main", "--ab-pairs", "400", "--ab-block-time",
                          "0.05", "--out", str(out)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True)
    try:
        deadline = time.monotonic() + 120
        while not (out / "results.json").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(3.0)  # both sides activated, blocks under way (400 pairs: 40 s of blocks)
        p.send_signal(signal.SIGTERM)
        text, _ = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 143, text
    assert "gate: interrupted: no verdict" in text and "gate FAIL" not in text and "gate OK" not in text
    doc = json.loads((out / "results.json").read_text())
    assert doc["interrupted"] is True and doc["complete"] is False
    assert not (out / "gate.md").exists()


def test_threads_auto_takes_the_baselines_count_or_the_free_cores():
    from harness.commands.gate_config import auto_threads

    def seen(free):
        return lambda threads, timeout_s: {} if free is None else {"cores_free": free}

    assert auto_threads(2, seen(1.0)) == 1 and auto_threads(2, seen(0.2)) == 1  # one core taken: one thread
    assert auto_threads(2, seen(1.97)) == 2 and auto_threads(1, seen(2.0)) == 1  # never more than the baseline's
    assert auto_threads(4, seen(None)) == 4  # nothing known of the machine: the baseline's count
