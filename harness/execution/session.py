"""HarnessSession: the one driver of every workload: config, executor, results written after every case, outputs."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import io
import os
import shutil
import signal
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from harness import __version__
from harness.config import RunConfig
from harness.display import visible
from harness.errors import HarnessError, SignalStop
from harness.execution.worker import InProcessExecutor
from harness.execution.rounds import confirm_rounds, later_rounds, pending_rounds
from harness.execution.supervisor import IsolatedExecutor
from harness.measure.cpu import OthersCpu
from harness.measure.timer import measure_overhead
from harness.report.progress import RunProgress, case_line, write_case_log
from harness.results.environment import gpu_end_snapshot, snapshot
from harness.results.schema import CaseId, CaseResult, RunResults
from harness.results.store import ResultsWriter, write_results
from harness.workloads import Workload, get_workload


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


class HarnessSession:
    """One run of one workload: `harness run` and plain pytest (created lazily by the plugin when the first case
    runs), `harness conform`, ab, qualify, gate, gate-check, bisect and each Ray shard drive their cases through
    it, so every case gets the same isolation, progress, atomic write of results.json, signal handling, rounds
    and report. A list of cases run start to end is one call: `run_cases`."""

    finishing = False  # signals_watched: set once a signal must wait for the files being written

    def __init__(self, config: RunConfig, progress: RunProgress | None = None) -> None:
        self.config = config
        self.workload: Workload = get_workload(config.workload)
        self.progress = progress if progress is not None else RunProgress(io.StringIO(), live=False)
        self.run: RunResults | None = None
        self.executor: Any = None
        self.outputs: dict[str, Path] = {}
        self._old_handlers: dict[int, Any] = {}
        self.stop_signal: int | None = None  # the first SIGINT/SIGTERM: an orderly stop is under way
        self._cpu: OthersCpu | None = None
        self.comparison: Any = None  # harness.gating.Comparison when --baseline was given
        self.gate_error: str | None = None  # a baseline that could not be compared (usage error)
        self.gate_outputs: dict[str, Path] = {}  # verdicts.md / verdicts.json
        self._writer = ResultsWriter(config.outputs.out_dir)

    @property
    def started(self) -> bool:
        return self.run is not None

    def start(self) -> None:
        cfg = self.config
        out_dir = cfg.outputs.out_dir
        out_dir.mkdir(parents=True, exist_ok=True)
        env = snapshot(threads=cfg.measure.threads)
        env.harness_overhead = measure_overhead()
        self.run = RunResults(run_id=cfg.outputs.run_id, started_at=_now(), environment=env,
                              config={**cfg.as_dict(), **self.workload.run_record(cfg)}, harness_version=__version__)
        defer = cfg.measure.repeats > 1  # later blocks in rounds over the whole matrix (harness.execution.rounds)
        self.executor = (IsolatedExecutor(defer_blocks=defer, say=self.progress.note) if cfg.process.isolation
                         else InProcessExecutor(defer_blocks=defer))
        write_results(self.run, out_dir)
        self._cpu = OthersCpu()
        self._watch_signals()

    def _watch_signals(self) -> None:
        """SIGINT and SIGTERM: the first stops the run (no new case, no new round), keeps what finished and writes
        the report; any further signal during that stop is absorbed."""
        for signum in (signal.SIGINT, signal.SIGTERM):
            try:
                self._old_handlers[signum] = signal.signal(signum, self._on_signal)
            except ValueError:  # not the main thread
                pass

    def _restore_signals(self) -> None:
        for signum, old in self._old_handlers.items():
            signal.signal(signum, old)
        self._old_handlers.clear()

    @contextlib.contextmanager
    def signals_watched(self) -> Iterator[HarnessSession]:
        """The session's signal rule around work a command drives itself, without cases (recommend's searches):
        the first SIGINT or SIGTERM raises SignalStop in the main thread (`stop_signal` set), any further one is
        absorbed, and once `finishing` is set a signal waits for the files being written (recorded, not raised);
        the old handlers come back after."""
        self._watch_signals()
        try:
            yield self
        finally:
            self._restore_signals()

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self.stop_signal is not None:
            return  # a second signal during the orderly stop: absorbed
        self.stop_signal = signum
        if self.finishing:  # the verdict is made: its files are written first, the exit still says the signal
            return
        self.progress.note(f"{signal.Signals(signum).name}: stopping (no new cases or rounds); writing what "
                           "finished and the report; further signals are ignored")
        raise SignalStop(signum)

    @property
    def stopping(self) -> bool:
        return self.stop_signal is not None

    def exit_status(self) -> int | None:
        """128 + the signal number for a run stopped by a signal (130 SIGINT, 143 SIGTERM), else None."""
        return 128 + self.stop_signal if self.stop_signal is not None else None

    def execute(self, case: CaseId, config: RunConfig | None = None) -> CaseResult:
        """Run `case` in the supervised worker and store its row; `config` (another workload's, e.g. the
        gate's tonight-only cases run as forward cases) defaults to the session's."""
        if not self.started:
            self.start()
        assert self.run is not None
        if self.stopping:
            raise KeyboardInterrupt("the run is stopping")
        cfg = config if config is not None else self.config
        workload = self.workload if config is None else get_workload(cfg.workload)
        self.progress.begin(case.id)
        cpu = OthersCpu()
        try:
            payload = workload.payload(case, cfg)
            result = workload.annotate(case, workload.execute(self.executor, case, cfg, payload))
        except Exception as exc:  # noqa: BLE001 - what fails here, in the harness's own process (preparing the
            # case, reaching its worker or environment: an unwritable cache folder), is the case's error with its
            # reason, never a case missing from a run that says it is complete
            why = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            result = CaseResult(case, "error", phase="setup", reason=f"{type(exc).__name__}: {why}"
                                if not isinstance(exc, HarnessError) else why)
        result.details["cpu_others_percent"] = cpu.percent()
        return self.record(result, begun=True)

    def run_cases(self, cases: Sequence[CaseId], config: RunConfig | None = None,
                  on_result: Callable[[CaseResult], None] | None = None) -> bool:
        """Run `cases` in order (each through `execute`, `on_result` called with its row), then finish the
        session: True when every case ran, False when stopped (a signal, Ctrl-C): what finished is written and
        rendered either way. Where the progress shows no case lines, a case that broke (crashed, timeout, oom)
        still gets its line. Stopped before the session started (nothing measured, nothing written): raised."""
        self.progress.start("case", len(cases))
        interrupted = False
        try:
            for case in cases:
                result = self.execute(case, config)
                if not self.progress.case_lines and result.status in ("crashed", "timeout", "oom"):
                    self.progress.note(f"  {result.case.id}: {result.status}: {visible(result.reason)}")
                if on_result is not None:
                    on_result(result)
        except KeyboardInterrupt:
            interrupted = True
        finally:
            self.finish(interrupted=interrupted)
        if interrupted and self.run is None:
            raise self.interrupt()
        return not interrupted

    def interrupt(self) -> KeyboardInterrupt:
        """The interrupt that stopped this session, to raise again past it: the signal's SignalStop (the command
        exits 128 + its number: 130, 143), else a Ctrl-C that came before the session's handlers."""
        if self.stop_signal is not None:
            return SignalStop(self.stop_signal)
        return KeyboardInterrupt()

    def record(self, result: CaseResult, begun: bool = False) -> CaseResult:
        """Store a row the driver assembled from several worker requests (the gate's A/B of two sides): appended,
        results.json rewritten atomically, the progress line."""
        if not self.started:
            self.start()
        assert self.run is not None
        if not begun:
            self.progress.begin(result.case.id)
        self.run.cases.append(result)
        self._save(every=False)
        self.progress.end(case_line(result, write_case_log(result, self.config.outputs.out_dir)))
        return result

    def measure_block(self, case: CaseId, fresh: bool = True) -> dict[str, Any]:
        """One more measurement block of a case this session ran (gate-check's later blocks), supervised."""
        if not self.started:
            self.start()
        return self.executor.measure_block(case, self.config, fresh)

    def finish(self, interrupted: bool) -> None:
        """Later rounds (unless stopped), the gate, results.json and the report. Interrupted when pytest was, or
        when a signal arrived at any point (a KeyboardInterrupt during the rounds ends them too)."""
        if not self.started:
            return
        assert self.run is not None
        progress = self.progress
        interrupted = interrupted or self.stopping
        try:
            if self.executor is not None and not interrupted and pending_rounds(self.run):
                progress.note(f"--repeats {self.config.measure.repeats}: {pending_rounds(self.run)} more measurement "
                              "round(s) over the matrix (one block per case each, after a fresh activation)")
                try:
                    later_rounds(self.run, self.executor, self.config, after_block=self._save, progress=progress,
                                 stop=lambda: self.stopping)
                except KeyboardInterrupt:
                    progress.note("measurement rounds interrupted: cases keep the blocks they have")
            if not (interrupted or self.stopping):
                self._gate()  # before the report: self.comparison is ready for it
        except KeyboardInterrupt:
            interrupted = True
        finally:
            progress.close()
            interrupted = interrupted or self.stopping  # a signal may have come at any point above
            if interrupted:
                self.comparison = None  # no verdicts on a run (or a confirmation) cut short
            if self.executor is not None:
                self.executor.close()
            # the workers' scratch space (LoadGen's logs of a test a stopped worker never finished): theirs to
            # clean when they finish, the session's when they were stopped
            shutil.rmtree(self.config.outputs.scratch_dir, ignore_errors=True)
            if not self.stopping:  # a stopped run keeps absorbing signals until the process ends
                self._restore_signals()
            self.run.finished_at = _now()
            self.run.environment.add(**gpu_end_snapshot(self.run.environment))  # clocks again; drop flagged
            if self._cpu is not None:
                self.run.environment.cpu_busy_others_percent = self._cpu.percent()
            self.run.complete = not interrupted
            self.run.interrupted = interrupted
            self._save()
            out_dir, history = self.config.outputs.out_dir, self.config.outputs.history
            trends = None
            if history:
                from harness.history.record import record_run

                trends = record_run(self.run, history, str(out_dir / "results.json"), progress.note)
            from harness.report.verdicts import verdict_dicts

            verdicts = verdict_dicts(self.comparison) if self.comparison is not None else None
            note = self.comparison.gates.measured_line() if self.comparison is not None else None
            self.outputs = {"json": out_dir / "results.json",
                            **self.workload.render(self.run, out_dir, verdicts=verdicts,
                                                   baseline=self.config.gating.baseline, gate_note=note,
                                                   trends=trends)}
            self._save()  # what rendering added to the run's record (e.g. conformance wall times)
            self.outputs.update(self.gate_outputs)
            point_latest(out_dir)

    def _save(self, every: bool = True) -> None:
        """results.json rewritten (atomic); a case's row (`every` False) at most SAVE_SHARE of the run's time
        (harness.results.store.ResultsWriter): the run's end, or a signal's orderly stop, writes every case."""
        assert self.run is not None
        self._writer.save(self.run, every)

    def _gate(self) -> None:
        """--baseline: verdicts of this run against the baseline, written as verdicts.md/.json beside it.

        With --confirm N, cases judged regressed on latency are measured N more blocks (fresh activations, in
        rounds over those cases) and the whole run is judged again: a slowdown must reproduce to fail the run.
        """
        cfg = self.config
        progress = self.progress
        gating, out_dir = cfg.gating, cfg.outputs.out_dir
        if not gating.baseline or self.run is None or self.run.interrupted:
            return
        from harness.errors import HarnessError
        from harness.gating import compare_runs, load_gate_config
        from harness.gating.baseline import load_baseline_runs
        from harness.gating.compare import comparison_json
        from harness.report.verdicts import verdicts_markdown
        from harness.results.store import atomic_write_text

        try:
            baseline, gates = load_baseline_runs(gating.baseline), load_gate_config(gating.gate_config, gating.gates)
        except HarnessError as exc:
            self.gate_error = str(exc)
            return

        def judge() -> Any:
            # the gate judges a run that has ended (finish() marks it complete only after the gate)
            current = dataclasses.replace(self.run, complete=True)
            return compare_runs(baseline, current, gates, baseline_label=gating.baseline,
                                current_label=str(out_dir / "results.json"), allow_unjudged=gating.allow_unjudged)

        try:
            self.comparison = judge()
        except HarnessError as exc:  # e.g. no case in common with the baseline: a gate error, exit 2
            self.gate_error = str(exc)
            return
        suspects = self.comparison.regressed_timings()
        confirm = gating.confirm
        if suspects and confirm and self.executor is not None:
            progress.note(f"--confirm {confirm}: {len(suspects)} case(s) judged regressed on latency; measuring "
                          f"{confirm} more block(s) each, then judging again")
            confirm_rounds(self.run, suspects, self.executor, cfg, confirm, after_block=self._save,
                           progress=progress, stop=lambda: self.stopping)
            if self.stopping:
                return  # interrupted: no verdicts from a partial confirmation
            self.comparison = judge()
            still = self.comparison.regressed_timings()
            self.comparison.notes.append(
                f"--confirm {confirm}: {len(suspects)} case(s) judged regressed at first were measured again "
                f"({confirm} more block(s) each, fresh activations) and judged on all their blocks: "
                f"{len(still & suspects)} still regressed" + (
                    f"; not reproduced: {', '.join(sorted(suspects - still))}" if suspects - still else ""))
        self.gate_outputs = {
            "verdicts": atomic_write_text(out_dir / "verdicts.md", verdicts_markdown(self.comparison)),
            "gate_json": atomic_write_text(out_dir / "verdicts.json", comparison_json(self.comparison))}

    def gate_status(self) -> int:
        """0: no gate or clean; 1: a regression or a broken case; 2: the baseline could not be compared; 3: a gated
        row was not judged (harness.gating.unjudged; 0 with --allow-unjudged)."""
        if self.gate_error:
            return 2
        from harness.gating.unjudged import decide_exit

        return decide_exit(self._judged(), self.config.gating.allow_unjudged)

    def _judged(self) -> list[Any]:
        """The rows this run decided: the gate's verdicts (--baseline), and the A/B cases' verdicts
        (--workload ab), each with its cause when it was not judged (harness.gating.unjudged)."""
        from harness.gating.ab import ab_records

        rows = list(self.comparison.records) if self.comparison is not None else []
        return rows + (ab_records(self.run.cases) if self.run is not None and not self.run.interrupted else [])

    def unjudged_line(self) -> str | None:
        """How many of the run's gated rows were not judged and which, in one line (None: all were)."""
        from harness.gating.unjudged import unjudged_line

        return unjudged_line(self._judged(), self.config.gating.allow_unjudged)


def point_latest(out_dir: Path) -> None:
    """reports/latest -> the newest run folder, when the folder lives under a `reports` directory."""
    out_dir = out_dir.resolve()
    if out_dir.parent.name != "reports":
        return
    link = out_dir.parent / "latest"
    tmp = out_dir.parent / f".latest-{os.getpid()}"
    try:
        if tmp.is_symlink():
            tmp.unlink()
        tmp.symlink_to(out_dir.name)
        os.replace(tmp, link)
    except OSError:
        pass

