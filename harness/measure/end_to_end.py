"""End-to-end latency of a case: raw input -> the model's pre-processing -> the runtime -> post-processing."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from harness.errors import ModelError
from harness.measure.timer import Timer, TimingPolicy
from harness.results.records import EndToEndRecord
from harness.results.stats import latency_stats, median_ci_ms, median_ms, throughput_sps


def measure_end_to_end(pipeline: Any, infer: Callable[[Mapping[str, np.ndarray]], Any], inputs: Any,
                       dims: Mapping[str, int], seed: int, timer: Timer, policy: TimingPolicy,
                       synchronize: Callable[[], None], noise_cv: float) -> EndToEndRecord:
    """Time `post(infer(pre(raw)))` with the case's timing policy; also each step's median.

    `infer` is the runtime's full inference path (host inputs in, host outputs out), not the bound call of the
    model-only loop: end to end includes the copies a client pays. The feed `pre` makes is checked against the
    model's inputs (`inputs`: TensorSpecs) first: a pipeline that makes the wrong feed is the model's error.
    """
    raw = pipeline.raw(dims, seed)
    feed = dict(pipeline.pre(raw, dims))
    for t in inputs:
        want = t.concrete_shape(dims)
        got = feed.get(t.name)
        if got is None or tuple(np.shape(got)) != want or np.asarray(got).dtype != np.dtype(t.dtype):
            have = "missing" if got is None else f"{np.asarray(got).dtype}{list(np.shape(got))}"
            raise ModelError(f"pre-processing ({pipeline.steps}) made input {t.name!r} {have}; the model takes "
                             f"{t.dtype}{list(want)}")
    clock = time.perf_counter_ns
    steps: dict[str, list[int]] = {"pre": [], "model": [], "post": []}
    pre, post = pipeline.pre, pipeline.post
    add_pre, add_model, add_post = steps["pre"].append, steps["model"].append, steps["post"].append

    def call() -> object:
        t0 = clock()
        f = pre(raw, dims)
        t1 = clock()
        out = infer(f)
        synchronize()
        t2 = clock()
        result = post(out, f)
        add_pre(t1 - t0)
        add_model(t2 - t1)
        add_post(clock() - t2)
        return result

    timed = timer.run(call, policy, synchronize)
    stats = latency_stats(timed.samples_ns, noise_cv)
    n = len(timed.samples_ns)  # the step lists also hold the warm-up calls: keep the timed ones
    (pre, pre_lo, pre_hi), (model, model_lo, model_hi), (post, post_lo, post_hi) = (
        _median_ci(steps[k][-n:]) for k in ("pre", "model", "post"))
    return EndToEndRecord(
        steps=pipeline.steps, samples_ns=list(timed.samples_ns), warmup_iters=timed.warmup_iters,
        latency=stats, throughput_sps=throughput_sps(int(dims.get("batch", 1)), stats.p50_ms),
        pre_p50_ms=pre, pre_p50_ci_low_ms=pre_lo, pre_p50_ci_high_ms=pre_hi,
        model_p50_ms=model, model_p50_ci_low_ms=model_lo, model_p50_ci_high_ms=model_hi,
        post_p50_ms=post, post_p50_ci_low_ms=post_lo, post_p50_ci_high_ms=post_hi)


def _median_ci(samples_ns: list[int]) -> tuple[float | None, float | None, float | None]:
    """A step's median and its 95% interval, ms (None: not measured, or a side its samples cannot bound)."""
    if not samples_ns:
        return None, None, None
    lo, hi = median_ci_ms(samples_ns)
    return median_ms(samples_ns), lo, hi
