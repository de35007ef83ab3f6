"""The parts of a forward case after its timed loop, as steps on one context that carries the options the case's
runtime ran with (docs/extending.md#a-step)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.config import RunConfig
from harness.measure.end_to_end import measure_end_to_end
from harness.measure.timer import Timer, TimingPolicy
from harness.model import ModelSpec
from harness.precision import Tolerance
from harness.results.records import LocalizationRecord
from harness.results.schema import CaseId
from harness.runtimes import Runtime, RuntimeOptions
from harness.workloads.base import PhaseCallback
from harness.workloads.common import block_policy
from harness.workloads.forward.profiling import CaseProfiler, case_dims, profile_budget_s
from harness.workloads.forward.scenarios import run_scenarios
from harness.workloads.forward.traffic import replay_case


@dataclass
class CaseContext:
    """What a step sees of its case: the case and its model (the zoo's spec; a variant's changes are in the
    runtime and `options`), the activated runtime, the feed, the configuration, the options the runtime ran
    with, the timing policy of its blocks, the measured p50 and the drift judgement."""

    case: CaseId
    spec: ModelSpec
    runtime: Runtime
    feed: dict[str, Any]
    config: RunConfig
    options: RuntimeOptions
    policy: TimingPolicy
    timer: Timer
    profiler: CaseProfiler
    on_phase: PhaseCallback
    p50_ms: float = float("nan")
    drift_passed: bool = True
    tolerance: Tolerance | None = None


@dataclass(frozen=True)
class Step:
    """`field` of the CaseResult; `phase` as the progress line shows it; `wanted(ctx)`; `run(ctx)` -> the
    field's value."""

    field: str
    phase: str
    wanted: Callable[[CaseContext], bool]
    run: Callable[[CaseContext], Any]


def _end_to_end(ctx: CaseContext) -> Any:
    c = ctx.config
    return measure_end_to_end(ctx.spec.pipeline(), ctx.runtime.infer, ctx.spec.inputs, ctx.case.dims, c.inputs.seed,
                              ctx.timer, block_policy(ctx.policy, c.measure.repeats), ctx.runtime.synchronize,
                              c.measure.noise_cv)


def _localization(ctx: CaseContext) -> Any:
    return localize_case(ctx.runtime, ctx.feed, ctx.tolerance, "request" if ctx.drift_passed else "failure",
                         ctx.options.threads, budget_s=min(120.0, 0.25 * ctx.config.process.case_timeout_s))


def _scenarios(ctx: CaseContext) -> Any:
    return run_scenarios(ctx.runtime, ctx.feed, ctx.case, ctx.config, ctx.p50_ms, ctx.on_phase, ctx.spec)


def _traffic(ctx: CaseContext) -> Any:
    return replay_case(ctx.runtime, ctx.spec, ctx.case, ctx.config, ctx.options.threads)


def _profile(ctx: CaseContext) -> Any:
    # after every timed loop of the case: the profiled pass never times
    return ctx.profiler.profile(ctx.runtime, ctx.feed, ctx.case, ctx.p50_ms, ctx.options.threads,
                                case_dims(ctx.case, ctx.config.matrix.shapes),
                                budget_s=profile_budget_s(ctx.config.process.case_timeout_s))


def localize_case(runtime: Runtime, feed: dict[str, Any], tolerance: Any, trigger: str, threads: int,
                  budget_s: float = 120.0) -> LocalizationRecord | None:
    """Layer-wise drift localisation of a measured case (after timing); its own failure is recorded, never
    raised: the case's status stays what its drift check said. None for a --localize request on a case with
    no low-precision ONNX graph (FP32, PyTorch); a failed case of that kind records why it was not localised."""
    from harness.accuracy.localize import localize

    bounds = {"max_rel_l2": tolerance.max_rel_l2, "min_cosine": tolerance.min_cosine}
    try:
        pair = runtime.onnx_pair()
        if pair is None:
            if trigger == "request":
                return None
            return LocalizationRecord(
                trigger=trigger, tolerance=bounds, checked=0, first_bad=[],
                error=f"{runtime.name} at {runtime.precision} has no low-precision ONNX graph to compare with the "
                      f"FP32 one (localisation covers ONNX runtimes below FP32)")
        return localize(pair[0], pair[1], feed, tolerance, trigger=trigger, threads=threads, budget_s=budget_s)
    except Exception as exc:  # noqa: BLE001 - localisation is a diagnosis, never the case's error
        return LocalizationRecord(trigger=trigger, tolerance=bounds, checked=0, first_bad=[],
                                  error=f"{type(exc).__name__}: {exc}")


STEPS: tuple[Step, ...] = (
    Step("end_to_end", "end-to-end", lambda ctx: ctx.spec.pipeline is not None, _end_to_end),
    Step("localization", "localize", lambda ctx: not ctx.drift_passed or ctx.config.accuracy.localize,
         _localization),
    # --scenarios: run_scenarios reports its own phases and returns [] when none is asked for
    Step("scenarios", "", lambda ctx: True, _scenarios),
    Step("traffic", "traffic", lambda ctx: bool(ctx.config.loadgen.traffic_file), _traffic),
    Step("profile", "profile", lambda ctx: ctx.config.measure.profile, _profile),
)


def run_steps(ctx: CaseContext) -> dict[str, Any]:
    """Every wanted step in order -> {CaseResult field: value}; a step not wanted leaves its field at None."""
    out: dict[str, Any] = {}
    for step in STEPS:
        if step.wanted(ctx):
            if step.phase:
                ctx.on_phase(step.phase)
            out[step.field] = step.run(ctx)
    return out
