"""The timed loop: warm-up, then iterate until a minimum time AND a minimum count; raw samples kept."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from harness.measure.cuda import DeviceTimer
from harness.results.stats import latency_stats

# A stall does not use up the minimum time. Each timed call counts toward `min_time_s` for at most STALL_FACTOR
# times the fastest call of the block so far, so one call that waited 72 ms for a CPU among 0.05 ms calls counts
# as 0.5 ms, and the block goes on sampling instead of stopping at its minimum count (7 samples per block were
# seen: blocks of 71.97, 0.104 and 0.043 ms). Calls that are all slow (a machine busy for the whole block) would
# then run for long: the block also stops once STALL_WALL_FACTOR times the minimum time has passed on the wall
# clock (with its minimum count reached). Chosen wide: in 103 of 104 measured blocks of 100+ samples on this
# machine the p99 was within 3.4x of the block's fastest call (docs/method.md, "Sample counts that survive a
# stall"), so only stalls are capped.
STALL_FACTOR = 10
STALL_WALL_FACTOR = 4


@dataclass(frozen=True)
class TimingPolicy:
    """When to stop warming up and measuring. Times in seconds.

    Warm-up runs until both `warmup_iters` calls and `warmup_time_s` have passed (caches, allocator
    pools, lazy kernels, clocks); nothing is sized from it. Measurement runs until both `min_iters` samples and
    `min_time_s` of calls have passed, a stalled call counting for at most STALL_FACTOR x the fastest (or
    STALL_WALL_FACTOR x `min_time_s` of wall time has), and stops early only at `max_iters` or `max_time_s` (a
    safety net for very slow cases).
    """

    warmup_iters: int = 5
    warmup_time_s: float = 0.2
    min_iters: int = 20
    min_time_s: float = 1.0
    max_iters: int = 100_000
    max_time_s: float = 120.0

    def __post_init__(self) -> None:
        if self.min_iters < 1 or self.warmup_iters < 0 or self.min_time_s < 0 or self.warmup_time_s < 0:
            raise ValueError(f"invalid timing policy {self}")


@dataclass(frozen=True)
class TimedRun:
    samples_ns: tuple[int, ...]
    warmup_iters: int
    device_samples_ns: tuple[int, ...] = ()  # per call, from the device timer (CUDA events), when one was given


class Timer:
    """Times a zero-argument callable; `clock` returns integer nanoseconds (tests inject a fake clock)."""

    clock: ClassVar[Callable[[], int]] = time.perf_counter_ns

    def __init__(self, clock: Callable[[], int] | None = None) -> None:
        self._clock = clock if clock is not None else type(self).clock

    def run(self, fn: Callable[[], object], policy: TimingPolicy,
            synchronize: Callable[[], None] = lambda: None,
            on_measure: Callable[[], None] | None = None,
            device_timer: DeviceTimer | None = None) -> TimedRun:
        """Warm up, call `on_measure` (phase bookkeeping, outside any timed region), then measure.

        With a `device_timer` (GPU runtimes), each timed call is also bracketed by its start/stop (events on the
        runtime's stream) and its device time is read after the host clock: both sample lists are kept.
        """
        clock = self._clock
        warm_end = clock() + int(policy.warmup_time_s * 1e9)
        warm = 0
        while warm < policy.warmup_iters or clock() < warm_end:
            fn()
            synchronize()
            warm += 1
            if warm >= policy.max_iters:
                break
        if on_measure is not None:
            on_measure()
        samples: list[int] = []
        append = samples.append
        min_ns, max_ns = int(policy.min_time_s * 1e9), int(policy.max_time_s * 1e9)
        wall_ns = STALL_WALL_FACTOR * min_ns
        min_iters, max_iters = policy.min_iters, policy.max_iters
        start = clock()
        if device_timer is not None:
            return self._run_with_device_timer(fn, policy, synchronize, device_timer, warm, start)
        fastest, counted = 1 << 62, 0  # the fastest call so far; the time counted toward min_ns
        while True:
            t0 = clock()
            fn()
            synchronize()
            t1 = clock()
            d = t1 - t0
            append(d)
            if d < fastest:
                fastest = d if d > 0 else 1
            cap = STALL_FACTOR * fastest
            counted += d if d < cap else cap
            n, elapsed = len(samples), t1 - start
            if (n >= min_iters and (counted >= min_ns or elapsed >= wall_ns)) or n >= max_iters or elapsed >= max_ns:
                break
        return TimedRun(tuple(samples), warm)

    def _run_with_device_timer(self, fn: Callable[[], object], policy: TimingPolicy,
                               synchronize: Callable[[], None], device_timer: DeviceTimer, warm: int,
                               start: int) -> TimedRun:
        """The measuring loop of `run` with device events around each call (a separate loop: CPU unchanged)."""
        clock = self._clock
        samples: list[int] = []
        device: list[int] = []
        min_ns, max_ns = int(policy.min_time_s * 1e9), int(policy.max_time_s * 1e9)
        wall_ns = STALL_WALL_FACTOR * min_ns
        dstart, dstop, delapsed = device_timer.start, device_timer.stop, device_timer.elapsed_ns
        fastest, counted = 1 << 62, 0  # as in `run`: a stall counts for at most STALL_FACTOR x the fastest call
        while True:
            t0 = clock()
            dstart()
            fn()
            dstop()
            synchronize()
            t1 = clock()
            d = t1 - t0
            samples.append(d)
            device.append(delapsed())
            fastest = min(fastest, max(d, 1))
            counted += min(d, STALL_FACTOR * fastest)
            n, elapsed = len(samples), t1 - start
            if ((n >= policy.min_iters and (counted >= min_ns or elapsed >= wall_ns)) or n >= policy.max_iters
                    or elapsed >= max_ns):
                break
        return TimedRun(tuple(samples), warm, tuple(device))


def measure_overhead(policy: TimingPolicy | None = None, timer: Timer | None = None) -> dict[str, float]:
    """The harness's own cost per timed iteration (clock reads, loop, bound-call indirection, sync call).

    Measured through the same Timer.run loop with a bound no-op inference, like a trivial model.
    """
    policy = policy or TimingPolicy(warmup_iters=100, warmup_time_s=0.0, min_iters=20_000, min_time_s=0.05)

    def _infer(prepared: object) -> object:
        return prepared

    prepared: dict[str, object] = {}
    bound = lambda: _infer(prepared)  # noqa: E731 - the same shape as Runtime.bind
    run = (timer or Timer()).run(bound, policy, synchronize=lambda: None)
    stats = latency_stats(run.samples_ns)
    return {"overhead_p50_ns": stats.p50_ms * 1e6, "overhead_p99_ns": stats.p99_ms * 1e6,
            "overhead_mean_ns": stats.mean_ms * 1e6, "iterations": stats.iterations}
