"""What `harness gate-check` measures with: each simulated run in its own supervised worker, slowed runtimes."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from harness.errors import HarnessError
from harness.execution.runner import block_policy
from harness.execution.supervisor import IsolatedExecutor
from harness.gating.gatecheck import RunData
from harness.results.schema import CaseId
from harness.runtimes import get_runtime
from harness.runtimes.selftest import slowed_name


class SupervisedRuns:
    """Gate-check's measurement, through the machinery of `harness run`: each simulated run (`execute`) gets a
    fresh supervised worker (IsolatedExecutor, from the forkserver), as each `harness run` does, so process-level
    states (thread placement, memory layout) vary between runs as between nightly runs; each block
    (`measure`) is a fresh activation in it. A block with `delay_s` runs the case's runtime slowed by that busy
    wait per inference (harness.runtimes.selftest). `config.repeats` blocks make a run, so each block gets
    1/repeats of the minimum time and iterations."""

    def __init__(self, config: Any, executor_factory: Callable[[], Any] = IsolatedExecutor) -> None:
        self.config = replace(config, repeats=1, timing=block_policy(config.timing, config.repeats))
        self.executor_factory = executor_factory
        self.executor: Any = None
        self.workers = 0  # simulated runs started, one worker each
        self._seen: set[CaseId] = set()

    def measure(self, case: CaseId, delay_s: float) -> Sequence[int]:
        if self.executor is None:
            raise RuntimeError("SupervisedRuns.measure outside a run (call it through execute)")
        if delay_s > 0:
            case = replace(case, runtime=get_runtime(slowed_name(case.runtime, delay_s)).name)
        if case not in self._seen:  # the case's first block in this worker: the whole case path
            result = self.executor.run(case, self.config)
            if not result.measured:
                raise HarnessError(f"gate-check: case {case.id} was not measured ({result.status}: {result.reason})")
            self._seen.add(case)
            return result.samples_ns
        block = self.executor.measure_block(case, self.config, fresh=True)
        if "error" in block:
            raise HarnessError(f"gate-check: a block of {case.id} failed: {block['error']}")
        return block["samples_ns"]

    def execute(self, fn: Callable[..., RunData], *args: Any) -> RunData:
        """One simulated run, `fn(*args)` measuring through a fresh worker that is stopped afterwards."""
        self.executor, self._seen = self.executor_factory(), set()
        self.workers += 1
        try:
            return fn(*args)
        finally:
            self.executor.close()
            self.executor = None
