"""The Workload interface: what a case of it is, how a worker runs it, what it records, how it is rendered."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar

from harness.config import RunConfig
from harness.measure.timer import Timer
from harness.results.schema import CaseId, CaseResult, RunResults

PhaseCallback = Callable[[str], None]


class WorkerState(ABC):
    """What a workload keeps in one worker process between its cases (activations, references, caches)."""

    @abstractmethod
    def run(self, case: CaseId, config: RunConfig, payload: Any, on_phase: PhaseCallback) -> CaseResult:
        """Run one case here; raise on failure (the worker turns an exception into the case's row)."""

    def measure_block(self, case: CaseId, config: RunConfig, fresh: bool) -> dict[str, Any]:
        """One more measurement block of an already-run case (--repeats rounds, --confirm)."""
        from harness.errors import HarnessError

        raise HarnessError(f"a {case.id} case is measured in one block (--repeats and --confirm re-measure "
                           "forward cases only)")

    def explain(self, reason: str, case: CaseId, config: RunConfig) -> str:
        """A note to append to an error's reason (e.g. which inputs were fed); default none."""
        return ""

    def drop(self) -> None:
        """Forget what a failed case may have left broken (its activation), keep the rest."""

    def close(self) -> None:
        """Release everything (the worker is ending)."""


class Workload(ABC):
    """One kind of work the run session drives. The session asks it for its cases, hands each case (and its
    payload) to the supervised worker, where `worker_state().run` measures it, and at the end asks it to render
    what the run stored. Every workload gets the same per-case atomic writes, signals, progress and isolation."""

    name: ClassVar[str]
    title: ClassVar[str] = ""
    # the option groups this workload owns, by name (declared in harness/options/workloads/<name>.py): given to a
    # run of another workload they are a usage error, not ignored; a group no workload owns is shared by all
    option_groups: ClassVar[tuple[str, ...]] = ()
    # whether its worker state measures a case again in more blocks (measure_block: --repeats, --confirm); a
    # workload without it refuses --repeats at parse time
    measures_in_blocks: ClassVar[bool] = False
    # the RunConfig field of this workload's sequence axis: what --feeds' sequence lengths fill when not given
    sequence_field: ClassVar[str] = "seq_lens"
    # option texts by dest that this workload's runs take when the option is not given (below a command's own)
    option_defaults: ClassVar[Mapping[str, str]] = MappingProxyType({})

    def default_models(self, quick: bool) -> tuple[str, ...]:
        """The models of a run that names none (no --models, no --model): the zoo's, those tagged quick with
        --quick (callers load the plugins first)."""
        from harness.config import QUICK_TAG
        from harness.model import all_models

        return tuple(s.name for s in all_models() if (not quick or QUICK_TAG in s.tags) and "user" not in s.tags)

    def default_runtimes(self, quick: bool) -> tuple[str, ...]:
        """The runtimes of a run that names none: torch-cpu and ort-cpu with --quick, else every registered runtime
        that can run on this machine (availability probes; callers load the plugins first)."""
        from harness.runtimes import get_runtime, runtime_names

        if quick:
            return ("torch-cpu", "ort-cpu")
        return tuple(r for r in runtime_names() if get_runtime(r).availability())

    @abstractmethod
    def cases(self, config: RunConfig) -> list[CaseId]:
        """The cases of this run, in execution order (parent side)."""

    def payload(self, case: CaseId, config: RunConfig) -> Any:
        """What the worker needs besides the case and the configuration (parent side; picklable). Default none."""
        return None

    def execute(self, executor: Any, case: CaseId, config: RunConfig, payload: Any) -> CaseResult:
        """How the session runs one case (parent side): one request to the supervised `executor` (default). A
        workload whose case spans several requests drives them here (ab: each activation of its two sides, then
        each block, with new workers per activation on one CPU)."""
        return executor.run(case, config, payload)

    def annotate(self, case: CaseId, result: CaseResult) -> CaseResult:
        """The case's row as the session stores it (parent side): a workload may add what a row the supervisor
        made (crashed, timeout, oom) lacks. Default unchanged."""
        return result

    @abstractmethod
    def worker_state(self, timer: Timer, defer_blocks: bool) -> WorkerState:
        """A fresh per-worker state (worker side). `timer` times calls (tests inject a fake clock);
        `defer_blocks`: the session measures later --repeats blocks in rounds over the whole matrix."""

    def run_record(self, config: RunConfig) -> dict[str, Any]:
        """Facts about the whole run stored in results.json's config beside the configuration."""
        return {}

    def render(self, run: RunResults, out_dir: Path, **context: Any) -> dict[str, Path]:
        """Write this workload's outputs of a finished (or stopped) run; returns {name: path}."""
        from harness.report.render import write_outputs

        return write_outputs(run, out_dir, context.get("verdicts"), context.get("baseline"),
                             context.get("gate_note"), trends=context.get("trends"), pages=self.report_pages)

    def report_pages(self, run: RunResults, out_dir: Path, report_page: str | None) -> dict[str, Path]:
        """The pages of this workload's own that a report of `run` writes beside report.html (`report_page`:
        its file name, for them to link to; None: there is none); returns {name: path}. Default none."""
        return {}

    def terminal_lines(self, run: RunResults) -> list[str]:
        """Lines for the terminal summary after the results table."""
        return []
