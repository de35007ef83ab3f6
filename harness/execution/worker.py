"""CaseRunner: a worker's cases one after another, each run by its workload; an exception becomes the case's row."""

from __future__ import annotations

import time
import traceback
from typing import Any

from harness.config import RunConfig
from harness.errors import HarnessError, UnsupportedModelError
from harness.measure.memory import allocation_failure
from harness.measure.timer import Timer
from harness.plugins import load_plugins
from harness.results.schema import CaseId, CaseResult
from harness.workloads import WorkerState, get_workload
from harness.workloads.base import PhaseCallback
from harness.workloads.common import oom_result, tail


class CaseRunner:
    """Runs cases in this process. Each workload keeps its own per-worker state (activations, references);
    this class only dispatches on the run's workload and turns what a case raised into its row."""

    def __init__(self, timer: Timer | None = None, defer_blocks: bool = False) -> None:
        load_plugins()  # a worker process starts with empty registries
        self.timer = timer or Timer()
        # a session that measures later blocks in rounds over the whole matrix sets this (harness.execution.rounds)
        self.defer_blocks = defer_blocks
        self._states: dict[str, WorkerState] = {}

    def state(self, workload: str) -> WorkerState:
        if workload not in self._states:
            self._states[workload] = get_workload(workload).worker_state(self.timer, self.defer_blocks)
        return self._states[workload]

    def run(self, case: CaseId, config: RunConfig, on_phase: PhaseCallback = lambda phase: None, *,
            payload: Any = None) -> CaseResult:
        """`case` of the run's workload (with the workload's `payload` for it); `on_phase` hears each phase."""
        t0 = time.perf_counter()
        phase = "load"

        def phased(p: str) -> None:
            nonlocal phase
            phase = p
            on_phase(p)

        state = self.state(config.workload)
        try:
            result = state.run(case, config, payload, phased)
        except MemoryError as exc:
            self.close()
            result = oom_result(case, phase, config, f"{type(exc).__name__}: {exc}", MemoryError.__name__)
        except UnsupportedModelError as exc:
            state.drop()
            result = CaseResult(case, "skipped", reason=str(exc), phase=phase)
        except HarnessError as exc:
            state.drop()
            result = CaseResult(case, "error", reason=str(exc), phase=phase)
        except Exception as exc:  # noqa: BLE001 - a broken case is a row, never the end of the run
            if allocation_failure(f"{type(exc).__name__}: {exc}"):  # torch / ORT / CUDA allocators raise these
                self.close()
                result = oom_result(case, phase, config, f"{type(exc).__name__}: {exc}")
            else:
                state.drop()
                reason = f"{type(exc).__name__} in phase {phase}: {exc}"
                result = CaseResult(case, "error", reason=reason + state.explain(reason, case, config),
                                    phase=phase, stderr_tail=tail(traceback.format_exc()))
        result.duration_s = round(time.perf_counter() - t0, 3)
        return result

    def measure_block(self, case: CaseId, config: RunConfig, fresh: bool = True) -> dict[str, Any]:
        """One more measurement block of an already-run case (its workload's `measure_block`); raises on failure."""
        return self.state(config.workload).measure_block(case, config, fresh)

    def close(self) -> None:
        for state in self._states.values():
            state.close()
        self._states.clear()


class InProcessExecutor:
    """--no-isolation: cases run in the harness's own process (no timeout or memory cap; for debugging)."""

    isolated = False

    def __init__(self, defer_blocks: bool = False) -> None:
        self.runner = CaseRunner(defer_blocks=defer_blocks)

    def run(self, case: CaseId, config: RunConfig, payload: Any = None) -> CaseResult:
        from harness.envs.spec import in_process_refusal

        refusal = in_process_refusal(case.runtime, config.process.envs)
        if refusal:
            return CaseResult(case, "skipped", phase="load", reason=refusal)
        return self.runner.run(case, config, payload=payload)

    def measure_block(self, case: CaseId, config: RunConfig, fresh: bool = True) -> dict[str, Any]:
        """A later block of `case` (see CaseRunner.measure_block); {"error": reason} when it failed."""
        try:
            return self.runner.measure_block(case, config, fresh)
        except Exception as exc:  # noqa: BLE001 - a failed block costs that block, never the case or the run
            return {"error": f"{type(exc).__name__}: {exc}"}

    def renew(self) -> None:
        """Nothing: there is one process, and every activation shares it (IsolatedExecutor.renew starts a new
        worker instead; without isolation an activation does not draw the process's own bias again)."""

    def close(self) -> None:
        self.runner.close()
