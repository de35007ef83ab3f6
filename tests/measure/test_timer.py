"""Timer: warm-up and stopping rules, driven by a fake clock (no real timing in unit tests)."""

from __future__ import annotations

import pytest

from harness.measure.timer import Timer, TimingPolicy, measure_overhead


class FakeClock:
    """Nanosecond clock that advances only when the fake workload runs."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


def workload(clock: FakeClock, durations_ns):
    it = iter(durations_ns)
    calls = []

    def fn():
        d = next(it)
        calls.append(d)
        clock.now += d

    return fn, calls


def test_stops_when_min_time_and_min_iters_both_reached():
    clock = FakeClock()
    fn, _ = workload(clock, [1_000_000] * 10_000)  # 1 ms per call
    policy = TimingPolicy(warmup_iters=3, warmup_time_s=0.0, min_iters=10, min_time_s=0.05)
    run = Timer(clock).run(fn, policy)
    assert run.warmup_iters == 3
    assert len(run.samples_ns) == 50  # 50 ms needed: time dominates the count
    assert set(run.samples_ns) == {1_000_000}


def test_min_iters_dominates_for_slow_calls():
    clock = FakeClock()
    fn, _ = workload(clock, [100_000_000] * 100)  # 100 ms per call
    policy = TimingPolicy(warmup_iters=1, warmup_time_s=0.0, min_iters=7, min_time_s=0.05)
    run = Timer(clock).run(fn, policy)
    assert len(run.samples_ns) == 7


def test_warmup_runs_for_its_minimum_time():
    clock = FakeClock()
    fn, calls = workload(clock, [10_000_000] * 1000)  # 10 ms
    policy = TimingPolicy(warmup_iters=2, warmup_time_s=0.1, min_iters=1, min_time_s=0.0)
    run = Timer(clock).run(fn, policy)
    assert run.warmup_iters == 10  # 100 ms of warm-up at 10 ms per call
    assert len(run.samples_ns) == 1
    assert len(calls) == 11


def test_samples_are_raw_and_exclude_warmup():
    clock = FakeClock()
    fn, _ = workload(clock, [5, 5, 7, 8, 9, 10])
    run = Timer(clock).run(fn, TimingPolicy(warmup_iters=2, warmup_time_s=0, min_iters=4, min_time_s=0))
    assert run.samples_ns == (7, 8, 9, 10)


def test_synchronize_is_inside_the_timed_region_and_on_measure_outside():
    clock = FakeClock()
    events = []

    def fn():
        events.append("call")
        clock.now += 1

    def sync():
        events.append("sync")
        clock.now += 100  # a device finishing its queued work

    run = Timer(clock).run(fn, TimingPolicy(warmup_iters=1, warmup_time_s=0, min_iters=2, min_time_s=0),
                           synchronize=sync, on_measure=lambda: events.append("measure"))
    assert events == ["call", "sync", "measure", "call", "sync", "call", "sync"]
    assert run.samples_ns == (101, 101)


def test_max_iters_is_a_safety_net():
    clock = FakeClock()
    fn, _ = workload(clock, [0] * 1000)  # a zero-time call never reaches min_time
    run = Timer(clock).run(fn, TimingPolicy(warmup_iters=0, warmup_time_s=0, min_iters=1, min_time_s=1.0,
                                            max_iters=50))
    assert len(run.samples_ns) == 50


def test_invalid_policy_is_rejected():
    with pytest.raises(ValueError):
        TimingPolicy(min_iters=0)


def test_overhead_measurement_reports_per_iteration_cost():
    clock = FakeClock()

    class TickingClock(FakeClock):
        def __call__(self):
            self.now += 40  # every clock read costs 40 ns
            return self.now

    t = TickingClock()
    out = measure_overhead(timer=Timer(t))
    assert out["iterations"] >= 20_000
    assert out["overhead_p50_ns"] == pytest.approx(40.0)
    del clock
