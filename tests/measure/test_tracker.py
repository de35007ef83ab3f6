"""The tracker registry (harness.measure.tracker): a tracker is one class plus one registry line, entered through one
context stack around every block of every round (the case's own, later --repeats rounds, --settle re-measures)."""

from __future__ import annotations

from contextlib import contextmanager

import pytest

from harness.measure import tracker as tr
from harness.measure.tracker import TrackerKind, Window, merge_tracked, register_tracker, tracking
from harness.results.stored import BlockContention


class BlockCounter:
    """A new block tracker, written in this file only: it counts the blocks and calls it is entered around and
    checks it is entered before the timed calls start and left after them."""

    made = 0

    def __init__(self, ctx: tr.TrackerContext) -> None:
        BlockCounter.made += 1
        self.batch = ctx.batch
        self.blocks: list[int] = []

    @contextmanager
    def track(self, window: Window):
        timed: list[bool] = []
        window.on_timed(lambda: timed.append(True))
        yield
        assert timed == [True], "the timed part started inside the block's scope"
        self.blocks.append(window.calls)

    def fields(self, window: Window) -> dict:
        return {"block_counter": {"blocks": len(self.blocks), "calls": sum(self.blocks)}}


def _add(a: dict, b: dict) -> dict:
    return {"blocks": a["blocks"] + b["blocks"], "calls": a["calls"] + b["calls"]}


class CaseCounter:
    """A new case tracker: entered once per case, told once that the timed blocks start."""

    def __init__(self, ctx: tr.TrackerContext) -> None:
        self.entered = self.timed = 0
        self.reused: bool | None = None

    @contextmanager
    def track(self, window: Window):
        self.entered += 1
        window.on_timed(self._timed)
        yield
        self.reused = window.reused

    def _timed(self) -> None:
        self.timed += 1

    def fields(self, window: Window) -> dict:
        return {"case_counter": {"entered": self.entered, "timed": self.timed, "reused": self.reused}}


@pytest.fixture
def registry(monkeypatch):
    """The registry as it is, restored after the test (a test registers its own tracker with one line)."""
    monkeypatch.setattr(tr, "TRACKERS", dict(tr.TRACKERS))
    return tr.TRACKERS


def _config(tmp_path, repeats: int, **more):
    from harness.options import OPTIONS, parse_run_options

    raw = {o.dest: None for o in OPTIONS}
    raw.update(models="fake-linear", runtimes="fake-ok", batch_sizes="2", min_time="0.005", min_iters="3",
               warmup="1", repeats=str(repeats), threads="1", cache_dir=str(tmp_path / "c"), out=str(tmp_path / "o"),
               **more)
    return parse_run_options(raw)


def test_a_new_tracker_is_one_class_and_one_line_and_runs_in_every_block_of_every_round(tmp_path, fakes, registry):
    from harness.execution import CaseRunner
    from harness.execution.rounds import later_rounds
    from harness.results.schema import CaseId, CaseResult, RunResults

    register_tracker("block_counter", TrackerKind("block", BlockCounter, _add))  # the one line
    config = _config(tmp_path, repeats=3)
    runner = CaseRunner(defer_blocks=True)  # as a session: one block now, two in later rounds
    r = runner.run(CaseId("fake-linear", "fake-ok", "fp32", 2, None, "cpu"), config)
    assert r.status == "passed" and r.blocks_pending == 2
    assert r.details["block_counter"]["blocks"] == 1
    assert later_rounds(RunResults(run_id="x", started_at="", cases=[r]), runner, config) == 2
    counted = r.details["block_counter"]
    assert counted["blocks"] == 3 == len(r.blocks)  # every block of every round
    assert counted["calls"] == r.warmup_iters + len(r.samples_ns)  # warm-up calls included, none lost
    # stored with the case and read back (no schema change needed for a first tracker)
    assert CaseResult.from_dict(r.as_dict()).details["block_counter"] == counted
    # the registry's own block trackers ran in the later rounds too: every block carries its contention
    assert all(b.contention is not None for b in r.blocks) and r.contention.blocks == 3
    assert r.energy is not None and r.energy.status in ("unavailable", "refused", "measured")


def test_blocks_measured_in_the_case_and_settle_re_measures_are_tracked(tmp_path, fakes, registry, monkeypatch):
    from harness.execution import CaseRunner
    from harness.results.schema import CaseId

    register_tracker("block_counter", TrackerKind("block", BlockCounter, _add))
    calls = []

    class Probe:  # the contention tracker's probe: the first block contended, every other one clean
        def __init__(self, threads, limit):
            pass

        def start(self):
            pass

        def stop(self):
            calls.append(1)
            return BlockContention(contended=len(calls) == 1, cause="planted",
                                   wait_fraction=0.5 if len(calls) == 1 else 0)

    monkeypatch.setattr("harness.measure.contention.ContentionProbe", Probe)
    monkeypatch.setattr("harness.workloads.forward.workload.wait_quiet", lambda threads, s: {"quiet": True})
    r = CaseRunner().run(CaseId("fake-linear", "fake-ok", "fp32", 2, None, "cpu"), _config(tmp_path, 2, settle="1"))
    # two blocks of the case and the first one measured again after --settle: three blocks tracked
    assert r.details["block_counter"]["blocks"] == 3 and len(calls) == 3
    assert len(r.blocks) == 2 and not r.contention.contended


def test_a_case_tracker_is_entered_once_around_the_activation_and_told_when_the_timing_starts(tmp_path, fakes,
                                                                                              registry):
    from harness.execution import CaseRunner
    from harness.results.schema import CaseId

    register_tracker("case_counter", TrackerKind("case", CaseCounter))
    runner = CaseRunner()
    first = runner.run(CaseId("fake-linear", "fake-ok", "fp32", 2, None, "cpu"), _config(tmp_path, 2))
    assert first.details["case_counter"] == {"entered": 1, "timed": 1, "reused": False}
    second = runner.run(CaseId("fake-linear", "fake-ok", "fp32", 1, None, "cpu"), _config(tmp_path, 1))
    assert second.details["case_counter"]["reused"] is True  # same activation, another shape
    # memory, a case tracker of the registry, fills the same fields as before
    assert second.memory is not None and second.host_peak_mb is not None
    assert "activation was reused" in second.memory.covers


def test_trackers_are_left_in_reverse_order_also_when_the_scope_raises():
    seen = []

    class T:
        def __init__(self, name):
            self.name = name

        @contextmanager
        def track(self, window):
            seen.append(f"enter {self.name}")
            try:
                yield
            finally:
                seen.append(f"leave {self.name}")

        def fields(self, window):
            return {}

    with pytest.raises(RuntimeError), tracking({"a": T("a"), "b": T("b")}, Window()):
        raise RuntimeError("the block failed")
    assert seen == ["enter a", "enter b", "leave b", "leave a"]


def test_merge_tracked_merges_by_the_trackers_rule_and_takes_a_new_field_as_it_is(registry):
    register_tracker("block_counter", TrackerKind("block", BlockCounter, _add))
    merged = merge_tracked({"block_counter": {"blocks": 1, "calls": 5}},
                           {"block_counter": {"block_counter": {"blocks": 1, "calls": 4}}})
    assert merged == {"block_counter": {"blocks": 2, "calls": 9}}
    assert merge_tracked({}, {"block_counter": {"block_counter": {"blocks": 1, "calls": 4}}}) == {
        "block_counter": {"blocks": 1, "calls": 4}}


def test_energy_of_a_later_block_adds_to_the_case():
    from harness.measure.energy import merge_energy
    from harness.results.schema import EnergyRecord, EnergySource

    def rec(joules, net, window, calls):
        per = net / calls
        return EnergyRecord(status="measured", calls=calls, batch=2, sources=[
            EnergySource("package-0", "rapl", joules, window, (joules - net) / window, net, 0.01, 0.001)],
            net_joules=net, uncertainty_j=0.01, joules_per_inference=per, joules_per_sample=per / 2,
            inferences_per_joule=1 / per, method="m")

    m = merge_energy(rec(30.0, 10.0, 1.0, 100), rec(50.0, 20.0, 1.5, 200))
    assert m.status == "measured" and m.calls == 300 and m.net_joules == pytest.approx(30.0)
    assert m.joules_per_inference == pytest.approx(0.1) and m.joules_per_sample == pytest.approx(0.05)
    (s,) = m.sources
    assert s.joules == 80.0 and s.window_s == 2.5 and s.idle_w == pytest.approx((20 * 1 + 20 * 1.5) / 2.5)
    assert m.uncertainty_j == pytest.approx(0.02)
    refused = EnergyRecord(status="refused", reason="a 5 ms block is shorter", calls=50)
    assert merge_energy(rec(30.0, 10.0, 1.0, 100), refused).calls == 150  # its calls counted, as one tracker does
    gone = EnergyRecord(status="unavailable", reason="a counter stopped answering")
    assert merge_energy(rec(30.0, 10.0, 1.0, 100), gone).status == "unavailable"
    assert merge_energy(gone, rec(30.0, 10.0, 1.0, 100)).status == "unavailable"
