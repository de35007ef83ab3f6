"""--batcher: the dynamic batcher in front of the runtime for LoadGen's Server and Offline scenarios. Its batches
and waits are exact on a fake clock with fake arrivals and a fake runtime of known latency; then real LoadGen
drives it over a fake runtime; a model that cannot batch is skipped with its reason; the option's errors."""

from __future__ import annotations

import json
import queue
from collections import deque
from typing import Any

import numpy as np
import pytest

from harness.artifacts.options import RuntimeOptions
from harness.config import BatcherPolicy, RunConfig
from harness.errors import UsageError
from harness.execution import CaseRunner
from harness.measure.timer import TimingPolicy
from harness.model import BATCH, ModelSpec, TensorSpec, register_model
from harness.options import batcher_policy
from harness.results.schema import BatcherRun, CaseId, ScenarioRun
from harness.workloads.forward.batcher import STOP, Batcher, batch_feeds, batch_refusal, wait_figures
from harness.results.stored import RunEnvironmentRecord

MS = 1_000_000  # ns


def _no_build() -> None:
    raise RuntimeError("test model: no torch module")


class FakeClock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


class FakeArrivals:
    """A queue whose samples arrive at known times on the fake clock: a blocking get moves the clock to the next
    arrival (or by its timeout, raising Empty when none arrives in time); STOP once every sample was taken."""

    def __init__(self, clock: FakeClock, arrivals_ms: list[float]) -> None:
        self.clock = clock
        self.pending = deque((f"s{i}", round(t * MS)) for i, t in enumerate(arrivals_ms))

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        if self.pending and self.pending[0][1] <= self.clock.now:
            return self.pending.popleft()
        if not self.pending and timeout is None and block:
            return STOP
        if not block:
            raise queue.Empty
        wait_ns = None if timeout is None else round(timeout * 1e9)
        if self.pending and (wait_ns is None or self.pending[0][1] <= self.clock.now + wait_ns):
            self.clock.now = self.pending[0][1]
            return self.pending.popleft()
        assert wait_ns is not None
        self.clock.now += wait_ns
        raise queue.Empty


def serve(arrivals_ms: list[float], max_batch: int, max_wait_ms: float, call_ms: float):
    """The fake runtime takes `call_ms` per call whatever its batch; returns the batcher, its calls' (batch size,
    start ms) and the completions (samples, at ms)."""
    clock = FakeClock()
    calls: list[tuple[int, float]] = []
    done: list[tuple[list[str], float]] = []

    def call_of(n: int):
        def call() -> None:
            calls.append((n, clock.now / MS))
            clock.now += round(call_ms * MS)
        return call

    b = Batcher(BatcherPolicy(max_batch, max_wait_ms), [call_of(n) for n in range(1, max_batch + 1)],
                lambda: None, lambda samples: done.append((list(samples), clock.now / MS)), clock=clock)
    b.serve(FakeArrivals(clock, arrivals_ms))
    return b, calls, done


def test_batches_go_out_when_full_or_when_the_oldest_waited_max_wait():
    # max_batch 4, max_wait 2 ms, a call of 1 ms
    arrivals = [0.0, 0.5, 1.0, 1.5,  # full at 1.5: out at once
                3.0, 4.0,  # the oldest waited 2 ms at 5.0: out with 2
                5.2, 5.4, 5.6, 5.8, 5.9]  # queue during the call 5.0-6.0: 4 go out at 6.0, the 5th alone at 7.9
    b, calls, done = serve(arrivals, 4, 2.0, 1.0)
    assert calls == [(4, 1.5), (2, 5.0), (4, 6.0), (1, 7.9)]
    assert b.sizes == [4, 2, 4, 1] and b.full == 2
    assert [w / MS for w in b.waits_ns] == pytest.approx([1.5, 1.0, 0.5, 0.0, 2.0, 1.0, 0.8, 0.6, 0.4, 0.2, 2.0])
    assert b.call_ns == [MS] * 4
    # each sample is completed once, after its own call, in arrival order
    assert done == [(["s0", "s1", "s2", "s3"], 2.5), (["s4", "s5"], 6.0), (["s6", "s7", "s8", "s9"], 7.0),
                    (["s10"], 8.9)]
    fig = b.figures()
    assert fig == BatcherRun(4, 2.0, [1, 1, 0, 2], fig.queue_wait_ms, 2)
    assert fig.batches == 4 and fig.samples == 11 and fig.mean_batch == pytest.approx(11 / 4)
    assert fig.queue_wait_ms == {"p50": 0.8, "p90": 2.0, "p99": 2.0, "mean": pytest.approx(10 / 11, abs=1e-6), "max": 2.0}


def test_an_offline_burst_fills_batches_and_the_rest_waits_max_wait():
    b, calls, _ = serve([0.0] * 10, 4, 2.0, 1.0)
    # full batches at 0 and 1 ms; the last 2 samples' oldest waited 2 ms when the second call ended
    assert calls == [(4, 0.0), (4, 1.0), (2, 2.0)]
    assert [w / MS for w in b.waits_ns] == [0.0] * 4 + [1.0] * 4 + [2.0] * 2


def test_no_wait_dispatches_what_is_queued_and_max_1_never_batches():
    _, calls, _ = serve([0.0, 0.1, 0.2, 3.0], 8, 0.0, 1.0)
    assert calls == [(1, 0.0), (2, 1.0), (1, 3.0)]  # 0.1 and 0.2 queued during the first call
    b, calls, _ = serve([0.0, 0.1, 0.2], 1, 5.0, 1.0)
    assert [n for n, _ in calls] == [1, 1, 1] and b.full == 3


def test_a_call_that_raises_is_recorded_and_every_sample_still_completes():
    clock = FakeClock()
    done: list[str] = []

    def boom() -> None:
        raise RuntimeError("device lost")

    b = Batcher(BatcherPolicy(2, 1.0), [boom, boom], lambda: None, done.extend, clock=clock)
    b.serve(FakeArrivals(clock, [0.0, 0.0, 0.0]))
    assert b.error == "RuntimeError: device lost" and done == ["s0", "s1", "s2"] and b.sizes == [2, 1]


def test_wait_figures_are_nearest_rank():
    assert wait_figures([]) == {}
    assert wait_figures([i * MS for i in range(1, 101)]) == {"p50": 50.0, "p90": 90.0, "p99": 99.0, "mean": 50.5,
                                                            "max": 100.0}


# ------------------------------------------------------------------ feeds and refusals
def test_batch_feeds_cut_rows_along_each_inputs_batch_axis():
    spec = ModelSpec(name="t", build=_no_build, inputs=(TensorSpec("x", (BATCH, 3)), TensorSpec("h", (2, BATCH)),
                                                   TensorSpec("rate", ())), outputs=("y",), task="regression")
    feed = {"x": np.arange(6, dtype=np.float32).reshape(2, 3), "h": np.array([[1, 2], [3, 4]]),
            "rate": np.array(16000)}
    feeds = batch_feeds(spec, feed, 3)
    assert [f["x"].shape for f in feeds] == [(1, 3), (2, 3), (3, 3)]
    np.testing.assert_array_equal(feeds[2]["x"], feed["x"][[0, 1, 0]])  # rows repeated in order
    assert [f["h"].shape for f in feeds] == [(2, 1), (2, 2), (2, 3)]
    np.testing.assert_array_equal(feeds[2]["h"], [[1, 2, 1], [3, 4, 3]])
    assert all(f["rate"] is feed["rate"] for f in feeds) and all(f["h"].flags.c_contiguous for f in feeds)


def test_a_fixed_batch_model_and_a_per_shape_runtime_cannot_batch(fakes):
    fixed = ModelSpec(name="fixed", build=_no_build, inputs=(TensorSpec("x", (1, 8)),), outputs=("y",),
                      task="regression")
    assert batch_refusal(fixed, object()) == ("--batcher: model 'fixed' fixes input 'x' axis 0 at 1: the model "
                                              "cannot take batches of other sizes")
    dynamic = ModelSpec(name="d", build=_no_build, inputs=(TensorSpec("x", (BATCH, 8)),), outputs=("y",),
                        task="regression")

    class PerShape(fakes.FakeOk):
        name = "per-shape"

        def _setup_shape(self, feed):
            pass

    assert "per-shape sets its model up per input shape" in batch_refusal(dynamic, PerShape(dynamic, "fp32", RuntimeOptions(threads=1)))
    assert batch_refusal(dynamic, fakes.FakeOk(dynamic, "fp32", RuntimeOptions(threads=1))) is None


def test_ort_takes_the_batcher_unless_its_axes_are_fixed():
    """ONNX Runtime defines _setup_shape for the axes=fixed variant only: one session takes every shape otherwise,
    so the batcher's calls of several batch sizes may alternate (recommend searched no ort-cpu batcher before)."""
    from harness.runtimes.onnxruntime.cpu import OrtCpu

    dynamic = ModelSpec(name="d", build=_no_build, inputs=(TensorSpec("x", (BATCH, 8)),), outputs=("y",),
                        task="regression")
    assert batch_refusal(dynamic, OrtCpu(dynamic, "fp32", RuntimeOptions(threads=1))) is None
    fixed = OrtCpu(dynamic, "fp32", RuntimeOptions(threads=1, fixed_axes=True))
    assert "ort-cpu sets its model up per input shape" in batch_refusal(dynamic, fixed)


# ------------------------------------------------------------------ the option
def test_batcher_option_parses_and_its_errors_are_one_line():
    assert batcher_policy("max=8,wait=2", "batcher") == BatcherPolicy(8, 2.0)
    assert batcher_policy(" wait=0.5 , max=1 ", "batcher") == BatcherPolicy(1, 0.5)
    bad = {"max=8": "wait missing", "": "expected max=N,wait=MS", "max=8,wait=2,max=4": "max given twice",
           "max=0,wait=2": "max 0 is outside 1..1024", "max=8,wait=-1": "wait -1 ms is outside",
           "max=8,wait=nan": "outside", "max=2.5,wait=1": "not a whole number", "max=8,wait=soon": "not a number",
           "batch=8,wait=1": "expected max=N,wait=MS", "8,2": "expected max=N,wait=MS"}
    for text, words in bad.items():
        with pytest.raises(UsageError) as e:
            batcher_policy(text, "batcher")
        msg = str(e.value)
        assert msg.startswith(f"--batcher {text!r}: ") and words in msg and "\n" not in msg, msg


def test_batcher_option_reaches_the_config_through_the_table(tmp_path):
    from harness.options import parse_run_options

    raw = {"models": "mlp", "runtimes": "torch-cpu", "batcher": "max=4,wait=1.5", "scenarios": "server",
           "out": str(tmp_path / "o")}
    cfg = parse_run_options(raw)
    assert cfg.loadgen.batcher == BatcherPolicy(4, 1.5)
    assert cfg.as_dict()["batcher"] == {"max_batch": 4, "max_wait_ms": 1.5}
    with pytest.raises(UsageError) as e:  # nothing for it to serve
        parse_run_options({**raw, "scenarios": "single-stream"})
    assert str(e.value) == ("--batcher max=4,wait=1.5 serves the server and offline scenarios and --traffic; "
                            "--scenarios has neither (single-stream) and no --traffic was given")


# ------------------------------------------------------------------ real LoadGen over a fake runtime
@pytest.fixture
def config(fakes, tmp_path):
    return RunConfig.build(models=("fake-linear",), runtimes=("fake-2ms",), repeats=1,
                           timing=TimingPolicy(min_time_s=0.05, min_iters=5, warmup_iters=1),
                           cache_dir=tmp_path / "cache", out_dir=tmp_path / "out", scenario_duration_s=0.2)


def test_loadgen_server_and_offline_through_the_batcher(config):
    cfg = config.replace(scenarios=("offline", "server", "single-stream"), server_qps=800.0,
                         server_latency_ms=50.0, scenario_queries=200, batcher=BatcherPolicy(4, 3.0))
    r = CaseRunner().run(CaseId("fake-linear", "fake-2ms", "fp32", 1, None, "cpu"), cfg)
    assert r.status == "passed", r.reason
    ss, off, sv = r.scenarios
    assert ss.scenario == "single-stream" and ss.batcher is None  # not a batched scenario
    for run in (off, sv):
        assert run.result in ("VALID", "INVALID") and run.error is None, (run.result, run.error)
        b = run.batcher
        assert b is not None and b.max_batch == 4 and b.max_wait_ms == 3.0 and len(b.batch_sizes) == 4
        # every sample LoadGen issued went out in exactly one call
        assert b.samples == run.query_count * run.samples_per_query and b.batches == run.calls
        assert 0 <= b.queue_wait_ms["p50"] <= b.queue_wait_ms["p99"] <= b.queue_wait_ms["max"]
    # offline: one query of many samples; all but the last call full
    assert off.batcher.full_batches >= off.batcher.batches - 1
    # server at 800/s against a 2 ms call: single calls cannot keep up (500/s), so samples queue and batch
    assert sv.batcher.mean_batch > 1


def test_a_fixed_batch_model_skips_the_batched_scenarios_with_the_reason(config, fakes):
    register_model(ModelSpec(name="fake-fixed", build=_no_build, inputs=(TensorSpec("x", (1, 8)),), outputs=("y",),
                             task="regression", reference_runtime="fake-ok"), replace=True)
    cfg = config.replace(models=("fake-fixed",), scenarios=("single-stream", "offline", "server"),
                         server_qps=100.0, server_latency_ms=50.0, batcher=BatcherPolicy(4, 2.0))
    r = CaseRunner().run(CaseId("fake-fixed", "fake-2ms", "fp32", 1, None, "cpu"), cfg)
    ss, off, sv = r.scenarios
    assert ss.result == "VALID"  # single-stream does not go through the batcher
    for run in (off, sv):
        assert run.result == "skipped" and run.batcher is None
        assert run.error == ("--batcher: model 'fake-fixed' fixes input 'x' axis 0 at 1: the model cannot take "
                             "batches of other sizes")
    assert sv.target_qps == 100.0


# ------------------------------------------------------------------ storage and the report
@pytest.mark.e2e
def test_the_batchers_figures_survive_results_json_and_the_report_draws_its_curve(config, tmp_path):
    import dataclasses

    from harness.report.render import render_html, render_markdown
    from harness.results.schema import RunResults, results_from_doc

    base = CaseRunner().run(CaseId("fake-linear", "fake-2ms", "fp32", 1, None, "cpu"), config)
    plain = dataclasses.replace(base, case=CaseId("fake-linear", "fake-ok", "fp32", 1, None, "cpu"), scenarios=[
        ScenarioRun("server", "VALID", target_qps=q, samples_per_s=q, latency_ms={"p50": 2.0, "p99": p99},
                    target_latency_ms=20.0, search_step=i + 1) for i, (q, p99) in enumerate([(100.0, 4.0),
                                                                                             (400.0, 19.0)])])
    batched = dataclasses.replace(base, scenarios=[
        ScenarioRun("offline", "VALID", samples_per_s=1900.0, query_count=1, samples_per_query=400,
                    batcher=BatcherRun(4, 2.0, [0, 0, 0, 100], {"p50": 0.1, "p99": 0.9}, 100)),
        *[ScenarioRun("server", "VALID", target_qps=q, samples_per_s=q, latency_ms={"p50": 3.0, "p99": p99},
                      target_latency_ms=20.0, search_step=i + 1,
                      batcher=BatcherRun(4, 2.0, hist, {"p50": 1.5, "p99": 2.0}, hist[3]))
          for i, (q, p99, hist) in enumerate([(100.0, 5.0, [90, 5, 0, 0]), (800.0, 9.5, [10, 20, 30, 117])])]])
    run = RunResults(run_id="r", started_at="t", environment=RunEnvironmentRecord(), config={}, cases=[plain, batched])
    back = results_from_doc(json.loads(run.to_json()))
    assert back.cases[1].scenarios[2].batcher == batched.scenarios[2].batcher
    assert back.cases[1].scenarios[2].batcher.mean_batch == pytest.approx((10 + 40 + 90 + 468) / 177)
    html = render_html(back)
    sec = html[html.index("Dynamic batcher (--batcher)"):html.index("Drift and speed per precision")]
    assert "<h3>fake-linear</h3>" in sec and sec.count("<svg") == 1
    assert "fake-2ms b1, batcher max 4 wait 2 ms p99" in sec and "fake-ok b1, no batcher p99" in sec
    assert "p99 bound 20 ms" in sec
    assert "1:10 2:20 3:30 4:117" in sec and "4:100" in sec and ">3.44<" in sec  # the histogram and mean batch
    assert sec.count("<tr>") == 1 + 3  # the header, offline and two server tries (the plain case has no rows)
    md = render_markdown(back)
    assert "max 4 wait 2 ms: mean batch 3.44, queue wait p99 2 ms" in md  # the Server peak's batches


def test_the_default_server_bound_adds_the_batchers_wait_and_the_terminal_names_the_batcher(config):
    from harness.report.terminal import scenario_lines
    from harness.results.schema import RunResults
    from harness.workloads.forward.scenarios import RuntimeSut

    sut = RuntimeSut(lambda: None, lambda: None, batch=1)
    sut.call_ns = [2 * MS] * 5
    sut.batcher = Batcher(BatcherPolicy(8, 3.0), [lambda: None] * 8, lambda: None, lambda s: None)
    sut.issuing_loop = lambda config, qps: ScenarioRun("server", "INVALID", latency_ms={"p99": 0.5})  # its own test
    sut.server_bound(config, 2e-3, ScenarioRun("single-stream", "VALID", latency_ms={"p99": 1.0}), 1000.0)
    assert sut.default_bound_ms == pytest.approx(23.5)
    assert sut.bound_basis == ("10 x the median call of 2 ms + the issuing loop's p99 at 2295 QPS of 0.5 ms (the lower "
                               "of 2 no-op Server tests through the same path), plus the batcher's max wait of 3 ms")
    assert sut.per_call("server") == sut.per_call("offline") == 8 and sut.per_call("single-stream") == 1
    # LoadGen expects the batcher's full call (timed before the tests), not the case's call, in Offline
    sut.batched_ns = [4 * MS, 5 * MS, 6 * MS]
    assert sut.pace_for("offline", 1.0) == 5e-3 and sut.pace_for("single-stream", 1.0) == 2e-3
    assert sut.settings("offline", config, 2e-3, None).offline_expected_qps == pytest.approx(2 * 8 / 5e-3)
    c = CaseRunner().run(CaseId("fake-linear", "fake-2ms", "fp32", 1, None, "cpu"), config)
    c.scenarios = [ScenarioRun("server", "VALID", target_qps=900.0, latency_ms={"p99": 7.0}, target_latency_ms=23.0,
                               batcher=BatcherRun(8, 3.0, [1, 0, 0, 0, 0, 0, 0, 3], {"p99": 2.5}, 3))]
    (line,) = scenario_lines(RunResults(run_id="r", started_at="t", environment=RunEnvironmentRecord(), config={}, cases=[c]))
    assert "server VALID 900 QPS, p99 7 ms under a 23 ms bound; 1 of 1 tries VALID (batcher max 8 wait 3 ms: " \
           "mean batch 6.25, queue wait p99 2.5 ms)" in line, line
