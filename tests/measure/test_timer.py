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


# ------------------------------------------------------------------ sample counts that survive a stall
US50, STALL = 50_000, 72_000_000  # a 0.05 ms call; a stall of three 24 ms scheduler slices


def test_a_stalled_warmup_call_does_not_shrink_the_measurement():
    """Nothing is sized from the warm-up: one stalled warm-up call leaves the block its full minimum time of
    0.05 ms calls (6,667 of them), not the 7 samples seen after such a warm-up."""
    clock = FakeClock()
    fn, _ = workload(clock, [STALL] + [US50] * 20_000)
    policy = TimingPolicy(warmup_iters=5, warmup_time_s=0.05, min_iters=7, min_time_s=1 / 3)
    run = Timer(clock).run(fn, policy)
    assert run.warmup_iters == 5  # the stall covered the warm-up time; the count still holds
    assert len(run.samples_ns) == 6667 and set(run.samples_ns) == {US50}


def test_a_stalled_timed_call_counts_for_ten_fastest_calls_toward_the_minimum_time():
    """Before: the stall used up the block's 333 ms and it stopped at its minimum count (7 samples, one of them
    the stall). Now the stall is kept as a sample but counts 0.5 ms toward the minimum time."""
    clock = FakeClock()
    fn, _ = workload(clock, [US50] * 3 + [400_000_000] + [US50] * 20_000)
    policy = TimingPolicy(warmup_iters=0, warmup_time_s=0, min_iters=7, min_time_s=1 / 3)
    run = Timer(clock).run(fn, policy)
    assert run.samples_ns[3] == 400_000_000  # kept: every sample is raw
    # 3 x 0.05 + 0.5 (the stall, capped at 10 x 0.05) + k x 0.05 >= 333.33 ms
    assert len(run.samples_ns) == 4 + 6654
    from harness.results.stats import latency_stats
    assert latency_stats(run.samples_ns).p50_ms == 0.05


def test_calls_all_slowed_after_a_fast_one_stop_at_four_times_the_minimum_time():
    """A machine busy for the whole block: the block still ends, at 4 x min_time of wall time."""
    clock = FakeClock()
    fn, _ = workload(clock, [US50] + [STALL] * 1000)
    policy = TimingPolicy(warmup_iters=0, warmup_time_s=0, min_iters=7, min_time_s=1 / 3)
    run = Timer(clock).run(fn, policy)
    assert len(run.samples_ns) == 20  # 0.05 + 19 x 72 ms >= 1333 ms
    assert sum(run.samples_ns) >= 4 * 1e9 / 3 > sum(run.samples_ns[:-1])


def test_a_spread_within_ten_times_the_fastest_call_counts_in_full():
    clock = FakeClock()
    fn, _ = workload(clock, [1_000_000, 5_000_000] * 1000)
    run = Timer(clock).run(fn, TimingPolicy(warmup_iters=0, warmup_time_s=0, min_iters=2, min_time_s=0.06))
    assert len(run.samples_ns) == 20


def test_the_device_timed_loop_survives_a_stall_too():
    clock = FakeClock()
    fn, _ = workload(clock, [US50] * 3 + [400_000_000] + [US50] * 20_000)

    class FakeDeviceTimer:
        def start(self):
            pass

        def stop(self):
            pass

        def elapsed_ns(self):
            return 40_000

    policy = TimingPolicy(warmup_iters=0, warmup_time_s=0, min_iters=7, min_time_s=1 / 3)
    run = Timer(clock).run(fn, policy, device_timer=FakeDeviceTimer())
    assert len(run.samples_ns) == len(run.device_samples_ns) == 4 + 6654
