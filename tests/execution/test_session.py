"""HarnessSession.run_cases: the one loop that drives a list of cases (finished or stopped, broken cases said)."""

from __future__ import annotations

import io
import json
import signal
from typing import Any

import pytest

from harness.config import RunConfig
from harness.errors import SignalStop
from harness.execution.session import HarnessSession
from harness.report.progress import RunProgress
from harness.results.schema import CaseId, CaseResult
from harness.workloads import get_workload


class _Scripted:
    """An executor whose cases end as scripted: a status each, or a callable run in the case's place (raising)."""

    def __init__(self, script: list[Any]) -> None:
        self.script, self.ran, self.closed = list(script), [], False

    def run(self, case: CaseId, config: Any, payload: Any) -> CaseResult:
        self.ran.append(case.id)
        step = self.script.pop(0)
        if callable(step):
            step()
        return CaseResult(case, step, reason="worker died\x1b[31m" if step != "passed" else "")

    def measure_block(self, case: CaseId, config: Any, fresh: bool = True) -> dict[str, Any]:
        raise AssertionError("no later blocks with repeats=1")

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def restore_signals():
    """A session stopped by a signal keeps absorbing signals until the process ends: put the test's back."""
    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for s, handler in old.items():
        signal.signal(s, handler)


def _session(tmp_path, script: list[Any], case_lines: bool = False) -> tuple[HarnessSession, list[CaseId], _Scripted]:
    config = RunConfig.build(models=("fake-linear",), runtimes=("fake-ok", "fake-ok-b", "fake-ok-c"),
                             batch_sizes=(1,), out_dir=tmp_path / "out", isolation=False, repeats=1)
    stream = io.StringIO()
    session = HarnessSession(config, progress=RunProgress(stream, live=False, case_lines=case_lines))
    session.start()
    executor = session.executor = _Scripted(script)
    return session, get_workload(config.workload).cases(config), executor


def _stored(tmp_path) -> dict[str, Any]:
    return json.loads((tmp_path / "out" / "results.json").read_text())


def test_run_cases_runs_every_case_in_order_and_finishes_the_session(fakes, tmp_path, restore_signals):
    session, cases, executor = _session(tmp_path, ["passed", "passed", "passed"])
    seen: list[str] = []
    assert session.run_cases(cases, on_result=lambda r: seen.append(r.case.id)) is True
    assert seen == executor.ran == [c.id for c in cases] and len(cases) == 3
    assert executor.closed and session.run.complete and not session.run.interrupted
    stored = _stored(tmp_path)
    assert stored["complete"] and [c["case"]["runtime"] for c in stored["cases"]] == ["fake-ok", "fake-ok-b",
                                                                                      "fake-ok-c"]


def test_a_broken_case_gets_its_line_where_the_progress_shows_no_case_lines(fakes, tmp_path, restore_signals):
    session, cases, _ = _session(tmp_path, ["passed", "crashed", "timeout"])
    assert session.run_cases(cases)
    text = session.progress.stream.getvalue()
    assert f"  {cases[1].id}: crashed: worker died\\x1b[31m" in text  # the reason made safe to show
    assert f"  {cases[2].id}: timeout: worker died" in text
    assert cases[0].id not in text  # a case that passed: no line of its own


def test_with_case_lines_a_broken_case_is_said_once_by_its_case_line(fakes, tmp_path, restore_signals):
    session, cases, _ = _session(tmp_path, ["passed", "crashed", "passed"], case_lines=True)
    assert session.run_cases(cases)
    text = session.progress.stream.getvalue()
    assert "crashed" in text and f"  {cases[1].id}: crashed: worker died" not in text


def test_a_signal_stops_the_cases_keeps_what_finished_and_is_raised_again_as_itself(fakes, tmp_path,
                                                                                     restore_signals):
    session = None

    def sigterm() -> None:
        session._on_signal(signal.SIGTERM, None)

    session, cases, executor = _session(tmp_path, ["passed", sigterm, "passed"])
    seen: list[str] = []
    assert session.run_cases(cases, on_result=lambda r: seen.append(r.case.id)) is False
    assert executor.ran == seen + [cases[1].id] and seen == [cases[0].id]  # the third never started
    assert executor.closed and session.run.interrupted and not session.run.complete
    stored = _stored(tmp_path)
    assert stored["interrupted"] and [c["case"]["runtime"] for c in stored["cases"]] == ["fake-ok"]
    assert session.exit_status() == 143
    again = session.interrupt()
    assert isinstance(again, SignalStop) and again.signum == signal.SIGTERM


def test_a_ctrl_c_stops_the_cases_and_is_raised_again_as_a_plain_interrupt(fakes, tmp_path, restore_signals):
    def ctrl_c() -> None:
        raise KeyboardInterrupt

    session, cases, _ = _session(tmp_path, ["passed", "passed", ctrl_c])
    assert session.run_cases(cases) is False
    assert len(session.run.cases) == 2 and session.run.interrupted
    assert session.exit_status() is None and type(session.interrupt()) is KeyboardInterrupt


def test_stopped_before_the_session_started_nothing_is_written_and_the_interrupt_goes_on(fakes, tmp_path,
                                                                                          monkeypatch):
    config = RunConfig.build(models=("fake-linear",), runtimes=("fake-ok",), batch_sizes=(1,),
                             out_dir=tmp_path / "out", isolation=False)

    def interrupted(self: HarnessSession) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(HarnessSession, "start", interrupted)
    session = HarnessSession(config)
    with pytest.raises(KeyboardInterrupt):
        session.run_cases(get_workload(config.workload).cases(config))
    assert session.run is None and not (tmp_path / "out" / "results.json").exists()
