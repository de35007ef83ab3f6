"""--settle: waiting for a quiet machine (fake kernel readings) and re-measuring a contended block."""

from __future__ import annotations

import pytest

from harness.measure.contention import Snapshot, wait_quiet


class FakeMachine:
    """Snapshots whose other-process CPU use per window follows `others` (cores), one value per window."""

    def __init__(self, others):
        self.others, self.t, self.busy, self.reads = list(others), 0, 0.0, 0

    def read(self):
        self.reads += 1
        return Snapshot(self.t, None, None, None, 0.0, None, None, self.busy)

    def sleep(self, s):
        load = self.others.pop(0) if self.others else 0.0
        self.t += int(s * 1e9)
        self.busy += load * s


def test_waits_until_enough_cores_are_free(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    m = FakeMachine([2.0, 1.5, 0.9, 0.0])
    got = wait_quiet(1, timeout_s=60, read=m.read, sleep=m.sleep)
    assert got["quiet"] and got["looks"] == 3 and got["cores_free"] == pytest.approx(1.1)


def test_gives_up_at_the_bound_and_says_so(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    m = FakeMachine([2.0] * 100)
    got = wait_quiet(2, timeout_s=0.0, read=m.read, sleep=m.sleep)
    assert not got["quiet"] and got["looks"] == 1 and got["cores_free"] == 0.0


def _planted(monkeypatch, contended_call: int):
    """The forward workload's contention probe contended on its `contended_call`-th block only, and its quiet waits
    recorded (their bounds, in `waits`)."""
    from harness.results.stored import BlockContention
    from harness.workloads.forward import workload as fw

    class Probe:
        calls = 0

        def __init__(self, threads, limit):
            pass

        def start(self):
            pass

        def stop(self):
            Probe.calls += 1
            if Probe.calls == contended_call:
                return BlockContention(contended=True, cause="planted", wait_fraction=0.5)
            return BlockContention(contended=False, wait_fraction=0.0)

    waits: list[float] = []
    monkeypatch.setattr("harness.measure.contention.ContentionProbe", Probe)  # the contention tracker's probe
    monkeypatch.setattr(fw, "wait_quiet", lambda threads, s: waits.append(s) or {"quiet": True, "waited_s": 0.1})
    return waits


def _settle_config(tmp_path):
    from harness.options import OPTIONS, parse_run_options

    raw = {o.dest: None for o in OPTIONS}
    raw.update(models="fake-linear", runtimes="fake-ok", batch_sizes="2", min_time="0.01", min_iters="3",
               warmup="1", repeats="2", settle="5", threads="1", cache_dir=str(tmp_path / "c"),
               out=str(tmp_path / "o"))
    return parse_run_options(raw)


def test_a_contended_block_is_measured_again_and_both_are_kept(tmp_path, monkeypatch, fakes):
    from harness.execution import CaseRunner
    from harness.results.schema import CaseId

    waits = _planted(monkeypatch, 1)  # the first block is contended, every later one clean
    config = _settle_config(tmp_path)
    assert config.measure.settle_s == 5.0
    r = CaseRunner().run(CaseId("fake-linear", "fake-ok", "fp32", 2, None, "cpu"), config)
    settle = r.details["settle"]
    assert waits == [5.0, 5.0]  # before the case, then before the re-measure
    (again,) = settle["remeasured"]
    assert again["block"] == 0 and again["contention"]["cause"] == "planted" and not again["contended_again"]
    assert len(again["samples_ns"]) >= 2  # the contended block's raw samples, kept
    assert not r.contention.contended and r.contention.blocks == 2  # the case is judged on clean blocks
    assert sum(b.samples for b in r.blocks) == len(r.samples_ns)


def test_settle_holds_in_later_rounds_and_says_so(tmp_path, monkeypatch, fakes):
    """--repeats 2 with the second block measured in a later round: that block came out contended and was kept
    silently. It is now waited out and measured again, the contended one kept beside it, and the round's line
    says so."""
    from harness.execution import CaseRunner
    from harness.execution.rounds import later_rounds
    from harness.results.schema import CaseId, RunResults

    _planted(monkeypatch, 2)  # the case's own block clean, the later round's first block contended, then clean
    config = _settle_config(tmp_path)
    runner = CaseRunner(defer_blocks=True)
    r = runner.run(CaseId("fake-linear", "fake-ok", "fp32", 2, None, "cpu"), config)
    assert r.blocks_pending == 1 and "remeasured" not in r.details.get("settle", {})
    lines = []

    class Progress:
        def start(self, *a): ...
        def begin(self, *a): ...
        def end(self, line): lines.append(line)
        def note(self, *a): ...

    run = RunResults(run_id="x", started_at="", cases=[r])
    assert later_rounds(run, runner, config, progress=Progress()) == 1
    (again,) = r.details["settle"]["remeasured"]
    assert again["contention"]["cause"] == "planted" and not again["contended_again"] and again["block"] == 1
    assert not r.contention.contended  # judged on the re-measured, clean block
    assert "re-measured after a contended block" in lines[0] and "quiet" in lines[0]
