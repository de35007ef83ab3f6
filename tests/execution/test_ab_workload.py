"""`harness ab`: both sides in one worker, interleaved blocks in a balanced drawn order, on a fake runtime whose
latency is exact on a fake clock (side B, `threads=2`, costs 5% more per call)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any, ClassVar

import numpy as np
import pytest

from harness.execution import CaseRunner
from harness.execution.worker import InProcessExecutor
from harness.measure.timer import Timer
from harness.results.schema import CaseId
from harness.runtimes import register_runtime
from harness.workloads.ab.pairs import block_order
from harness.workloads.ab.workload import AB, side_case, slowed


class Clock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


CLOCK = Clock()


@pytest.fixture(scope="module")
def clocked(fakes):
    class FakeClocked(fakes.FakeOk):
        """y = 2x; each call advances CLOCK by 100 us (+5% with 2 threads), with a seeded +-1% jitter."""

        name: ClassVar[str] = "fake-clocked"
        rng = np.random.default_rng(0)

        def _infer(self, prepared: Any) -> dict[str, Any]:
            slower = 1.05 if self.options.threads == 2 else 1.0
            CLOCK.now += int(100_000 * slower * (1 + 0.01 * self.rng.standard_normal()))
            return {"y": prepared["x"] * 2.0}

    return register_runtime(FakeClocked, replace=True)


def _executor() -> InProcessExecutor:
    """The session's executor without isolation, its worker's calls timed on CLOCK."""
    ex = InProcessExecutor()
    ex.runner = CaseRunner(timer=Timer(CLOCK))
    return ex


def _run(ex, case, config):
    """The A/B case as the session runs it: the parent's pair loop over the executor's requests."""
    return AB.execute(ex, case, config, AB.payload(case, config))


def _config(tmp_path, a="base", b="threads=2", **extra):
    from harness.options import OPTIONS, parse_run_options

    raw = {o.dest: None for o in OPTIONS}
    raw.update(models="fake-linear", runtimes="fake-clocked", batch_sizes="1", threads="1", warmup="2",
               ab_a=a, ab_b=b, ab_block_time="0.002", cache_dir=str(tmp_path / "cache"), out=str(tmp_path / "o"))
    raw.update({"ab_pairs": "10", **extra})  # 10 pairs: the counts below
    return parse_run_options(raw, workload="ab")


def test_a_planted_5_percent_is_regressed_and_an_equal_pair_passes(tmp_path, clocked):
    runner = _executor()
    (case,) = AB.cases(_config(tmp_path))
    assert case == CaseId("fake-linear", "fake-clocked", "fp32", 1, None, "cpu")
    r = _run(runner, case, _config(tmp_path))
    ab = r.ab
    assert r.status == "failed" and ab.verdict == "regressed" and r.reason == ab.reason, ab.reason
    assert ab.ci_low > 1.0 and abs(ab.ratio - 1.05) < 0.01 and ab.pairs_used == 10
    assert ab.b_case == CaseId("fake-linear", "fake-clocked", "fp32", 1, None, "cpu", variant="threads=2")
    assert sorted(ab.order) == ["ab"] * 5 + ["ba"] * 5  # balanced
    # blocks in the drawn order, each side once per pair, each at least 5 calls and the block time
    assert [b.side for b in ab.blocks] == [s for o in ab.order for s in o]
    assert all(len(b.samples_ns) >= 5 and sum(b.samples_ns) >= 1_900_000 for b in ab.blocks)  # 2 ms of ~100 us calls
    assert r.samples_ns == [x for b in ab.blocks if b.side == "a" for x in b.samples_ns]
    assert ab.b_vs_a["passed"] and ab.b_vs_a["max_abs"] == 0.0
    same = _run(runner, case, _config(tmp_path, b="base"))
    assert same.ab.verdict == "pass" and same.ab.ci_low < 1.0 < same.ab.ci_high, same.ab.reason
    improved = _run(runner, AB.cases(_config(tmp_path, a="threads=2", b="base"))[0],
                          _config(tmp_path, a="threads=2", b="base"))
    assert improved.case.variant == "threads=2" and improved.ab.verdict == "improved"


def test_each_side_is_activated_anew_every_pairs_over_activations(tmp_path, clocked, monkeypatch):
    """--ab-activations 5 over 10 pairs: both sides' runtimes entered 5 times (each released before the next),
    blocks labelled with their activation; the 5% is still regressed."""
    entered: list[int] = []
    real = clocked.__enter__

    def counting(self):
        entered.append(self.options.threads)
        return real(self)

    monkeypatch.setattr(clocked, "__enter__", counting)
    runner = _executor()
    cfg = _config(tmp_path, ab_activations="5")
    r = _run(runner, AB.cases(cfg)[0], cfg)
    assert entered == [1, 2] * 5  # side A (1 thread), side B (threads=2), five times
    assert [b.activation for b in r.ab.blocks if b.side == "b"] == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    assert r.ab.verdict == "regressed" and abs(r.ab.ratio - 1.05) < 0.01, r.ab.reason


class Renewing:
    """The executor with its requests logged: "renew", ("run", activation) and ("block", side)."""

    def __init__(self, ex) -> None:
        self.ex, self.log = ex, []

    def run(self, case, config, payload):
        self.log.append(("run", payload.activation))
        return self.ex.run(case, config, payload)

    def measure_block(self, case, config, fresh):
        self.log.append(("block", case.variant.rsplit("#", 1)[1]))
        return self.ex.measure_block(case, config, fresh)

    def renew(self):
        self.log.append("renew")


@pytest.mark.parametrize("one_cpu", [True, False])
def test_on_one_cpu_each_activation_after_the_first_is_made_in_a_new_worker(tmp_path, clocked, monkeypatch,
                                                                             one_cpu):
    """The parent drives the pairs: one request per activation and per block. Where the process has one CPU
    (pairs.renews_workers) the worker is renewed before each activation after the first (a worker's own bias
    lasted all its activations there); with more, every activation is made in the one worker."""
    import harness.workloads.ab.workload as workload

    monkeypatch.setattr(workload, "renews_workers", lambda: one_cpu)
    ex = Renewing(_executor())
    cfg = _config(tmp_path, ab_activations="5")
    r = _run(ex, AB.cases(cfg)[0], cfg)
    assert r.ab.verdict == "regressed" and abs(r.ab.ratio - 1.05) < 0.01, r.ab.reason
    runs = [i for i, x in enumerate(ex.log) if isinstance(x, tuple) and x[0] == "run"]
    assert [ex.log[i][1] for i in runs] == [0, 1, 2, 3, 4]
    assert ex.log.count("renew") == (4 if one_cpu else 0)
    if one_cpu:
        assert all(ex.log[i - 1] == "renew" for i in runs[1:])
    blocks = [x[1] for x in ex.log if isinstance(x, tuple) and x[0] == "block"]
    assert blocks == [s for o in r.ab.order for s in o] and len(blocks) == 20
    assert "ab_activation" not in r.details and r.duration_s > 0


def test_a_block_that_fails_ends_the_pairs_with_the_cases_row_naming_the_side(tmp_path, clocked):
    """A side's block that crashed (the supervisor's reply) ends the case: its row says which side and pair."""
    class Failing(Renewing):
        def measure_block(self, case, config, fresh):
            if case.variant.endswith("#b") and sum(1 for x in self.log if x[0] == "block") >= 5:
                return {"error": "crashed: the worker died (signal SIGSEGV)", "status": "crashed"}
            return super().measure_block(case, config, fresh)

    cfg = _config(tmp_path)
    r = _run(Failing(_executor()), AB.cases(cfg)[0], cfg)
    assert r.status == "crashed" and r.phase == "run" and r.reason.startswith("side B failed in pair "), r.reason
    assert "SIGSEGV" in r.reason


def test_the_worker_refuses_a_case_the_parent_does_not_drive(tmp_path, clocked):
    cfg = _config(tmp_path)
    r = CaseRunner(timer=Timer(CLOCK)).run(AB.cases(cfg)[0], cfg)
    assert r.status == "error" and "driven by the session" in r.reason


def test_a_side_the_runtime_cannot_take_is_the_cases_skip(tmp_path, clocked):
    config = _config(tmp_path, b="opt=basic")
    r = _run(_executor(), AB.cases(config)[0], config)
    assert r.status == "skipped" and r.reason.startswith("side B (fake-linear-fake-clocked-fp32-b1~opt=basic): ")
    assert "ort-session" in r.reason


def test_block_order_is_balanced_and_seeded():
    assert block_order(10, 0) == block_order(10, 0) and block_order(10, 0) != block_order(10, 1)
    odd = block_order(7, 3)
    assert len(odd) == 7 and abs(odd.count("ab") - odd.count("ba")) == 1
    c = CaseId("m", "ort-cpu", "fp32", 1, None, "cpu")
    assert side_case(c, "model:other").model == "other" and side_case(c, "opt=basic").variant == "opt=basic"


def test_the_planted_slowdown_spins_on_the_clock():
    t = {"now": 0}

    def clock():
        t["now"] += 1_000
        return t["now"]

    calls = []
    run = slowed(lambda: calls.append(1), 50_000, clock)
    run()
    assert calls == [1] and 50_000 <= t["now"] <= 52_000


@pytest.mark.e2e
def test_the_cli_runs_two_model_files_and_exits_1_on_a_regression(tmp_path, fake_env):
    """Two ONNX files through `harness ab` in a supervised worker: B has twice the work of A (a second MatMul
    chain) and is regressed; the JSON keeps both sides' blocks."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    def model(path, depth):
        w = numpy_helper.from_array(np.eye(256, dtype=np.float32), "w")
        nodes, x = [], "x"
        for i in range(depth):
            nodes.append(helper.make_node("MatMul", [x, "w"], [f"h{i}"]))
            x = f"h{i}"
        nodes.append(helper.make_node("Identity", [x], ["y"]))
        g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 256])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 256])], [w])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        m.ir_version = 8
        onnx.save(m, str(path))
        return str(path)

    a, b = model(tmp_path / "a.onnx", 8), model(tmp_path / "b.onnx", 32)
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "-m", "harness.cli", "ab", a, b, "--runtimes", "ort-cpu", "--batch-sizes",
                        "64", "--threads", "1", "--ab-pairs", "8", "--ab-block-time", "0.05", "--out", str(out)],
                       env=fake_env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "a-ort-cpu-fp32-b64 vs b: regressed - B/A " in p.stdout
    one_cpu = len(os.sched_getaffinity(0)) == 1 if hasattr(os, "sched_getaffinity") else False
    doc = json.loads((out / "results.json").read_text())
    (case,) = doc["cases"]
    # both sides' blocks, pair by pair: 8 pairs, or more where the verdict was not judged after 8 (a loaded machine)
    blocks = case["ab"]["blocks"]
    pairs = len(blocks) // 2
    assert case["ab"]["b_case"]["model"] == "b" and len(blocks) == 2 * pairs >= 16
    assert sorted((b["pair"], b["side"]) for b in blocks) == [(k, s) for k in range(pairs) for s in "ab"]
    assert not case["ab"]["b_vs_a"]["passed"] or case["ab"]["b_vs_a"]["max_abs"] == 0.0
    activations = len({b["activation"] for b in blocks})
    assert case["details"]["ab_workers"] == (activations if one_cpu else 1)
    html = (out / "report.html").read_text()
    assert 'id="ab"' in html and 'class="l verdict-regressed"' in html and f" of {pairs}</td>" in html


def test_detect_chooses_the_pairs_per_case_from_a_pilot(tmp_path, clocked):
    """--ab-detect: a pilot of 10 pairs, then as many more as the target needs from their spread (the fake's
    +-1% jitter: a 5% target needs few, a 1.5% target many more, never past the maximum)."""
    from harness.gating.ab import DETECT_MAX_PAIRS, DETECT_PILOT_PAIRS

    runner = _executor()
    loose = _run(runner, AB.cases(_config(tmp_path))[0], _config(tmp_path, ab_detect="0.05"))
    tight = _run(runner, AB.cases(_config(tmp_path))[0], _config(tmp_path, ab_detect="0.015"))
    n_loose, n_tight = len(loose.ab.order), len(tight.ab.order)
    assert n_loose >= DETECT_PILOT_PAIRS and n_tight > n_loose and n_tight <= DETECT_MAX_PAIRS, (n_loose, n_tight)
    assert loose.ab.verdict == tight.ab.verdict == "regressed"
    assert [b.side for b in tight.ab.blocks] == [s for o in tight.ab.order for s in o]


@pytest.mark.e2e
@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="os.sched_setaffinity not available")
@pytest.mark.parametrize("cpus", [1, 2])
def test_the_cli_on_one_cpu_makes_each_activation_in_a_new_worker(tmp_path, fake_env, cpus):
    """`harness ab` in supervised workers, the process given one CPU: each of its 4 activations in a worker of
    its own (ab_workers 4); given two (where the machine has them), all in one."""
    have = sorted(os.sched_getaffinity(0))
    if len(have) < cpus:
        pytest.skip(f"{cpus} CPUs asked, this process may use {len(have)}")
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "-m", "harness.cli", "ab", "base", "base", "--models", "fake-linear",
                        "--runtimes", "fake-ok", "--batch-sizes", "1", "--ab-pairs", "8", "--ab-activations", "4",
                        "--ab-budget", "0", "--ab-block-time", "0.002", "--out", str(out)],
                       env=fake_env, capture_output=True, text=True, timeout=300,
                       preexec_fn=lambda: os.sched_setaffinity(0, set(have[:cpus])))
    assert p.returncode in (0, 3), p.stdout + p.stderr  # A/A: a pass, or not judged on 8 pairs (never a verdict)
    (case,) = json.loads((out / "results.json").read_text())["cases"]
    assert {b["activation"] for b in case["ab"]["blocks"]} == {0, 1, 2, 3}
    assert case["details"]["ab_workers"] == (4 if cpus == 1 else 1), case["details"]


@pytest.mark.parametrize("runtime, status", [("fake-raises", "error"), ("fake-oom", "oom"),
                                             ("fake-segv-load", "crashed")])
def test_ab_exits_1_when_a_case_could_not_be_measured(runtime, status, tmp_path, fake_env):
    """An error, out-of-memory or crashed row is a failed A/B run (exit 1, the row named), never 0 as if both
    sides had been compared."""
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "-m", "harness.cli", "ab", "base", "threads=2", "--models", "fake-linear",
                        "--runtimes", runtime, "--batch-sizes", "1", "--ab-pairs", "2", "--ab-block-time", "0.002",
                        "--case-timeout", "60", "--out", str(out)],
                       env=fake_env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 1, p.stdout + p.stderr
    assert f"1 case(s) not measured: fake-linear-{runtime}-fp32-b1 {status}" in p.stdout
    (case,) = json.loads((out / "results.json").read_text())["cases"]
    assert case["status"] == status
