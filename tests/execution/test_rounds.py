"""--repeats in rounds: later blocks of every case at the end of the run, a matrix sweep apart; --confirm."""

from __future__ import annotations

import json
from typing import Any

import pytest

from harness.config import RunConfig
from harness.measure.timer import TimingPolicy
from harness.execution.rounds import confirm_rounds, later_rounds, merge_block, pending_rounds
from harness.execution.session import HarnessSession
from harness.results.schema import Block, CaseId, CaseResult, RunResults
from harness.workloads import get_workload
from harness.results.stored import RunEnvironmentRecord


def _config(tmp_path, **kw: Any) -> RunConfig:
    settings: dict[str, Any] = dict(models=("fake-linear",), runtimes=("fake-ok", "fake-ok-b"), batch_sizes=(1, 2),
                                    timing=TimingPolicy(min_time_s=0.01, min_iters=6, warmup_iters=1),
                                    cache_dir=tmp_path / "cache", out_dir=tmp_path / "out", repeats=3,
                                    isolation=False)
    return RunConfig.build(**{**settings, **kw})


class Recorder:
    """Wraps an executor: the order of measure_block calls, and its `fresh` flags."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.calls = inner, []

    def measure_block(self, case: CaseId, config: Any, fresh: bool = True) -> dict[str, Any]:
        self.calls.append((case.id, fresh))
        return self.inner.measure_block(case, config, fresh)

    def close(self) -> None:
        self.inner.close()


def _run_session(config: RunConfig) -> HarnessSession:
    session = HarnessSession(config)
    assert session.run_cases(get_workload(config.workload).cases(config))
    return session


@pytest.mark.e2e
def test_later_blocks_come_in_rounds_over_the_matrix(fakes, tmp_path):
    config = _config(tmp_path)
    session = HarnessSession(config)
    cases = get_workload(config.workload).cases(config)
    for case in cases:
        r = session.execute(case)
        assert r.status == "passed" and r.blocks_pending == 2 and len(r.blocks) == 1
    assert pending_rounds(session.run) == 2
    session.executor = rec = Recorder(session.executor)
    session.finish(interrupted=False)
    # round-major: every case once, then every case again; a fresh activation where the group changes
    ids = [c.id for c in cases]
    assert [c for c, _ in rec.calls] == ids + ids
    assert [f for _, f in rec.calls] == [True, False, True, False] * 2
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    for c in doc["cases"]:
        sizes = [b["samples"] for b in c["blocks"]]
        assert len(sizes) == 3 and sum(sizes) == len(c["samples_ns"]) == c["latency"]["iterations"]
        assert min(sizes) >= 2 and all(b["p50_ms"] > 0 and b["error"] is None for b in c["blocks"])
        assert [b["kind"] for b in c["blocks"]] == ["case", "round", "round"] and c["blocks_pending"] == 0
        assert not {"blocks", "block_p50_ms", "blocks_pending"} & set(c["details"])
    assert doc["complete"] is True


def test_compile_like_runtimes_measure_their_blocks_back_to_back(fakes, tmp_path):
    from harness.runtimes import get_runtime

    cls = get_runtime("fake-ok-c")
    old = cls.reactivate_between_repeats
    cls.reactivate_between_repeats = False
    try:
        session = _run_session(_config(tmp_path, runtimes=("fake-ok-c",), batch_sizes=(1,)))
    finally:
        cls.reactivate_between_repeats = old
    [r] = session.run.cases
    assert len(r.blocks) == 3 and not any(b.reactivated for b in r.blocks) and r.blocks_pending == 0
    assert {b.kind for b in r.blocks} == {"case"}


def test_repeats_1_has_no_rounds(fakes, tmp_path):
    session = _run_session(_config(tmp_path, repeats=1, batch_sizes=(1,)))
    assert all(r.blocks == [] and r.blocks_pending == 0 for r in session.run.cases)


class _FailingBlocks:
    def __init__(self, fail_on: int) -> None:
        self.n, self.fail_on = 0, fail_on

    def measure_block(self, case: CaseId, config: Any, fresh: bool = True) -> dict[str, Any]:
        self.n += 1
        if self.n == self.fail_on:
            return {"error": "crashed: worker killed by SIGSEGV in phase run"}
        return {"samples_ns": [2000, 2100, 2050], "device_samples_ns": [], "warmup_iters": 1, "reactivated": fresh}


def _measured(case: CaseId, pending: int = 2) -> CaseResult:
    from harness.results.stats import latency_stats

    ns = [1000, 1100, 1050, 1020]
    return CaseResult(case, "passed", samples_ns=ns, latency=latency_stats(ns), throughput_sps=1.0,
                      warmup_iters=3, blocks=[Block(4, 0.001035)], blocks_pending=pending)


def test_a_failed_block_costs_that_block_only(tmp_path):
    cases = [CaseId("m", "rt", "fp32", b, None, "cpu") for b in (1, 2)]
    run = RunResults("r", "t", RunEnvironmentRecord(), {}, cases=[_measured(c) for c in cases] + [
        CaseResult(CaseId("m", "rt", "fp32", 4, None, "cpu"), "error", reason="bad")])
    writes = []
    added = later_rounds(run, _FailingBlocks(fail_on=2), RunConfig.build(noise_cv=0.1),
                         after_block=lambda: writes.append(1))
    assert added == 3 and len(writes) == 4
    a, b = run.cases[0], run.cases[1]
    assert [x.samples for x in a.blocks] == [4, 3, 3] and len(a.samples_ns) == 10 and a.latency.iterations == 10
    assert a.blocks[1] == Block(3, 0.00205, "round", reactivated=True)
    assert [x.samples for x in b.blocks] == [4, 0, 3] and [x.error for x in b.blocks] == [
        None, "crashed: worker killed by SIGSEGV in phase run", None]
    assert a.blocks_pending == 0 and b.blocks_pending == 0
    assert a.warmup_iters == 5 and a.latency.p50_ms > 0.001  # statistics over all blocks


def test_merge_block_keeps_device_samples_in_step():
    from harness.results.stats import latency_stats

    r = _measured(CaseId("m", "rt", "fp32", 1, None, "cuda"))
    r.device_samples_ns = [900, 950, 920, 930]
    merge_block(r, {"samples_ns": [1000, 1001], "device_samples_ns": [800, 810], "warmup_iters": 2}, 0.1)
    assert r.device_samples_ns[-2:] == [800, 810] and r.details["device_latency"]["iterations"] == 6
    assert r.blocks[-1] == Block(2, 0.001001, "round")  # ms to the nanosecond
    assert r.latency == latency_stats(r.samples_ns, 0.1)
    merge_block(r, {"samples_ns": []}, 0.1)
    assert r.blocks[-1] == Block(0, None, "round", error="the block measured no samples")
    assert sum(b.samples for b in r.blocks) == len(r.samples_ns)


def test_a_block_merged_into_a_one_block_case_records_that_block_first():
    r = _measured(CaseId("m", "rt", "fp32", 1, None, "cpu"))
    r.blocks = []
    merge_block(r, {"samples_ns": [2000, 2002], "reactivated": True}, 0.1, "confirm")
    assert r.blocks == [Block(4, 0.001035, "case"), Block(2, 0.002001, "confirm", reactivated=True)]
    assert r.confirm_blocks == 1


@pytest.mark.parametrize("isolation", [False, True])
def test_a_block_that_crashes_its_worker_is_recorded_and_the_run_goes_on(fakes, fake_env, tmp_path, isolation):
    """fake-crash-second fails on the second activation in a process: round 2's block. In a worker it dies of
    SIGSEGV (the next block gets a fresh worker); in-process it raises. Either way the case keeps rounds 1 and
    3, records why round 2 is missing, and the other case is untouched."""
    config = _config(tmp_path, runtimes=("fake-crash-second", "fake-ok"), batch_sizes=(1,), isolation=isolation)
    session = _run_session(config)
    crash, ok = session.run.cases
    assert crash.status == "passed" and ok.status == "passed"
    assert len(ok.blocks) == 3 and all(b.error is None for b in ok.blocks)
    assert len(crash.block_sizes) == 2 and [b.samples for b in crash.blocks if b.error] == [0]
    assert ("crashed: worker killed by SIGSEGV" if isolation else "RuntimeError: second activation") in \
        next(b.error for b in crash.blocks if b.error)
    assert sum(b.samples for b in crash.blocks) == len(crash.samples_ns)


# ------------------------------------------------------------------ --confirm
class _BlocksAt:
    """measure_block returning samples around `level_ns`: a fake re-measurement."""

    def __init__(self, level_ns: float) -> None:
        self.level, self.calls = level_ns, 0

    def measure_block(self, case: CaseId, config: Any, fresh: bool = True) -> dict[str, Any]:
        import numpy as np

        self.calls += 1
        rng = np.random.default_rng(self.calls)
        return {"samples_ns": [int(v) for v in self.level * rng.lognormal(0, 0.02, 200)], "warmup_iters": 1,
                "reactivated": True}

    def close(self) -> None:
        pass


def _gate_session(tmp_path, current_level_ns: float, confirm: int) -> HarnessSession:
    import numpy as np

    from harness.results import write_results

    case = CaseId("mlp", "ort-cpu", "fp32", 1, None, "cpu")
    rng = np.random.default_rng(0)

    def result(level: float) -> CaseResult:
        from harness.results.stats import latency_stats

        ns = [int(v) for v in level * rng.lognormal(0, 0.02, 600)]
        return CaseResult(case, "passed", samples_ns=ns, latency=latency_stats(ns), throughput_sps=1.0,
                          blocks=[Block.measured(ns[i:i + 200], "case") for i in (0, 200, 400)],
                          model_fingerprint="fp", timing_scope="host_to_host")

    env = {"cpu_model": "x", "cpu_cores_logical": 2}
    base = RunResults("base", "t", RunEnvironmentRecord.from_dict(env), {}, cases=[result(20_000)], complete=True)
    write_results(base, tmp_path / "base")
    session = HarnessSession(RunConfig.build(models=("mlp",), runtimes=("ort-cpu",), out_dir=tmp_path / "cur",
                                       baseline=str(tmp_path / "base"), confirm=confirm,
                                       isolation=False))
    session.run = RunResults("cur", "t", RunEnvironmentRecord.from_dict(env), {}, cases=[result(26_000)], complete=True)
    session.executor = _BlocksAt(current_level_ns)
    session.config.outputs.out_dir.mkdir(parents=True, exist_ok=True)
    return session


def test_confirm_clears_a_slowdown_that_does_not_reproduce(tmp_path):
    session = _gate_session(tmp_path, current_level_ns=20_100, confirm=2)
    session._gate()
    assert session.gate_status() == 0 and session.executor.calls == 2
    [rec] = [r for r in session.comparison.records if r.metric == "latency_median"]
    assert rec.verdict.value == "pass" and "best of 3/5 blocks" in rec.reason
    assert any("not reproduced: mlp-ort-cpu-fp32-b1" in n for n in session.comparison.notes)
    r = session.run.cases[0]
    assert r.confirm_blocks == 2 and len(r.blocks) == 5 and [b.kind for b in r.blocks[3:]] == ["confirm"] * 2
    assert "not reproduced" in (tmp_path / "cur" / "verdicts.md").read_text()


def test_confirm_keeps_a_slowdown_that_reproduces(tmp_path):
    session = _gate_session(tmp_path, current_level_ns=26_000, confirm=2)
    session._gate()
    assert session.gate_status() == 1
    assert any("1 still regressed" in n for n in session.comparison.notes)


def test_confirm_0_judges_once(tmp_path):
    session = _gate_session(tmp_path, current_level_ns=20_000, confirm=0)
    session._gate()
    assert session.gate_status() == 1 and session.executor.calls == 0


def test_confirm_rounds_only_touch_the_suspects(tmp_path):
    cases = [CaseId("m", "rt", "fp32", b, None, "cpu") for b in (1, 2)]
    run = RunResults("r", "t", RunEnvironmentRecord(), {}, cases=[_measured(c, pending=0) for c in cases])
    ex = _BlocksAt(1000)
    assert confirm_rounds(run, {cases[1].id}, ex, RunConfig.build(noise_cv=0.1), 3) == 3
    assert run.cases[0].confirm_blocks == 0 and run.cases[1].confirm_blocks == 3


@pytest.fixture(autouse=True)
def _crash_second(fakes):
    """fake-crash-second (tests/fakes.py) counts activations per process: start each test at zero."""
    fakes._CrashSecond.activations = 0
    yield
