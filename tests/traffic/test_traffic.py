"""Traffic specs, traces (ours and AIPerf's) and the open-loop replay on a fake clock."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from harness.config import BatcherPolicy
from harness.errors import UsageError
from harness.traffic.replay import FakeClock, latency_figures, percentile, replay
from harness.traffic.spec import TrafficSpec, load_traffic
from harness.traffic.synthetic import CostModel, SyntheticServer, fifo_replay
from harness.traffic.trace import read_trace

FIX = Path(__file__).parent / "fixtures"


def _toml(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "traffic.toml"
    p.write_text(text)
    return p


def test_a_schedule_replays_the_same_requests_at_the_same_intended_times(tmp_path: Path) -> None:
    p = _toml(tmp_path, 'seed = 7\nrequests = 500\n[arrival]\nprocess = "gamma"\nrate = 300\ncv = 3\n'
                        '[shapes.seq]\n64 = 5\n128 = 3\n256 = 2\n')
    a, b = load_traffic(p).schedule(), load_traffic(p).schedule()
    assert a == b and len(a) == 500
    assert load_traffic(p, seed=8).schedule() != a
    # and replayed twice on the fake clock: the same calls at the same times, the same latencies
    runs = []
    for _ in range(2):
        clock = FakeClock()
        sent: list[tuple[int, int, dict]] = []
        server = SyntheticServer(CostModel(0.5, 0.01), clock)

        def call(reqs, server=server, clock=clock, sent=sent):
            sent.extend((r.index, clock.now(), dict(r.dims)) for r in reqs)
            server(reqs)
        runs.append((replay(a, call, clock, BatcherPolicy(4, 2.0)), sent))
    assert runs[0][1] == runs[1][1]
    assert np.array_equal(runs[0][0].latency_ns, runs[1][0].latency_ns)


def test_shape_mix_and_rate_follow_the_spec() -> None:
    spec = TrafficSpec(process="poisson", rate=200, shapes={"seq": ((64, 1.0), (256, 3.0))}, requests=20000, seed=1)
    reqs = spec.schedule()
    seqs = np.array([r.dims["seq"] for r in reqs])
    assert abs((seqs == 256).mean() - 0.75) < 0.02
    span = reqs[-1].intended_ns / 1e9
    assert abs((len(reqs) - 1) / span / 200 - 1) < 0.03
    # the shapes do not depend on the rate; the times scale with it (common random numbers)
    fast = spec.schedule(rate=400)
    assert [r.dims for r in fast] == [r.dims for r in reqs]
    assert abs(fast[-1].intended_ns * 2 - reqs[-1].intended_ns) <= 2


@pytest.mark.parametrize("process, cv_low, cv_high", [("fixed", 0.0, 0.0), ("poisson", 0.9, 1.1),
                                                      ("gamma", 2.7, 3.3), ("onoff", 1.5, 10.0)])
def test_arrival_processes_have_their_burstiness(process: str, cv_low: float, cv_high: float) -> None:
    spec = TrafficSpec(process=process, rate=100, cv=3.0, on_s=0.05, off_s=0.15, requests=40000, seed=3)
    t = np.array([r.intended_ns for r in spec.schedule()], dtype=float)
    gaps = np.diff(t)
    assert abs(len(t) / (t[-1] / 1e9) / 100 - 1) < 0.05  # the mean rate holds for every process
    cv = gaps.std() / gaps.mean()
    assert cv_low - 1e-9 <= cv <= cv_high + 1e-9


def test_aiperf_mooncake_traces_are_read() -> None:
    recs = read_trace(FIX / "aiperf_production_trace.jsonl")
    assert len(recs) == 10
    assert recs[0].offset_ns == 0 and recs[2].offset_ns == 120_000_000 and recs[2].dims == {"seq": 1024}
    spec = load_traffic(FIX / "aiperf_precise_schedule.jsonl")
    assert spec.process == "trace" and len(spec.schedule()) == 8
    doubled = spec.schedule(rate=2 * spec.natural_rate)
    assert [r.intended_ns for r in doubled] == [r.intended_ns // 2 for r in spec.schedule()]


def test_our_jsonl_csv_and_aiperf_single_turn(tmp_path: Path) -> None:
    (tmp_path / "t.jsonl").write_text('{"timestamp": 10, "seq": 64, "batch": 2}\n{"timestamp": 5, "seq": 32}\n')
    assert [(r.offset_ns, r.dims) for r in read_trace(tmp_path / "t.jsonl")] == [
        (0, {"seq": 32}), (5_000_000, {"seq": 64, "batch": 2})]
    (tmp_path / "t.csv").write_text("timestamp,seq\n0,16\n2.5,32\n")
    assert [r.offset_ns for r in read_trace(tmp_path / "t.csv")] == [0, 2_500_000]
    (tmp_path / "s.jsonl").write_text('{"delay": 0, "text": "a b c"}\n{"delay": 100, "text": "a b"}\n')
    assert [(r.offset_ns, r.dims["seq"]) for r in read_trace(tmp_path / "s.jsonl")] == [(0, 3), (100_000_000, 2)]
    toml = _toml(tmp_path, '[trace]\nfile = "t.csv"\ntime_unit = "s"\n')
    assert load_traffic(toml).schedule()[1].intended_ns == 2_500_000_000


@pytest.mark.parametrize("text, words", [
    ("[arrival]\nprocess = 'zipf'\n", "arrival process 'zipf'"),
    ("[arrival]\nrate = -1\n", "rate must be a number > 0"),
    ("[shapes.seq]\nx = 1\n", "size 'x' is not a whole number"),
    ("colour = 1\n", "unknown key(s) colour"),
    ("[arrival]\nprocess = 'trace'\n", "needs [trace] file"),
    ("seed = [\n", "not valid TOML"),
])
def test_bad_traffic_is_one_line_naming_the_file(tmp_path: Path, text: str, words: str) -> None:
    p = _toml(tmp_path, text)
    with pytest.raises(UsageError) as e:
        load_traffic(p)
    assert words in str(e.value) and str(p) in str(e.value) and "\n" not in str(e.value)


def test_bad_trace_line_is_named(tmp_path: Path) -> None:
    (tmp_path / "t.jsonl").write_text('{"timestamp": 0, "seq": 4}\n{"timestamp": "soon", "seq": 4}\n')
    with pytest.raises(UsageError, match=r"t.jsonl:2: timestamp 'soon' is not a number"):
        read_trace(tmp_path / "t.jsonl")


def test_the_fake_clock_replay_equals_the_closed_form() -> None:
    spec = TrafficSpec(rate=900, shapes={"seq": ((50, 1.0), (150, 1.0))}, requests=3000, seed=5)
    reqs = spec.schedule()
    cost = CostModel(0.4, 0.004)
    clock = FakeClock()
    run = replay(reqs, SyntheticServer(cost, clock), clock, lead_ns=0)
    assert np.array_equal(run.latency_ns, fifo_replay(reqs, cost).latency_ns)


def test_latency_runs_from_the_intended_time_through_a_stall() -> None:
    """A 50 ms stall at fixed 1 ms arrivals: every request it delayed is charged, by hand arithmetic."""
    reqs = TrafficSpec(process="fixed", rate=1000, requests=200, seed=0).schedule()
    clock = FakeClock()

    def call(rs):
        clock.advance(50e6 if rs[0].index == 100 else 0.1e6)
    run = replay(reqs, call, clock, lead_ns=0)
    lat = run.latency_ns / 1e6
    assert lat[99] == pytest.approx(0.1) and lat[100] == pytest.approx(50.0)
    assert lat[101] == pytest.approx(49.1) and lat[110] == pytest.approx(41.0)  # 150 + 10 x 0.1 - 110
    assert (run.send_error_ns[101:150] == -1).all() and run.send_error_ns[0] == 0


def test_hdrhistogram_corrected_recording_is_the_referee() -> None:
    """A closed-loop client hides a stall (coordinated omission); HdrHistogram's corrected recording of that
    client's service times, with the expected interval, agrees with the replay's intended-time latencies."""
    import hdrh.histogram as hdrh  # the `test` extra: a referee that is missing fails, it never skips
    cycles, stall_ms, fast_ms = 20, 120.0, 0.001
    # the closed-loop client: 1000 requests a second, each waiting for the last; a 120 ms stall each second
    closed = [stall_ms if i % 1000 == 0 else fast_ms for i in range(cycles * 1000)]
    naive = hdrh.HdrHistogram(1, 10_000_000, 3)
    corrected = hdrh.HdrHistogram(1, 10_000_000, 3)
    for s in closed:
        naive.record_value(max(1, round(s * 1e3)))
        corrected.record_corrected_value(max(1, round(s * 1e3)), 1000)  # expected interval: 1 ms, in us
    # the open-loop replay over the same 22.4 s: a request every 1 ms whatever happens; the same stalls
    per = 1000 + round(stall_ms)
    reqs = TrafficSpec(process="fixed", rate=1000, requests=cycles * per, seed=0).schedule()
    clock = FakeClock()
    run = replay(reqs, lambda rs: clock.advance((stall_ms if rs[0].index % per == 0 else fast_ms) * 1e6), clock,
                 lead_ns=0)
    ours = run.latency_ns / 1e3  # us
    for p in (50, 90, 95, 99, 99.9):
        want = corrected.get_value_at_percentile(p)
        # within one expected interval: the correction fills the stall's gap in 1 ms steps, the replay's queue
        # drains in (1 - 0.001) ms steps, so a percentile inside the ramp may sit one step apart
        assert abs(percentile(ours, p) - want) <= 1000 + 0.01 * want, p
    assert naive.get_value_at_percentile(99) < 10 and percentile(ours, 99) > 1000  # naive p99 misses the stalls


def test_the_batcher_groups_and_pads() -> None:
    """Requests 0.1 ms apart with a 1 ms wait and max 4: calls of 4; the padded tokens cost."""
    reqs = TrafficSpec(process="fixed", rate=10000, shapes={"seq": ((10, 1.0), (30, 1.0))}, requests=40,
                       seed=2).schedule()
    clock = FakeClock()
    costs = []
    cost = CostModel(1.0, 0.001, gain=0.5, pad=1.0)

    def call(rs):
        costs.append(cost.call_ms(rs))
        clock.advance(costs[-1] * 1e6)
    run = replay(reqs, call, clock, BatcherPolicy(4, 1.0), lead_ns=0)
    assert run.batch_sizes[0] == 4 and sum(run.batch_sizes) == 40
    rs4 = reqs[:4]
    longest = max(r.dims["seq"] for r in rs4)
    assert costs[0] == pytest.approx(1.0 + 0.001 * (1 - 0.5 * 0.75) * 4 * longest)
    figs = latency_figures(run)
    assert figs["p50"] > 0 and "send_error_p99" in figs
