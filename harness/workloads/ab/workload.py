"""The A/B workload: two sides of one case activated in one worker (anew every pairs / --ab-activations pairs) and
measured in alternating blocks, judged by a paired test (harness.gating.ab); the method is in docs/variants.md."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

from harness.accuracy import compare
from harness.artifacts.cache import set_active_cache_dir
from harness.artifacts.options import RuntimeOptions
from harness.config import RunConfig
from harness.data import case_feed, feed_digest
from harness.errors import UsageError
from harness.gating.ab import judge_ab
from harness.matrix import case_ids
from harness.measure.contention import ContentionProbe, case_contention
from harness.measure.timer import Timer, TimingPolicy
from harness.model import ModelSpec, get_model
from harness.precision import Precision
from harness.results.schema import AbBlock, AbResult, CaseId, CaseResult, RunResults
from harness.results.stats import latency_stats, median_ns, throughput_sps
from harness.runtimes import Availability, Runtime, get_runtime
from harness.workloads.ab.pairs import PairLoop
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


class AbWorkload(Workload):
    """One case per matrix cell of side A (its model or variant); side B is the same cell with B's model or
    variant. Both sides run the same feed; B's outputs are also judged against A's."""

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


AB = AbWorkload()


class AbState(WorkerState):
    def __init__(self, timer: Timer | None = None) -> None:
        self.timer = timer or Timer()
        self._availability: dict[type[Runtime], Availability] = {}

    def run(self, case: CaseId, config: RunConfig, payload: Any, on_phase: PhaseCallback) -> CaseResult:
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
        runtimes: list[Runtime] = []

        def release() -> None:
            for rt in runtimes:
                try:
                    rt.__exit__(None, None, None)
                except Exception:
                    pass
            runtimes.clear()

        def activate() -> list[Runtime]:
            """Both sides activated (anew: the previous activation released first)."""
            release()
            for c, spec, cls in sides:
                # both sessions live in this worker: the side not being measured must not spin for the cores
                run_spec, options = with_variant(c, spec, quiet_options(spec, config))
                rt = cls(run_spec, c.precision, options)
                rt.__enter__()
                runtimes.append(rt)
            return list(runtimes)

        try:
            return self._measure(case, b_case, spec_a, config, feed, fed, activate(), on_phase, activate)
        finally:
            release()

    def _measure(self, case: CaseId, b_case: CaseId, spec: ModelSpec, config: RunConfig, feed: dict[str, Any],
                 fed: dict[str, Any], runtimes: list[Runtime], on_phase: PhaseCallback,
                 activate: Callable[[], list[Runtime]]) -> CaseResult:
        ab = config.ab
        rt_a, rt_b = runtimes
        details_a, details_b = rt_a.details(), rt_b.details()  # of the first activation (later ones replace it)
        on_phase("warmup")
        out_a, out_b = rt_a.infer(feed), rt_b.infer(feed)
        tolerance = spec.tolerance(Precision.FP32)
        b_vs_a = compare(out_a, out_b, tolerance, classification=spec.task == "classification").as_dict()
        t = config.measure.timing
        warm = TimingPolicy(warmup_iters=t.warmup_iters, warmup_time_s=t.warmup_time_s, min_iters=5, min_time_s=0.0)
        calls: dict[str, Callable[[], object]] = {}
        sync: dict[str, Callable[[], None]] = {}
        inject_ns = [0]

        def bind(rts: list[Runtime]) -> dict[str, Any]:
            """Calls of an activation, warmed; B slowed by the planted ns (gate-check) fixed at the first."""
            for s, rt in zip(("a", "b"), rts):
                calls[s], sync[s] = rt.bind(feed), rt.synchronize
            warmed = {s: self.timer.run(calls[s], warm, sync[s]) for s in ("a", "b")}
            if ab.ab_inject > 0:
                inject_ns[0] = inject_ns[0] or int(ab.ab_inject * median_ns(warmed["a"].samples_ns))
                calls["b"] = slowed(calls["b"], inject_ns[0])
            return warmed

        first = bind(runtimes)
        on_phase("run")
        policy = block_policy(config)
        threads = {"a": rt_a.options.threads, "b": rt_b.options.threads}

        def measure(side: str, pair: int, activation: int) -> AbBlock:
            probe = ContentionProbe(threads[side], config.measure.contention_limit)
            timed = self.timer.run(calls[side], policy, sync[side], on_measure=probe.start)
            return AbBlock(side, pair, list(timed.samples_ns), probe.stop(), activation)

        loop = PairLoop(ab, max(threads.values()), measure, lambda _act: bind(activate()))
        order, blocks = loop.run()
        judged = judge_ab(blocks, ab.ab_min_effect, ab.ab_confidence)
        r = judged.ratio
        samples_a = [x for b in blocks if b.side == "a" for x in b.samples_ns]
        stats = latency_stats(samples_a, config.measure.noise_cv)
        result = AbResult(
            a=ab.ab_a, b=ab.ab_b, b_case=b_case, order=order, blocks=blocks, block_time_s=ab.ab_block_time_s,
            inject=ab.ab_inject, verdict=judged.verdict.value, reason=judged.reason,
            ratio=r.ratio if r else None, ci_low=r.low if r else None, ci_high=r.high if r else None,
            confidence=ab.ab_confidence, min_effect=ab.ab_min_effect, pairs_used=judged.pairs_used, b_vs_a=b_vs_a,
            waited_s=round(loop.waited_s, 3), extra_pairs=loop.extra_pairs)
        b_samples = [x for b in blocks if b.side == "b" for x in b.samples_ns]
        # a regression is the check this workload makes: the case fails (pytest and `harness ab` exit 1)
        regressed = judged.verdict.value == "regressed"
        return CaseResult(
            case, "failed" if regressed else "passed",
            reason=judged.reason if regressed or judged.verdict.value == "inconclusive" else "",
            samples_ns=samples_a, warmup_iters=first["a"].warmup_iters, timing_scope=rt_a.timing_scope,
            scenario="single-stream" if case.batch == 1 else "offline", latency=stats,
            throughput_sps=throughput_sps(case.batch, stats.p50_ms), setup_s=rt_a.setup_s,
            feed_sha256=feed_digest(feed), model_fingerprint=rt_a.model.fingerprint(),
            precision_recipe=rt_a.recipe, ab=result,
            contention=case_contention([b.contention for b in blocks]),
            details={"a": details_a, "b": {**details_b, "setup_s": rt_b.setup_s,
                                                  "recipe": rt_b.recipe,
                                                  "latency": latency_stats(b_samples, config.measure.noise_cv)
                                                  .as_dict()}, **fed})
