"""The forward-pass matrix workload: one case end to end (feed, reference, activation, warm-up, timed loop, drift),
then its parts on the same activation: end-to-end steps (models with pre/post steps) and LoadGen scenarios."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from harness.accuracy import compare
from harness.accuracy.task import judge, top1_accuracy
from harness.artifacts.cache import set_active_cache_dir
from harness.config import RunConfig
from harness.data import case_feed, feed_digest, inputs_fed
from harness.errors import HarnessError
from harness.matrix import case_ids
from harness.measure.contention import ContentionProbe, case_contention, wait_quiet
from harness.measure.tracker import (Tracker, TrackerContext, Window, make_trackers, split_fields, tracked_fields,
                                     tracking)
from harness.measure.timer import TimedRun, Timer, TimingPolicy
from harness.model import ModelSpec, get_model
from harness.precision import Precision
from harness.results.schema import Block, CaseId, CaseResult, RunResults
from harness.results.stats import latency_stats, throughput_sps
from harness.results.stored import stored
from harness.runtimes import Availability, Runtime, RuntimeOptions, get_runtime
from harness.workloads.base import PhaseCallback, WorkerState, Workload
from harness.workloads.common import block_policy, check_case, ensure_user_models, runtime_options
from harness.workloads.forward.profiling import CaseProfiler
from harness.workloads.forward.steps import CaseContext, run_steps


class ForwardWorkload(Workload):
    """models x runtimes x precisions x shapes; each timed call is one forward pass on a fixed feed. The LoadGen
    scenarios (--scenarios) and end-to-end steps (ModelSpec.pipeline) are parts of this workload, not workloads
    of their own: they run on the case's activated runtime and feed after its timed loop, so a case is activated,
    fed and judged once."""

    name = "forward"
    title = "forward pass"
    option_groups = ("forward", "scenarios")  # variants, --settle, --profile, --localize; the LoadGen scenarios
    measures_in_blocks = True  # measure_block: --repeats rounds, --confirm

    def terminal_lines(self, run: RunResults) -> list[str]:
        from harness.report.terminal import drift_note_lines, profile_lines, scenario_lines

        return scenario_lines(run) + drift_note_lines(run) + profile_lines(run)

    def cases(self, config: RunConfig) -> list[CaseId]:
        m = config.matrix
        return case_ids(m.models, m.runtimes, m.precisions, m.batch_sizes, m.seq_lens, variants=m.variants)

    def worker_state(self, timer: Timer, defer_blocks: bool) -> WorkerState:
        return ForwardState(timer, defer_blocks)


FORWARD = ForwardWorkload()


class ForwardState(WorkerState):
    """A worker's forward cases one after another, keeping what later cases can reuse.

    - one runtime activation per (model, runtime, precision): cases differing only in shape reuse it;
    - reference outputs per (model, shape, seed), from the model's FP32 reference runtime;
    - availability per runtime class, probed once per process.
    """

    def __init__(self, timer: Timer | None = None, defer_blocks: bool = False) -> None:
        self.timer = timer or Timer()
        # a session that measures later blocks in rounds over the whole matrix (measure_block) sets this: run()
        # then measures one block of a case whose runtime re-activates cheaply and leaves the rest for later
        self.defer_blocks = defer_blocks
        self._active: tuple[tuple[Any, ...], Runtime] | None = None
        self._reference_runtime: tuple[tuple[Any, ...], Runtime] | None = None
        self._references: dict[tuple[Any, ...], Any] = {}
        self._availability: dict[type[Runtime], Availability] = {}
        self._reference_task: dict[tuple[Any, ...], float] = {}
        self._settle: dict[str, Any] = {}  # the case's --settle record (waits, re-measured blocks)
        self.profiler = CaseProfiler()  # --profile: graph costs and the machine's ceilings, kept across cases
        self._wrap: Callable[[Callable[[], object]], Callable[[], object]] = _same  # the timed call (audit)

    def explain(self, reason: str, case: CaseId, config: RunConfig) -> str:
        return fed_inputs_note(reason, case.model, config)

    def drop(self) -> None:
        self._drop_active()

    def run(self, case: CaseId, config: RunConfig, payload: Any, on_phase: PhaseCallback) -> CaseResult:
        ensure_user_models(config)
        spec = get_model(case.model)
        set_active_cache_dir(config.artifacts.cache_dir)
        cls = get_runtime(case.runtime)
        refused = check_case(case, spec, cls, config, self._availability) or refuse_variant(case, spec, cls)
        if refused is not None:
            return refused
        return self._measure(case, spec, cls, config, on_phase)

    def _measure(self, case: CaseId, spec: ModelSpec, cls: type[Runtime], config: RunConfig,
                 on_phase: PhaseCallback) -> CaseResult:
        """The case: its timed part (activation, warm-up, timed blocks, with the trackers around them), its drift
        judged against the FP32 reference, then the steps after the loop (steps.STEPS) on the same runtime."""
        ctx, timed, measured = self._timed(case, spec, cls, config, on_phase)
        on_phase("accuracy")
        judged = self._judge(ctx, spec, measured.pop("outputs"))
        ctx.p50_ms = measured["stats"].p50_ms
        measured["checks"] = self._checks(ctx, measured.pop("last_timed"), on_phase)
        return self._result(ctx, timed, measured, judged, run_steps(ctx))

    def _checks(self, ctx: CaseContext, last_timed: Any, on_phase: PhaseCallback) -> dict[str, Any]:
        """--audit and golden outputs (harness.workloads.forward.audit) on the case's runtime after its timed
        loop: {"audit": ..., "golden": ...} for the case's details; {} when neither is asked for."""
        acc = ctx.config.accuracy
        if not (acc.audit or acc.golden_dir):
            return {}
        from pathlib import Path

        from harness.workloads.forward import audit

        out: dict[str, Any] = {}
        if acc.audit:
            on_phase("audit")
            spec, dims, inputs = ctx.spec, ctx.case.dims, ctx.config.inputs
            out["audit"] = audit.run_audits(ctx.runtime, ctx.feed, lambda i: case_feed(
                spec, dims, dataclasses.replace(inputs, seed=inputs.seed + 1 + i))[0], last_timed,
                probe=ContentionProbe(ctx.options.threads, ctx.config.measure.contention_limit))
        if acc.golden_dir:
            on_phase("golden")
            store = Path(acc.golden_dir)
            if acc.record_golden:
                out["golden"] = {"recorded": audit.record_golden(ctx.runtime, ctx.feed, store)}
            else:
                record = audit.golden_index(store).get(ctx.case.id)
                out["golden"] = ({"passed": None, "detail": f"no golden outputs recorded for {ctx.case.id} in "
                                                            f"{store}"} if record is None else
                                 audit.check_golden(ctx.runtime, ctx.feed, audit.load_golden(store, record), record,
                                                    last_timed))
        return out

    def _timed(self, case: CaseId, spec: ModelSpec, cls: type[Runtime], config: RunConfig,
               on_phase: PhaseCallback) -> tuple[CaseContext, TimedRun, dict[str, Any]]:
        """Feed, activation (the variant's model and options), first inference, warm-up and the timed blocks,
        with the case's trackers around them all (memory) and the block trackers around each block."""
        run_spec, options = with_variant(case, spec, runtime_options(spec, config))
        on_phase("load")
        feed, fed = case_feed(spec, case.dims, config.inputs)
        self._settle = {}
        if config.measure.settle_s > 0:  # --settle: a quiet machine before the case, within the bound
            on_phase("settle")
            self._settle["before_case"] = wait_quiet(options.threads, config.measure.settle_s)
        # the case's trackers over activation (or, reused, from here), first inference, warm-up and timed loop
        self._release_other(case, options)
        made = tracker_context(case, cls, config, options)
        case_trackers, block_trackers = make_trackers("case", made), make_trackers("block", made)
        window = Window(batch=case.batch)
        with tracking(case_trackers, window):
            ctx, timed, measured = self._activated(case, spec, run_spec, cls, config, options, feed, on_phase,
                                                   window, block_trackers)
        measured["fed"] = fed
        measured["tracked"] = {k: v for fields in tracked_fields({**case_trackers, **block_trackers}, window).values()
                               for k, v in fields.items()}
        return ctx, timed, measured

    def _activated(self, case: CaseId, spec: ModelSpec, run_spec: ModelSpec, cls: type[Runtime], config: RunConfig,
                   options: RuntimeOptions, feed: dict[str, Any], on_phase: PhaseCallback, window: Window,
                   block_trackers: dict[str, Tracker]) -> tuple[CaseContext, TimedRun, dict[str, Any]]:
        """Inside the case's trackers: activation, first inference, warm-up, then the timed blocks (the case's
        trackers told when the timed part starts: memory holds its sampling thread there)."""
        runtime, reused = self._activate(case, run_spec, cls, case.precision, options)
        window.reused = reused
        on_phase("warmup")
        outputs = runtime.infer(feed)
        call = runtime.bind(feed)
        policy = config.measure.timing
        if runtime.warmup_floor_s > policy.warmup_time_s:
            policy = dataclasses.replace(policy, warmup_time_s=runtime.warmup_floor_s)
        last: list[Any] = [None]  # the timed loop's last output, for --audit and golden outputs (audit.keep_last)
        if config.accuracy.audit or config.accuracy.golden_dir:
            from harness.workloads.forward.audit import keep_last

            self._wrap = lambda c: keep_last(c, last)
            call = self._wrap(call)
        else:
            self._wrap = _same
        setup_s = runtime.setup_s
        window.timing()  # e.g. no memory sampling thread beside the timed loop (MemorySampler.hold)
        timed, blocks, runtime = self._measure_blocks(case, run_spec, cls, case.precision, options, runtime, feed,
                                                      call, policy, config.measure.repeats,
                                                      lambda: on_phase("run"), config.measure.settle_s,
                                                      block_trackers)
        ctx = CaseContext(case, spec, runtime, feed, config, options, policy, self.timer, self.profiler, on_phase)
        measured = {"outputs": outputs, "last_timed": last[0], "reused": reused, "setup_s": setup_s,
                    "blocks": blocks, "fingerprint": run_spec.fingerprint(),
                    "device_timer": runtime.device_timer(),
                    "stats": latency_stats(timed.samples_ns, config.measure.noise_cv)}
        return ctx, timed, measured

    def _judge(self, ctx: CaseContext, spec: ModelSpec, outputs: Any) -> dict[str, Any]:
        """Drift against the model's own FP32 reference (base options: a variant is judged against the model,
        not against itself) and task accuracy where the model has an eval split; sets ctx's judgement."""
        case, config, runtime = ctx.case, ctx.config, ctx.runtime
        base_options = runtime_options(spec, config)
        reference, judged, ref_check = self._reference(spec, case, ctx.feed, base_options, runtime, outputs)
        tolerance = spec.tolerance(case.precision, config.accuracy.tolerance_override(case.precision))
        accuracy = compare(reference, judged, tolerance, classification=spec.task == "classification",
                           random_input=not config.inputs.feeds, precision=str(case.precision))
        accuracy_dict, passed = accuracy.as_dict(), bool(accuracy)
        reasons = [] if ref_check["deterministic"] else [(
            f"nondeterministic reference: {spec.reference} FP32 gave different outputs on two runs of the "
            f"same feed (max_abs {ref_check['repeat_max_abs']:.3g}); drift figures compare against one of them")]
        reasons += list(accuracy.notes) if accuracy else [accuracy.message]  # a pass by the floor says so
        split = task_split(spec, config)
        if split is not None:
            task = self._task_accuracy(spec, case, base_options, runtime, tolerance.min_task_ratio, split)
            accuracy_dict["task"] = task.as_dict()
            if not task:
                passed = False
                reasons.append(task.message)
            accuracy_dict["passed"] = passed
        ctx.drift_passed, ctx.tolerance = bool(accuracy), tolerance
        return {"accuracy": accuracy_dict, "passed": passed, "reasons": reasons, "ref_check": ref_check}

    def _result(self, ctx: CaseContext, timed: TimedRun, m: dict[str, Any], judged: dict[str, Any],
                steps: dict[str, Any]) -> CaseResult:
        case, runtime, stats = ctx.case, ctx.runtime, m["stats"]
        tracked, undeclared = split_fields(m["tracked"], _DECLARED)
        ref_check, noise_cv = judged["ref_check"], ctx.config.measure.noise_cv
        caveat = runtime.caveat()  # e.g. an untuned compiler: said wherever the case's figures are
        checks = m["checks"]
        failed_checks = [f"audit failed: {c['name']}: {c['detail']}" for c in (checks.get("audit") or {}).get(
            "checks", []) if c["passed"] is False]
        if (checks.get("golden") or {}).get("passed") is False:
            failed_checks.append(checks["golden"]["detail"])
        return CaseResult(
            case, "passed" if judged["passed"] and not failed_checks else "failed",
            reason="; ".join([*failed_checks, *judged["reasons"], *([caveat] if caveat else [])]),
            samples_ns=list(timed.samples_ns), warmup_iters=timed.warmup_iters,
            timing_scope=runtime.timing_scope, scenario="single-stream" if case.batch == 1 else "offline",
            latency=stats, throughput_sps=throughput_sps(case.batch, stats.p50_ms),
            accuracy=judged["accuracy"], reference_runtime=ctx.spec.reference,
            setup_s=m["setup_s"], artifact=str(runtime.artifact_path) if runtime.artifact_path else None,
            artifact_cache_hit=runtime.artifact.cache_hit if runtime.artifact else None,
            feed_sha256=feed_digest(ctx.feed), model_fingerprint=m["fingerprint"], **m["blocks"],
            details={**runtime.details(), **({"caveat": caveat} if caveat else {}), **m["fed"], **variant_details(case),
                     "activation_reused": m["reused"], **checks,
                     **({"settle": self._settle} if self._settle else {}),
                     "warmup_time_s": ctx.policy.warmup_time_s,
                     "model_has_torch_module": ctx.spec.build is not None,
                     "reference_repeat_max_abs": ref_check["repeat_max_abs"]
                     if math.isfinite(ref_check["repeat_max_abs"]) else None,
                     **device_timing_details(timed.device_samples_ns, m["device_timer"], noise_cv), **undeclared},
            device_samples_ns=list(timed.device_samples_ns),
            precision_recipe=runtime.recipe or str(case.precision),
            is_reference=ref_check["own"], reference_deterministic=ref_check["deterministic"],
            **steps, **tracked,
        )

    @staticmethod
    def _activation_key(case: CaseId, options: RuntimeOptions) -> tuple[Any, ...]:
        return (*case.activation_key, options.threads, str(options.cache.root), options.exporter,
                options.int8_method, options.calibration_method)

    def _release_other(self, case: CaseId, options: RuntimeOptions) -> None:
        """Drop the previous case's activation before this case's memory figures start, unless this case
        reuses it: its allocations (torch's cached blocks, a CUDA EP's arena) would otherwise count as this
        case's peak (seen on an H200: every batch-1 case reported the batch-32 case's GPU memory before it)."""
        if self._active is not None and self._active[0] != self._activation_key(case, options):
            self._drop_active()

    def _activate(self, case: CaseId, spec: ModelSpec, cls: type[Runtime], precision: Precision,
                  options: RuntimeOptions) -> tuple[Runtime, bool]:
        key = self._activation_key(case, options)
        if self._active is not None and self._active[0] == key:
            return self._active[1], True
        self._drop_active()
        runtime = cls(spec, precision, options)
        runtime.__enter__()
        self._active = (key, runtime)
        return runtime, False

    def _measure_blocks(self, case: CaseId, spec: ModelSpec, cls: type[Runtime], precision: Precision,
                        options: RuntimeOptions, runtime: Runtime, feed: dict[str, Any], call: Callable[[], object],
                        policy: TimingPolicy, repeats: int, on_measure: Callable[[], None], settle_s: float,
                        trackers: dict[str, Tracker]) -> tuple[TimedRun, dict[str, Any], Runtime]:
        """The timed loop in `repeats` blocks, each after a fresh activation where the runtime allows it.

        Interference on a shared machine comes in episodes of seconds (measured here: a 29 us case runs at
        40 us for 1-3 s at a time, single-threaded and pinned alike), so blocks measured back to back can all
        fall into one episode. With `defer_blocks` (a session), a runtime that re-activates cheaply gets one
        block here and its others from `measure_block` in later rounds over the whole matrix, seconds to
        minutes apart; other runtimes (`reactivate_between_repeats` False: a compile or engine build) measure
        all blocks here, reusing the activation. Each block warms up and gets 1/repeats of the minimum time
        and iterations.
        """
        repeats = max(1, int(repeats))
        block = block_policy(policy, repeats)
        deferred = repeats - 1 if self.defer_blocks and cls.reactivate_between_repeats else 0
        samples: list[int] = []
        device: list[int] = []
        measured: list[Block] = []
        warm = 0
        first_setup, first_artifact = runtime.setup_s, runtime.artifact
        for i in range(repeats - deferred):
            if i > 0 and cls.reactivate_between_repeats:
                self._drop_active()
                runtime, _ = self._activate(case, spec, cls, precision, options)
                runtime.infer(feed)  # per-shape setup and first-call work, outside the timed loop
                call = self._wrap(runtime.bind(feed))
                # the case (and the shapes that reuse this activation) report the group's first activation:
                # its setup time and whether it exported; the re-activations are internal to measurement
                runtime.setup_s, runtime.artifact = first_setup, first_artifact
            t, records = self._block(runtime, call, block, case.batch, trackers, on_measure if i == 0 else None)
            if settle_s > 0 and getattr(records.get("contention"), "contended", False):
                t, records = self._resettled(i, t, records, call, block, runtime, options.threads, settle_s,
                                             case.batch, trackers)
            samples += t.samples_ns
            device += t.device_samples_ns
            measured.append(Block.measured(t.samples_ns, "case", i > 0 and cls.reactivate_between_repeats,
                                           **records))
            warm += t.warmup_iters
        # CaseResult fields: the blocks measured here and those left to later rounds, the contention over them
        info: dict[str, Any] = {"blocks": measured, "blocks_pending": deferred} if repeats > 1 else {}
        info["contention"] = case_contention([b.contention for b in measured])
        return TimedRun(tuple(samples), warm, tuple(device)), info, runtime

    def _block(self, runtime: Runtime, call: Callable[[], object], block: TimingPolicy, batch: int,
               trackers: dict[str, Tracker], on_measure: Callable[[], None] | None = None
               ) -> tuple[TimedRun, dict[str, Any]]:
        """One timed block (warm-up, then the timed calls) with the block trackers around it, entered through one
        context stack (harness.measure.tracker): the one sequence of every block a case measures, now, in a later
        round or again after --settle. Returns the timings and the block's own records (name -> record, e.g.
        its contention)."""
        window = Window(batch=batch)
        if on_measure is not None:
            window.on_timed(on_measure, first=True)
        with tracking(trackers, window):
            t = self.timer.run(call, block, runtime.synchronize, on_measure=window.timing,
                               device_timer=runtime.device_timer())
            window.calls = len(t.samples_ns) + t.warmup_iters  # every call of the block: warm-up ones too
        return t, window.records

    def _resettled(self, i: int, t: TimedRun, records: dict[str, Any], call: Callable[[], object],
                   block: TimingPolicy, runtime: Runtime, threads: int, settle_s: float, batch: int,
                   trackers: dict[str, Tracker]) -> tuple[TimedRun, dict[str, Any]]:
        """--settle: block `i` was contended; wait (within `settle_s`) for a quiet machine and measure it again on
        the same activation, with the same trackers. The new block counts for the case; the contended one is
        kept in details["settle"] with its raw samples (never lost, never in the case's percentiles)."""
        waited = wait_quiet(threads, settle_s)
        again, after = self._block(runtime, call, block, batch, trackers)
        self._settle.setdefault("remeasured", []).append(
            {"block": i, "samples_ns": list(t.samples_ns), "device_samples_ns": list(t.device_samples_ns),
             "contention": stored(records.get("contention")), "wait": waited,
             "contended_again": bool(getattr(after.get("contention"), "contended", False))})
        return again, after

    def measure_block(self, case: CaseId, config: RunConfig, fresh: bool = True) -> dict[str, Any]:
        """One more measurement block of an already-run case (a later round of --repeats): activation (fresh
        when `fresh`, else the current one if it is this case's), first call, warm-up, timed loop. No drift,
        memory or reference work: those came with the case's first block. Returns the raw samples; raises on
        failure (the caller keeps the case's earlier blocks and records why this one is missing)."""
        ensure_user_models(config)
        spec = get_model(case.model)
        set_active_cache_dir(config.artifacts.cache_dir)
        cls = get_runtime(case.runtime)
        precision = case.precision
        run_spec, options = with_variant(case, spec, runtime_options(spec, config))
        feed, _ = case_feed(spec, case.dims, config.inputs)
        if fresh:
            self._drop_active()
        runtime, reused = self._activate(case, run_spec, cls, precision, options)
        try:
            runtime.infer(feed)
            call = runtime.bind(feed)
            policy = config.measure.timing
            if runtime.warmup_floor_s > policy.warmup_time_s:
                policy = dataclasses.replace(policy, warmup_time_s=runtime.warmup_floor_s)
            block = block_policy(policy, config.measure.repeats)
            # the block trackers of this round: what they fill is merged into the case by the parent
            # (harness.execution.rounds.merge_block, each field by its tracker's merge)
            trackers = make_trackers("block", tracker_context(case, cls, config, options))
            t, records = self._block(runtime, call, block, case.batch, trackers)
            settled: dict[str, Any] = {}
            if config.measure.settle_s > 0 and getattr(records.get("contention"), "contended", False):
                # --settle holds in later rounds too: a contended block is waited out and measured once more
                self._settle = {}
                t, records = self._resettled(0, t, records, call, block, runtime, options.threads,
                                             config.measure.settle_s, case.batch, trackers)
                settled = self._settle["remeasured"][0]
            tracked = tracked_fields(trackers, Window(batch=case.batch))
        except BaseException:
            self._drop_active()
            raise
        return {"samples_ns": list(t.samples_ns), "device_samples_ns": list(t.device_samples_ns),
                "warmup_iters": t.warmup_iters, "reactivated": not reused, "contention": records.get("contention"),
                "tracked": tracked, **({"settle": settled} if settled else {})}

    def _task_accuracy(self, spec: ModelSpec, case: CaseId, options: RuntimeOptions, runtime: Runtime,
                       min_ratio: float | None, split: Any) -> Any:
        """Top-1 accuracy of this case's runtime on the eval split (at the case's batch size, outside the
        timed loop) beside the FP32 reference runtime's (computed once per model, split and batch size)."""
        output = split.output or spec.outputs[0]
        acc = top1_accuracy(runtime.infer, split, case.batch, output)
        key = (spec.name, spec.fingerprint(), split.description, case.batch, options.threads, options.exporter)
        if key not in self._reference_task:
            if is_reference(runtime, spec):
                self._reference_task[key] = acc
            else:
                self._reference_task[key] = top1_accuracy(self._reference_rt(spec, options).infer, split,
                                                          case.batch, output)
        return judge(acc, self._reference_task[key], split.n, case.batch,
                     min_ratio, spec.reference, split.description)

    def _reference_rt(self, spec: ModelSpec, options: RuntimeOptions) -> Runtime:
        """The model's FP32 reference runtime, activated once and kept while cases of the model run."""
        rkey = (spec.name, spec.reference, options.threads, str(options.cache.root), options.exporter)
        if self._reference_runtime is None or self._reference_runtime[0] != rkey:
            self._drop_reference()
            ref_rt = get_runtime(spec.reference)(spec, Precision.FP32, options)
            ref_rt.__enter__()
            self._reference_runtime = (rkey, ref_rt)
        return self._reference_runtime[1]

    def _reference(self, spec: ModelSpec, case: CaseId, feed: dict[str, Any], options: RuntimeOptions,
                   runtime: Runtime, outputs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        """(reference, judged, check): FP32 outputs of the model's reference runtime on the same feed, computed
        twice (once per shape) to prove they are deterministic; the outputs to judge against them; and
        check = {"own": this case is the reference, "deterministic": both runs equal, "repeat_max_abs"}.

        A case that is its own reference is judged by its second run against its first: 0 when the model is
        deterministic (reports show "reference"), the run-to-run difference when it is not.
        """
        own = is_reference(runtime, spec)
        key = (spec.name, tuple(sorted(case.dims.items())), feed_digest(feed))
        if any(k[0] != spec.name for k in self._references):
            self._references.clear()  # keep one model's references at a time (LM logits are large)
        judged = outputs
        if key not in self._references:
            infer = runtime.infer if own else self._reference_rt(spec, options).infer
            first = {k: np.array(v, copy=True) for k, v in (outputs if own else infer(feed)).items()}
            second = infer(feed)  # a runtime may reuse its output buffers: `first` is a copy
            if own:
                judged = second
            diff = repeat_max_abs(first, second)
            self._references[key] = (first, diff)
        ref, diff = self._references[key]
        return ref, judged, {"own": own, "deterministic": diff == 0.0, "repeat_max_abs": diff}

    def _drop_active(self) -> None:
        if self._active is not None:
            _exit_quietly(self._active[1])
            self._active = None

    def _drop_reference(self) -> None:
        if self._reference_runtime is not None:
            _exit_quietly(self._reference_runtime[1])
            self._reference_runtime = None

    def close(self) -> None:
        self._drop_active()
        self._drop_reference()
        self._references.clear()
        self._reference_task.clear()


def _same(call: Callable[[], object]) -> Callable[[], object]:
    return call


def is_reference(runtime: Runtime, spec: ModelSpec) -> bool:
    """Whether `runtime` is the model's own FP32 reference (its reference runtime at FP32, no variant)."""
    return runtime.name == spec.reference and runtime.precision is Precision.FP32 and runtime.options.variant is None


def refuse_variant(case: CaseId, spec: ModelSpec, cls: type[Runtime]) -> CaseResult | None:
    """The skipped row of a case whose runtime (or model, or precision) cannot take its variant, else None."""
    if case.variant is None:
        return None
    from harness.variants import parse_variant

    variant = parse_variant(case.variant)
    why = variant.refusal(spec, cls.variant_hooks, cls.name, case.precision) if variant is not None else None
    return CaseResult(case, "skipped", reason=why, model_fingerprint=spec.fingerprint()) if why else None


def with_variant(case: CaseId, spec: ModelSpec, options: RuntimeOptions) -> tuple[ModelSpec, RuntimeOptions]:
    """The model and runtime options a case runs with: its variant's (harness.variants) applied to the run's."""
    if case.variant is None:
        return spec, options
    from harness.variants import parse_variant

    variant = parse_variant(case.variant)
    return variant.apply(spec, options) if variant is not None else (spec, options)


def variant_details(case: CaseId) -> dict[str, Any]:
    """What a variant case's knobs are, in words (CaseResult.details["variant"])."""
    if case.variant is None:
        return {}
    from harness.variants import parse_variant

    variant = parse_variant(case.variant)
    knobs = variant.knobs if variant is not None else ()
    return {"variant": {"name": case.variant,
                        "knobs": [{"kind": k.kind.key, "value": k.value, "what": k.kind.title} for k in knobs]}}


_DECLARED = {f.name for f in dataclasses.fields(CaseResult)}  # the fields a tracker may fill by name


def tracker_context(case: CaseId, cls: type[Runtime], config: RunConfig, options: RuntimeOptions) -> TrackerContext:
    """What the case's trackers are made from (harness.measure.tracker)."""
    return TrackerContext(device=cls.device, batch=case.batch, memory_sources=frozenset(cls.memory_sources),
                          threads=options.threads, contention_limit=config.measure.contention_limit)


def repeat_max_abs(first: dict[str, Any], second: dict[str, Any]) -> float:
    """Largest difference between two runs' outputs: 0.0 when identical (NaN matching NaN, inf matching inf),
    inf when names, shapes or dtypes differ or a value is NaN in one run only."""
    if set(first) != set(second):
        return math.inf
    worst = 0.0
    for name, a in first.items():
        a, b = np.asarray(a), np.asarray(second[name])
        if a.shape != b.shape or a.dtype != b.dtype:
            return math.inf
        if not a.size:
            continue
        same = a == b
        if a.dtype.kind in "fc":
            same |= np.isnan(a) & np.isnan(b)
            wide = np.complex128 if a.dtype.kind == "c" else np.float64
            with np.errstate(invalid="ignore"):  # inf - inf: masked by `same`
                d = np.abs(np.subtract(a, b, dtype=wide))
        else:
            d = np.abs(np.subtract(a, b, dtype=np.float64)) if a.dtype.kind in "iu" else (~same).astype(np.float64)
        d = np.where(same, 0.0, np.where(np.isnan(d), np.inf, d))
        worst = max(worst, float(d.max()))
    return worst


def device_timing_details(samples_ns: tuple[int, ...], device_timer: Any, noise_cv: float) -> dict[str, Any]:
    """Details for a case timed with device events: their scope and statistics (samples in the result)."""
    if not samples_ns:
        return {}
    return {"device_timing_scope": getattr(device_timer, "scope", "device"),
            "device_latency": latency_stats(samples_ns, noise_cv).as_dict()}


def _exit_quietly(runtime: Runtime) -> None:
    """Deactivate a runtime we are discarding; its own errors must not mask the case's outcome."""
    try:
        runtime.__exit__(None, None, None)
    except Exception:  # noqa: BLE001
        pass


# Errors that blame an input's values (an index out of a table's range, a value the model refuses).
_VALUE_ERRORS = re.compile(r"out of (data )?bounds|out of range|index .* is out of|invalid (value|index)|"
                           r"indices element", re.IGNORECASE)


def fed_inputs_note(reason: str, model: str, config: RunConfig) -> str:
    """For an error that blames input values: which integer inputs were fed, with what range (else "")."""
    if not _VALUE_ERRORS.search(reason):
        return ""
    try:
        spec = get_model(model)
    except HarnessError:
        return ""
    fed = inputs_fed(spec, config.inputs)
    return (f" [integer inputs fed: {'; '.join(fed)}; give real inputs (--feeds FILE.npz) or ranges "
            f"(--input-range NAME=LO:HI, --input-value NAME=V)]") if fed else ""


def task_split(spec: ModelSpec, config: RunConfig) -> Any:
    """The labelled split a case's task accuracy is judged on: the run's --feeds when they hold labels for
    this model, else the model's own eval split, else None (no task accuracy)."""
    if config.inputs.feeds:
        from harness.feeds import feeds_for_run, labelled_split

        split = labelled_split(feeds_for_run(config.inputs.feeds), spec)
        if split is not None:
            return split
    return spec.eval_split() if spec.eval_split is not None else None
