"""The A/B workload: two sides of a case activated in a worker (anew every pairs / --ab-activations pairs; a new
worker each on one CPU), alternating blocks driven from the parent, a paired judge (docs/variants.md)."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.accuracy import compare
from harness.artifacts.cache import set_active_cache_dir
from harness.artifacts.options import RuntimeOptions
from harness.config import RunConfig
from harness.data import case_feed, feed_digest
from harness.errors import HarnessError, UsageError
from harness.gating.ab import judge_ab
from harness.matrix import case_ids
from harness.measure.contention import ContentionProbe, case_contention, snapshot
from harness.measure.timer import Timer, TimingPolicy
from harness.model import ModelSpec, get_model
from harness.precision import Precision
from harness.results.schema import AbBlock, AbResult, CaseId, CaseResult, RunResults
from harness.results.stats import latency_stats, median_ns, throughput_sps
from harness.runtimes import Availability, Runtime, get_runtime
from harness.workloads.ab.pairs import PairLoop, Stop, failed_block_status, renews_workers
from harness.workloads.base import PhaseCallback, WorkerState, Workload
from harness.workloads.common import check_case, ensure_user_models, runtime_options
from harness.workloads.forward.workload import refuse_variant, with_variant

MODEL_SIDE = "model:"


def side_case(case: CaseId, side: str) -> CaseId:
    """The case a side measures: the case with the side's model (a `model:NAME` side) or variant."""
    if side.startswith(MODEL_SIDE):
        return dataclasses.replace(case, model=side[len(MODEL_SIDE):], variant=None)
    return dataclasses.replace(case, variant=None if side == "base" else side)


def block_policy(config: RunConfig) -> TimingPolicy:
    """One A/B block: a short warm-up of its own (the other side just ran: caches and the thread pool cooled),
    then `ab_block_time_s` and at least 5 calls."""
    t = config.ab.ab_block_time_s
    return TimingPolicy(warmup_iters=1, warmup_time_s=min(0.05, t / 4), min_iters=5, min_time_s=t,
                        max_time_s=max(10.0, 20 * t))


def warm_policy(config: RunConfig) -> TimingPolicy:
    """An activation's warm-up (the run's --warmup, at least 5 calls, nothing timed beyond it)."""
    t = config.measure.timing
    return TimingPolicy(warmup_iters=t.warmup_iters, warmup_time_s=t.warmup_time_s, min_iters=5, min_time_s=0.0)


def side_block(timer: Timer, call: Callable[[], object], sync: Callable[[], None], threads: int, config: RunConfig,
               read: Any = snapshot) -> dict[str, Any]:
    """One A/B block of an activated side (ab's and the gate's workers): its own short warm-up, then the block's
    time (block_policy), the contention probe around it; the reply a measure_block request gets."""
    probe = ContentionProbe(threads, config.measure.contention_limit, read=read)
    timed = timer.run(call, block_policy(config), sync, on_measure=probe.start)
    return {"samples_ns": list(timed.samples_ns), "contention": probe.stop()}


def quiet_options(spec: ModelSpec, config: RunConfig) -> RuntimeOptions:
    """The run's runtime options for one side of an A/B: threads that do not spin between calls (ONNX Runtime's
    intra-op pool spins for work by default, and the idle side's spinning took the cores from the measured
    side: 40 of 40 pairs contended at the default threads on 2 cores)."""
    return dataclasses.replace(runtime_options(spec, config), idle_spinning=False)


def slowed(call: Callable[[], object], delay_ns: int, clock: Callable[[], int] = time.perf_counter_ns
           ) -> Callable[[], object]:
    """`call` followed by a busy wait of `delay_ns` (gate-check's planted slowdown: CPU time, like compute)."""
    def run() -> object:
        out = call()
        end = clock() + delay_ns
        while clock() < end:
            pass
        return out
    return run


@dataclass(frozen=True)
class AbActivation:
    """One activation of a case's two sides, asked of the worker by the parent's pair loop (AbWorkload.execute):
    which activation it is and, from the second on, B's planted slowdown in ns (gate-check's --ab-inject: fixed
    at the first activation from side A's warm-up there)."""

    activation: int
    inject_ns: int = 0


def block_key(case: CaseId, side: str) -> CaseId:
    """The id a block request of `side` ("a" or "b") of the A/B case `case` names: the case with the side marked
    in its variant (both sides of an A/A are the same case; a failed block's message names the side)."""
    return dataclasses.replace(case, variant=f"{case.variant or 'base'}#{side}")


class AbWorkload(Workload):
    """One case per matrix cell of side A (its model or variant); side B is the same cell with B's model or
    variant. Both sides run the same feed; B's outputs are also judged against A's. The parent drives the pairs
    (execute): the worker activates both sides and measures one block per request."""

    name = "ab"
    title = "interleaved A/B"
    option_groups = ("ab",)

    def cases(self, config: RunConfig) -> list[CaseId]:
        m, ab = config.matrix, config.ab
        if ab.ab_a.startswith(MODEL_SIDE) != ab.ab_b.startswith(MODEL_SIDE):
            raise UsageError("ab: both sides are model files, or neither is (variants of the same models)")
        models = [ab.ab_a[len(MODEL_SIDE):]] if ab.ab_a.startswith(MODEL_SIDE) else list(m.models)
        base = case_ids(models, m.runtimes, m.precisions, m.batch_sizes, m.seq_lens)
        return [side_case(c, ab.ab_a) for c in base]

    def worker_state(self, timer: Timer, defer_blocks: bool) -> WorkerState:
        return AbState(timer)

    def terminal_lines(self, run: RunResults) -> list[str]:
        from harness.report.terminal import ab_lines

        return ab_lines(run)

    def execute(self, executor: Any, case: CaseId, config: RunConfig, payload: Any) -> CaseResult:
        """The case's pairs (PairLoop: the drawn order, both sides activated anew every pairs / --ab-activations
        pairs, quiet waits and more pairs within --ab-budget), driven from here over the supervised worker: each
        activation one request, each block one. Where this process may use one CPU each activation after the
        first runs in a new worker (pairs.renews_workers): a worker's own bias lasted all its activations there
        (docs/measurements.md, "A new worker per activation"). A side that fails ends the pairs with its row."""
        ab, renew, t0 = config.ab, renews_workers(), time.perf_counter()
        started = getattr(executor, "workers_started", None)  # a supervised executor counts its workers
        first = executor.run(case, config, AbActivation(0))
        if first.status != "passed":
            return first
        side = first.details.pop(SIDE_INFO)

        def activate(act: int) -> None:
            if renew:
                executor.renew()
            res = executor.run(case, config, AbActivation(act, side["inject_ns"]))
            if res.status != "passed":
                res.reason = f"in its activation {act + 1}: {res.reason}"
                raise Stop(res)

        def measure(s: str, i: int, act: int) -> AbBlock:
            reply = executor.measure_block(block_key(case, s), config, False)
            if "error" in reply:
                raise Stop(CaseResult(case, failed_block_status(reply), phase="run",
                                      reason=f"side {s.upper()} failed in pair {i}: {reply['error']}"))
            return AbBlock(s, i, list(reply["samples_ns"]), reply.get("contention"), act)

        loop = PairLoop(ab, max(side["threads"].values()), measure, activate)
        try:
            loop.run()
        except Stop as stop:
            return stop.value
        row = ab_row(first, side, loop, config)
        row.duration_s = round(time.perf_counter() - t0, 3)
        if started is not None:  # the workers its activations were made in (one each where renewed)
            row.details["ab_workers"] = executor.workers_started - started
        return row


AB = AbWorkload()

# the details key of an activation's row that carries what the parent's loop needs (popped there, never stored)
SIDE_INFO = "ab_activation"


def ab_row(first: CaseResult, side: dict[str, Any], loop: PairLoop, config: RunConfig) -> CaseResult:
    """The A/B case's row: side A's samples over every block, the paired verdict, the first activation's
    identities (both sides' details, B's outputs against A's)."""
    ab, case = config.ab, first.case
    order, blocks = loop.order, loop.blocks
    judged = judge_ab(blocks, ab.ab_min_effect, ab.ab_confidence)
    r = judged.ratio
    samples_a = [x for b in blocks if b.side == "a" for x in b.samples_ns]
    stats = latency_stats(samples_a, config.measure.noise_cv)
    b_case = side_case(case, ab.ab_b)
    result = AbResult(
        a=ab.ab_a, b=ab.ab_b, b_case=b_case, order=order, blocks=blocks, block_time_s=ab.ab_block_time_s,
        inject=ab.ab_inject, verdict=judged.verdict.value, reason=judged.reason,
        ratio=r.ratio if r else None, ci_low=r.low if r else None, ci_high=r.high if r else None,
        confidence=ab.ab_confidence, min_effect=ab.ab_min_effect, pairs_used=judged.pairs_used,
        b_vs_a=side["b_vs_a"], waited_s=round(loop.waited_s, 3), extra_pairs=loop.extra_pairs)
    b_samples = [x for b in blocks if b.side == "b" for x in b.samples_ns]
    details = first.details
    details["b"] = {**details["b"], "latency": latency_stats(b_samples, config.measure.noise_cv).as_dict()}
    # a regression is the check this workload makes: the case fails (pytest and `harness ab` exit 1)
    regressed = judged.verdict.value == "regressed"
    return dataclasses.replace(
        first, status="failed" if regressed else "passed",
        reason=judged.reason if regressed or judged.verdict.value == "inconclusive" else "",
        samples_ns=samples_a, scenario="single-stream" if case.batch == 1 else "offline", latency=stats,
        throughput_sps=throughput_sps(case.batch, stats.p50_ms), ab=result,
        contention=case_contention([b.contention for b in blocks]), details=details)


class AbState(WorkerState):
    """The worker's side of an A/B: both sides of the case activated (anew per AbActivation request: the previous
    activation released first) and warmed, then one block of a side per measure_block request."""

    read_proc = staticmethod(snapshot)  # what the contention probe reads (/proc; tests give a fake one)

    def __init__(self, timer: Timer | None = None) -> None:
        self.timer = timer or Timer()
        self._availability: dict[type[Runtime], Availability] = {}
        self._runtimes: list[Runtime] = []
        self._calls: dict[CaseId, tuple[Callable[[], object], Callable[[], None], int]] = {}

    def run(self, case: CaseId, config: RunConfig, payload: Any, on_phase: PhaseCallback) -> CaseResult:
        if not isinstance(payload, AbActivation):
            raise HarnessError(f"{case.id}: the ab workload's pairs are driven by the session (AbWorkload.execute)")
        self.close()
        ensure_user_models(config)
        set_active_cache_dir(config.artifacts.cache_dir)
        ab = config.ab
        b_case = side_case(case, ab.ab_b)
        sides = []
        for label, c in (("A", case), ("B", b_case)):
            spec, cls = get_model(c.model), get_runtime(c.runtime)
            refused = check_case(c, spec, cls, config, self._availability) or refuse_variant(c, spec, cls)
            if refused is not None:
                return dataclasses.replace(refused, case=case, reason=f"side {label} ({c.id}): {refused.reason}")
            sides.append((c, spec, cls))
        (_, spec_a, _), (_, spec_b, _) = sides
        if [t.name for t in spec_a.inputs] != [t.name for t in spec_b.inputs]:
            raise UsageError(f"ab: {spec_a.name} and {spec_b.name} take different inputs "
                             f"({[t.name for t in spec_a.inputs]} vs {[t.name for t in spec_b.inputs]})")
        on_phase("load")
        feed, fed = case_feed(spec_a, case.dims, config.inputs)
        for c, spec, cls in sides:
            # both sessions live in this worker: the side not being measured must not spin for the cores
            run_spec, options = with_variant(c, spec, quiet_options(spec, config))
            rt = cls(run_spec, c.precision, options)
            rt.__enter__()
            self._runtimes.append(rt)
        rt_a, rt_b = self._runtimes
        on_phase("warmup")
        b_vs_a = None
        if payload.activation == 0:  # B's outputs judged against A's once, on the first activation
            out_a, out_b = rt_a.infer(feed), rt_b.infer(feed)
            b_vs_a = compare(out_a, out_b, spec_a.tolerance(Precision.FP32),
                             classification=spec_a.task == "classification").as_dict()
        warm = warm_policy(config)
        warmed = {}
        for s, rt in zip("ab", self._runtimes):
            call = rt.bind(feed)
            warmed[s] = self.timer.run(call, warm, rt.synchronize)
            self._calls[block_key(case, s)] = (call, rt.synchronize, rt.options.threads)
        inject_ns = payload.inject_ns
        if ab.ab_inject > 0:  # B slowed by the planted ns (gate-check), fixed at the first activation
            inject_ns = inject_ns or int(ab.ab_inject * median_ns(warmed["a"].samples_ns))
            key = block_key(case, "b")
            call, sync, threads = self._calls[key]
            self._calls[key] = (slowed(call, inject_ns), sync, threads)
        info = {"inject_ns": inject_ns, "b_vs_a": b_vs_a, "threads": {"a": rt_a.options.threads,
                                                                       "b": rt_b.options.threads}}
        first = warmed["a"]
        return CaseResult(
            case, "passed", samples_ns=list(first.samples_ns), warmup_iters=first.warmup_iters,
            timing_scope=rt_a.timing_scope, setup_s=rt_a.setup_s, feed_sha256=feed_digest(feed),
            model_fingerprint=rt_a.model.fingerprint(), precision_recipe=rt_a.recipe,
            details={"a": rt_a.details(), "b": {**rt_b.details(), "setup_s": rt_b.setup_s, "recipe": rt_b.recipe},
                     **fed, SIDE_INFO: info})

    def measure_block(self, case: CaseId, config: RunConfig, fresh: bool) -> dict[str, Any]:
        """One block of an activated side (`case`: its block_key): a short warm-up of its own, then the block's
        time (block_policy), with the contention probe of every block."""
        if case not in self._calls:
            raise HarnessError(f"{case.id}: this side is not activated in this worker")
        return side_block(self.timer, *self._calls[case], config, read=self.read_proc)

    def drop(self) -> None:
        self.close()

    def close(self) -> None:
        self._calls.clear()
        for rt in self._runtimes:
            with contextlib.suppress(Exception):  # releasing a broken activation must not fail the next one
                rt.__exit__(None, None, None)
        self._runtimes.clear()
