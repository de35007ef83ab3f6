"""The gate's worker side: one side of a case activated per request, then one block per request, so the two sides may
live in one worker or in two (two releases, two interpreters) and take their blocks in turn."""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path
from typing import Any

from harness.artifacts.cache import set_active_cache_dir
from harness.config import RunConfig
from harness.data import feed_digest
from harness.errors import HarnessError, UsageError
from harness.measure.contention import snapshot
from harness.measure.timer import Timer
from harness.model import ModelSpec, definition_changes, get_model, register_model
from harness.results.schema import CaseId, CaseResult
from harness.results.stats import latency_stats
from harness.runtimes import Availability, Runtime, get_runtime
from harness.workloads.ab.workload import quiet_options, side_block, slowed, warm_policy
from harness.workloads.base import PhaseCallback, WorkerState, Workload
from harness.workloads.common import check_case, ensure_user_models

BASELINE_SUFFIX = "@baseline"  # side A's model: tonight's model spec with the baseline's stored ONNX graph


def baseline_model_name(model: str) -> str:
    return f"{model}{BASELINE_SUFFIX}"


@dataclasses.dataclass(frozen=True)
class SidePayload:
    """What a side's activation gets from the parent: which side, tonight's model name, the stored artifact (side
    A) or the model's stored definition (side A of a runtime that runs the torch module itself: rebuilt here, as
    long as it is unchanged), the feed both sides run (built once in the parent), a planted slowdown (tests)."""

    side: str  # "a" (the baseline's artifact and release) or "b" (tonight's)
    model: str  # tonight's model name (side A's spec is it with the stored graph)
    feed: dict[str, Any]
    artifact: str | None = None
    inject_ns: int = 0  # a busy wait after each call (a planted slowdown), never for real figures
    definition: dict[str, Any] | None = None  # side A without an artifact: the module's stored definition


class GateWorkload(Workload):
    name = "gate"
    title = "nightly gate (baseline re-measured)"
    option_groups = ("ab",)  # its blocks: pairs, block time, effect, confidence, seed
    measures_in_blocks = True  # measure_block: --repeats rounds, --confirm

    def cases(self, config: RunConfig) -> list[CaseId]:
        raise UsageError("the gate's cases come from its baseline: run `harness gate BASELINE`")

    def worker_state(self, timer: Timer, defer_blocks: bool) -> WorkerState:
        return GateState(timer)

    def terminal_lines(self, run: Any) -> list[str]:
        return []  # `harness gate` prints its own verdict lines


GATE = GateWorkload()


class GateState(WorkerState):
    """The activated sides in this worker, by case id (side A's model carries BASELINE_SUFFIX, so both sides of
    one case can live here); a new case's activation releases the previous case's sides."""

    read_proc = staticmethod(snapshot)  # what the contention probe reads (/proc; tests give a fake one)

    def __init__(self, timer: Timer | None = None) -> None:
        self.timer = timer or Timer()
        self._availability: dict[type[Runtime], Availability] = {}
        self._sides: dict[CaseId, tuple[Runtime, Any, int]] = {}
        self._pair: tuple[Any, ...] | None = None

    def run(self, case: CaseId, config: RunConfig, payload: Any, on_phase: PhaseCallback) -> CaseResult:
        if not isinstance(payload, SidePayload):
            raise HarnessError(f"{case.id}: the gate workload is driven by `harness gate` (no side given)")
        ensure_user_models(config)
        set_active_cache_dir(config.artifacts.cache_dir)
        pair = (case.runtime.split("@")[0], payload.model, case.precision, case.batch, case.seq, case.device)
        if pair != self._pair:  # another case of the matrix: its sides replace the previous ones
            self.close()
            self._pair = pair
        self._drop(case)
        spec = get_model(payload.model)
        cls = get_runtime(case.runtime)
        if payload.side == "a":
            spec = self._side_a_model(case, spec, cls, payload)
        refused = check_case(case, spec, cls, config, self._availability)
        if refused is not None:
            return refused
        on_phase("load")
        rt = cls(spec, case.precision, quiet_options(spec, config))
        rt.__enter__()
        try:
            on_phase("warmup")
            call = rt.bind(payload.feed)
            first = self.timer.run(call, warm_policy(config), rt.synchronize)
            if payload.inject_ns > 0:
                call = slowed(call, payload.inject_ns)
        except BaseException:
            rt.__exit__(None, None, None)
            raise
        self._sides[case] = (rt, call, rt.options.threads)
        stats = latency_stats(list(first.samples_ns), config.measure.noise_cv)
        return CaseResult(case, "passed", samples_ns=list(first.samples_ns), warmup_iters=first.warmup_iters,
                          timing_scope=rt.timing_scope, latency=stats, setup_s=rt.setup_s,
                          artifact=str(rt.artifact_path) if rt.artifact_path else None,
                          feed_sha256=feed_digest(payload.feed), model_fingerprint=rt.model.fingerprint(),
                          precision_recipe=rt.recipe, details={"side": payload.side, **rt.details()})

    @staticmethod
    def _side_a_model(case: CaseId, spec: ModelSpec, cls: type[Runtime], payload: SidePayload) -> ModelSpec:
        """Side A's model, registered under `case.model`: tonight's spec running the stored ONNX graph, or (a
        runtime that runs the torch module itself) tonight's spec as it is, once its definition here is checked
        against the baseline's (the runtime's own release left out: side A's environment pins it)."""
        if payload.artifact:
            if not Path(payload.artifact).is_file():
                raise HarnessError(f"side A: the stored artifact {payload.artifact} is missing")
            return register_model(dataclasses.replace(spec, name=case.model, onnx_path=Path(payload.artifact),
                                                      build=None), replace=True)
        if payload.definition is None or not cls.runs_torch_module or spec.build is None:
            raise HarnessError(f"side A: nothing to run for {case.runtime}: no stored artifact, and no stored model "
                               "definition of a torch module it runs")
        changes = definition_changes(payload.definition, spec.definition(), ignore=(cls.distribution,))
        if changes:
            raise HarnessError(f"side A: the model's source here differs from the baseline's: {changes}")
        return register_model(dataclasses.replace(spec, name=case.model), replace=True)

    def measure_block(self, case: CaseId, config: RunConfig, fresh: bool) -> dict[str, Any]:
        """One A/B block of an activated side: its own short warm-up, then the block's time (block_policy), with
        the contention probe of every block."""
        if case not in self._sides:
            raise HarnessError(f"{case.id}: this side is not activated in this worker")
        rt, call, threads = self._sides[case]
        return side_block(self.timer, call, rt.synchronize, threads, config, read=self.read_proc)

    def _drop(self, case: CaseId) -> None:
        side = self._sides.pop(case, None)
        if side is not None:
            with contextlib.suppress(Exception):  # releasing a broken activation must not fail the next one
                side[0].__exit__(None, None, None)

    def drop(self) -> None:
        self.close()

    def close(self) -> None:
        for case in list(self._sides):
            self._drop(case)
        self._pair = None
