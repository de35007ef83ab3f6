"""What `harness gate-check` measures with: each simulated run a run session of its own, slowed runtimes."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.config import RunConfig
from harness.errors import HarnessError
from harness.execution.session import HarnessSession
from harness.gating.gatecheck import RunData
from harness.results.schema import CaseId
from harness.runtimes import get_runtime
from harness.runtimes.selftest import slowed_name
from harness.workloads.common import block_policy


class SupervisedRuns:
    """Gate-check's measurement, through the machinery of `harness run`: each simulated run (`execute`) is a
    HarnessSession with its own supervised worker, as each `harness run` is, so process-level states (thread
    placement, memory layout) vary between runs as between nightly runs, and its results are written like a
    run's (OUT/runs/N/results.json); each block (`measure`) is a fresh activation in it. A block with `delay_s`
    runs the case's runtime slowed by that busy wait per inference (harness.runtimes.selftest).
    `config.measure.repeats` blocks make a run, so each block gets 1/repeats of the minimum time and
    iterations."""

    def __init__(self, config: RunConfig, session_factory: Callable[[RunConfig], Any] | None = None) -> None:
        self.config = config.replace(repeats=1, timing=block_policy(config.measure.timing, config.measure.repeats))
        self.session_factory = session_factory or HarnessSession  # its default progress shows nothing
        self.session: Any = None
        self.workers = 0  # simulated runs started, one worker each
        self._seen: set[CaseId] = set()
        self._root = Path(config.outputs.out_dir) if config.outputs.out_dir else Path(tempfile.mkdtemp())

    def measure(self, case: CaseId, delay_s: float) -> Sequence[int]:
        if self.session is None:
            raise RuntimeError("SupervisedRuns.measure outside a run (call it through execute)")
        if delay_s > 0:
            case = replace(case, runtime=get_runtime(slowed_name(case.runtime, delay_s)).name)
        if case not in self._seen:  # the case's first block in this run: the whole case path
            result = self.session.execute(case)
            if not result.measured:
                raise HarnessError(f"gate-check: case {case.id} was not measured ({result.status}: {result.reason})")
            self._seen.add(case)
            return result.samples_ns
        block = self.session.measure_block(case, fresh=True)
        if "error" in block:
            raise HarnessError(f"gate-check: a block of {case.id} failed: {block['error']}")
        return block["samples_ns"]

    def execute(self, fn: Callable[..., RunData], *args: Any) -> RunData:
        """One simulated run, `fn(*args)` measuring through a fresh session that is finished afterwards."""
        self.workers += 1
        config = self.config.replace(out_dir=self._root / f"{self.workers:03d}",
                                     run_id=f"gate-check-{self.workers:03d}")
        self._seen = set()
        return in_session(self, self.session_factory(config), fn, *args)


def in_session(owner: Any, session: Any, fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)` with `owner.session` set to `session` (a fresh run session: its own supervised worker),
    finished afterwards, interrupted or not."""
    owner.session = session
    interrupted = False
    try:
        return fn(*args)
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:
        session.finish(interrupted=interrupted)
        owner.session = None


class SupervisedAb:
    """`harness gate-check --ab`'s measurement: each trial a run session of its own (one supervised worker; on one
    CPU a new one per activation, as `harness ab` makes them) in which every case is measured by the A/B workload against itself, as it is (A/A) and with B slowed by each
    level (AbConfig.ab_inject), the block order drawn with the trial's seed."""

    def __init__(self, config: RunConfig, session_factory: Callable[[RunConfig], Any] | None = None) -> None:
        self.config = config.replace(workload="ab", ab_a="base", ab_b="base")
        self.session_factory = session_factory or HarnessSession
        self.session: Any = None
        self.base = self.config
        self.trials = 0
        self._root = Path(config.outputs.out_dir) if config.outputs.out_dir else Path(tempfile.mkdtemp())

    def verdict(self, case: CaseId, inject: float, trial: int) -> str:
        if self.session is None:
            raise RuntimeError("SupervisedAb.verdict outside a trial (call it through execute)")
        self.session.config = self.base.replace(ab_inject=inject, ab_seed=trial)
        result = self.session.execute(case)
        if result.ab is None:
            raise HarnessError(f"gate-check: case {case.id} was not measured ({result.status}: {result.reason})")
        return result.ab.verdict

    def execute(self, fn: Callable[..., Any], *args: Any) -> Any:
        """One trial, `fn(*args)` measuring through a fresh session (its own workers) that is finished afterwards."""
        self.trials += 1
        self.base = self.config.replace(out_dir=self._root / f"{self.trials:03d}",
                                        run_id=f"gate-check-ab-{self.trials:03d}")
        return in_session(self, self.session_factory(self.base), fn, *args)


def nightly_trials(config: RunConfig, runs: Any, replay: Any, gates: Any, plans: list[Any], levels: Sequence[float],
                   rounds: int, root: Path, say: Callable[[str], None] = print) -> tuple[Any, int | None]:
    """`harness gate-check --nightly`'s measurement: per round one whole `harness gate` (its own session and
    workers, as each night has) with nothing changed (A/A) and one per level with side B slowed by that fraction
    of its p50 (`--inject`), every verdict tallied (harness.gating.gatecheck.NightlyTally). Returns (the tally,
    None), or (the tally so far, 128 + the signal) when a gate was interrupted."""
    import dataclasses

    from harness.execution.gate_run import STORED, run_gate
    from harness.gating.gatecheck import NightlyTally
    from harness.report.progress import RunProgress

    trials = [("aa", 0.0)] + [(f"{lv:.0%}", lv) for lv in levels]
    tally = NightlyTally(levels=tuple(label for label, _ in trials[1:]))
    for r in range(rounds):
        for label, level in trials:
            cfg = config.replace(out_dir=root / f"r{r}-{label.rstrip('%')}", ab_inject=level, ab_seed=r)
            fresh = [dataclasses.replace(p, note="") for p in plans]
            outcome = run_gate(cfg, runs, replay, gates, fresh, RunProgress(case_lines=False))
            if outcome.interrupted:
                return tally, outcome.exit_status or 130
            tally.add(label, outcome.records, list(outcome.fallbacks), STORED)
            say(f"  round {r + 1}/{rounds} {label}: {outcome.summary(False)}")
    return tally, None
