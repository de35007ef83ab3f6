"""What the worker side of every workload shares: user models registered, OOM rows, traceback tails."""

from __future__ import annotations

import dataclasses
import math
import traceback

from harness.artifacts.cache import ArtifactCache
from harness.config import RunConfig
from harness.measure.timer import TimingPolicy
from harness.measure.memory import AllocationFailure, allocation_failure, oom_reason
from harness.model_files import register_user_model, user_model_name
from harness.model import ModelSpec
from harness.results.schema import CaseId, CaseResult
from harness.runtimes import Availability, Runtime, RuntimeOptions


def ensure_user_models(config: RunConfig) -> None:
    """Register the run's `--model` files and factories here (a worker may not have inherited them)."""
    from harness.model import _MODELS

    for path in config.matrix.user_models:
        if user_model_name(path) not in _MODELS:
            register_user_model(path, config.matrix.shapes)


def oom_result(case: CaseId, phase: str, config: RunConfig, message: str, marker: str = "") -> CaseResult:
    """An `oom` row for an allocation failure raised in this process, with the size asked for when said."""
    failure = allocation_failure(message) or AllocationFailure(marker or "allocation", None)
    return CaseResult(case, "oom", reason=oom_reason(failure, phase, config.process.case_memory_gb, message),
                      phase=phase, stderr_tail=tail(traceback.format_exc()),
                      details={"oom_requested_bytes": failure.requested_bytes})


def tail(text: str, lines: int = 20, chars: int = 4000) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])[-chars:]


def check_case(case: CaseId, spec: ModelSpec, cls: type[Runtime], config: RunConfig,
               availability: dict[type[Runtime], Availability]) -> CaseResult | None:
    """The row of a case that cannot run (a model that failed to register, is unavailable, refuses the batch;
    a runtime that is unavailable or does not support the model at this precision), else None."""
    if spec.problem:
        if allocation_failure(spec.problem):  # a factory's forward that ran out of memory at registration
            return oom_result(case, "load", config, spec.problem)
        return CaseResult(case, "error", reason=spec.problem, phase="load", stderr_tail=spec.problem_detail or "")
    unavailable = spec.unavailable_reason()
    if unavailable:
        return CaseResult(case, "skipped", reason=f"model {spec.name!r} unavailable: {unavailable}",
                          model_fingerprint=spec.fingerprint())
    refusal = spec.batch_refusal(case.batch)
    if refusal:
        return CaseResult(case, "skipped", reason=refusal, model_fingerprint=spec.fingerprint())
    if cls not in availability:
        availability[cls] = cls.availability()
    for verdict in (availability[cls], cls.supports(spec, case.precision)):
        if not verdict:
            return CaseResult(case, "skipped", reason=verdict.reason, model_fingerprint=spec.fingerprint())
    return None


def runtime_options(spec: ModelSpec, config: RunConfig) -> RuntimeOptions:
    """What a runtime activation takes from the run's configuration (threads, cache, exporter, shapes, ...)."""
    b = config.artifacts
    return RuntimeOptions(config.measure.threads, ArtifactCache(b.cache_dir), b.exporter,
                          shapes=run_shapes(spec, config), int8_method=b.int8_method,
                          calibration_method=b.calibration_method, compile_mode=b.compile_mode)


def run_shapes(spec: ModelSpec, config: RunConfig) -> tuple[dict[str, int], ...]:
    """Every shape the run gives this model (engines with optimisation profiles cover them at activation)."""
    seqs = config.matrix.seq_lens if spec.has_seq else (None,)
    fixed = spec.fixed_batch()
    batches = (fixed[0],) if fixed else config.matrix.batch_sizes
    return tuple({"batch": b, **({"seq": s} if s is not None else {})} for b in batches for s in seqs)


def block_policy(policy: TimingPolicy, repeats: int) -> TimingPolicy:
    """One of `repeats` measurement blocks: 1/repeats of the minimum time and iterations (warm-up unchanged)."""
    if repeats <= 1:
        return policy
    return dataclasses.replace(policy, min_iters=max(1, math.ceil(policy.min_iters / repeats)),
                               min_time_s=policy.min_time_s / repeats)
