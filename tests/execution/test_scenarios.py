"""--scenarios: MLPerf LoadGen drives a fake runtime of known latency; its figures, verdicts, storage, report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.config import RunConfig
from harness.errors import ResultsError, UsageError
from harness.execution import CaseRunner
from harness.workloads.forward.scenarios import RuntimeSut, server_search
from harness.measure.timer import TimingPolicy
from harness.results.schema import CaseId, RunResults, ScenarioRun, peak_server, results_from_doc
from harness.results.stored import BlockContention
from harness.results.stored import RunEnvironmentRecord

DELAY_MS = 2.0  # fake-2ms sleeps this long per call


@pytest.fixture
def config(fakes, tmp_path):
    return RunConfig.build(models=("fake-linear",), runtimes=("fake-2ms",), repeats=1,
                     timing=TimingPolicy(min_time_s=0.05, min_iters=5, warmup_iters=1),
                     cache_dir=tmp_path / "cache", out_dir=tmp_path / "out", scenario_duration_s=0.25)


def case(batch: int) -> CaseId:
    return CaseId("fake-linear", "fake-2ms", "fp32", batch, None, "cpu")


def near_calls(loadgen_ms: float, r: ScenarioRun) -> bool:
    """LoadGen's latency of a sample served by one call against the fake's own: the call as the SUT timed it
    (at least the 2 ms sleep; more when the machine is shared), plus LoadGen's overhead and scheduling."""
    return DELAY_MS <= r.call_p50_ms and r.call_p50_ms * 0.95 <= loadgen_ms <= r.call_p50_ms * 1.25 + 0.5


def test_single_stream_and_offline_match_the_fake_latency(config, tmp_path):
    cfg = config.replace(scenarios=("offline", "single-stream"))
    phases: list[str] = []
    r = CaseRunner().run(case(4), cfg, on_phase=phases.append)
    assert r.status == "passed", r.reason
    assert phases[-1] == "scenarios" and r.scenario == "offline"  # the timed loop's label is unchanged
    ss, off = r.scenarios
    assert (ss.scenario, off.scenario) == ("single-stream", "offline")  # LoadGen's run order, not the option's
    assert ss.result == "VALID" and not ss.reasons and ss.checks == {
        "min_duration": True, "min_queries": True, "early_stopping": True}
    assert ss.min_duration_s == 0.25 and ss.min_query_count == 64 and ss.query_count >= 64
    # one sample per query, served by one batch-4 call: LoadGen's percentiles are the fake's delay
    assert ss.calls == ss.query_count and near_calls(ss.latency_ms["p50"], ss), (ss.latency_ms, ss.call_p50_ms)
    assert ss.latency_ms["p90"] >= ss.latency_ms["p50"] >= DELAY_MS and ss.early_stopping_ms >= DELAY_MS
    # offline: 4 samples per call of 2 ms -> at most 2,000 samples/s; LoadGen's figure is 4 / the mean call
    assert off.result == "VALID" and off.query_count == 1 and off.samples_per_query > 4
    assert off.calls == -(-off.samples_per_query // 4)  # full batches of 4, the last one padded
    assert off.samples_per_s <= 4 / (DELAY_MS / 1e3), off.samples_per_s
    assert 0.8 <= off.samples_per_s * off.call_mean_ms / 1e3 / 4 <= 1.02, (off.samples_per_s, off.call_mean_ms)
    logs = tmp_path / "out" / ss.log_dir
    assert "Result is : VALID" in (logs / "mlperf_log_summary.txt").read_text()
    assert (logs / "mlperf_log_detail.txt").is_file() and not (logs / "mlperf_log_trace.json").exists()


def test_multi_stream_queries_of_eight_samples_take_one_batch_8_call(config):
    cfg = config.replace(scenarios=("multi-stream",), scenario_duration_s=0.1)
    (ms,) = CaseRunner().run(case(8), cfg).scenarios
    assert ms.scenario == "multi-stream" and ms.samples_per_query == 8 and ms.query_count >= 662
    assert ms.result == "VALID", ms.reasons
    assert ms.calls == ms.query_count and near_calls(ms.query_latency_ms["p50"], ms)
    assert ms.query_latency_ms["p99"] >= ms.query_latency_ms["p50"] >= DELAY_MS


def test_server_at_an_impossible_qps_is_invalid_with_loadgens_reason(config):
    # 2,000 queries/s of one sample against a 2 ms call at batch 1 (500/s at most), p99 bound 10 ms
    cfg = config.replace(scenarios=("server",), server_qps=2000.0, server_latency_ms=10.0,
                              scenario_duration_s=0.1, scenario_queries=100)
    (sv,) = CaseRunner().run(case(1), cfg).scenarios
    assert sv.result == "INVALID" and sv.target_qps == 2000 and sv.target_latency_ms == 10.0
    assert sv.search_step is None and sv.checks["performance_constraints"] is False
    assert "performance constraints not satisfied" in sv.reasons
    assert any("Reduce target QPS" in reason for reason in sv.reasons), sv.reasons
    assert sv.overlatency_queries > 0 and sv.latency_ms["p99"] > 10.0
    assert sv.samples_per_s <= 1000 / DELAY_MS * 1.02  # completed: what the fake can serve, not what was asked


class _Verdicts:
    """A stand-in for RuntimeSut.test: VALID up to a known capacity, as a LoadGen Server test would be."""

    batch = 1

    bound_unusable = loop_p99_ms = None

    def __init__(self, peak: float) -> None:
        self.peak, self.asked = peak, []

    def bound_at(self, config, qps):  # the default bound's per-try part: tested on _PacedSut
        pass

    def pace_s(self, fallback_s):
        return fallback_s

    def per_call(self, scenario):
        return self.batch

    def pace_for(self, scenario, fallback_s):
        return fallback_s

    def test(self, scenario, config, p50_s, log_dir, qps=None):
        self.asked.append(qps)
        return ScenarioRun("server", "VALID" if qps <= self.peak else "INVALID", target_qps=qps)


def test_server_search_bisects_below_the_offline_throughput_and_keeps_every_try(config):
    sut = _Verdicts(peak=300.0)
    cfg = config.replace(server_tries=4)
    tries = server_search(sut, cfg, p50_s=0.002, offline_sps=400.0, logs=None)
    assert sut.asked == [200.0, 300.0, 350.0, 325.0]
    assert [t.search_step for t in tries] == [1, 2, 3, 4]
    assert [t.result for t in tries] == ["VALID", "VALID", "INVALID", "INVALID"]
    assert peak_server(tries).target_qps == 300.0
    # without an Offline figure the search starts from batch / timed-loop p50; with no VALID try after
    # --server-tries it goes on halving, SERVER_EXTRA_TRIES more at most
    sut = _Verdicts(peak=0.0)
    tries = server_search(sut, cfg.replace(server_tries=2), p50_s=0.01, offline_sps=None, logs=None)
    assert sut.asked == [50.0, 25.0, 12.5, 6.25, 3.12] and peak_server(tries).result == "INVALID"
    # ... and stops at the first VALID one (the mlp: the Offline figure 10 x what its Server path serves)
    sut = _Verdicts(peak=2500.0)
    tries = server_search(sut, cfg, p50_s=0.01, offline_sps=47600.0, logs=None)
    assert sut.asked == [23800.0, 11900.0, 5950.0, 2975.0, 1488.0] and [t.search_step for t in tries] == [1, 2, 3, 4, 5]
    assert peak_server(tries).target_qps == 1488.0


def test_a_runtime_that_raises_under_load_is_an_error_record_not_a_broken_case(config):
    def boom():
        raise RuntimeError("device lost")

    r = RuntimeSut(boom, lambda: None, 1).test("single-stream", config.replace(scenario_duration_s=0.01),
                                               0.001, None)
    assert r.result == "error" and "RuntimeError: device lost" in r.error


def test_the_runtime_is_called_on_the_thread_that_activated_it_while_loadgen_runs_beside(config):
    import threading
    import time

    threads = set()

    def call():
        threads.add(threading.get_ident())
        time.sleep(0.0005)

    sut = RuntimeSut(call, lambda: None, 2)
    r = sut.test("offline", config.replace(scenario_duration_s=0.05), 0.0005, None)
    assert r.result == "VALID" and r.calls >= 2 and threads == {threading.get_ident()}


def test_a_runtime_that_fails_before_the_tests_gives_error_records_in_run_order(config):
    from harness.workloads.forward.scenarios import run_scenarios

    class Broken:
        def bind(self, feed):
            def call():
                raise RuntimeError("no device")
            return call

        def synchronize(self):
            pass

    cfg = config.replace(scenarios=("server", "single-stream"))
    runs = run_scenarios(Broken(), {}, case(1), cfg, 2.0)
    assert [(r.scenario, r.result) for r in runs] == [("single-stream", "error"), ("server", "error")]
    assert "timing calls before the tests: RuntimeError: no device" in runs[0].error


def test_scenario_records_survive_results_json_and_the_reader_checks_them(config, tmp_path):
    cfg = config.replace(scenarios=("single-stream",), scenario_duration_s=0.05,
                              scenario_queries=10)
    result = CaseRunner().run(case(1), cfg)
    run = RunResults(run_id="r", started_at="t", environment=RunEnvironmentRecord(), config={}, cases=[result])
    doc = json.loads(run.to_json())
    back = results_from_doc(doc, "results.json")
    assert back.cases[0].scenarios == result.scenarios and back.cases[0].scenarios[0].log_dir
    doc["cases"][0]["scenarios"][0]["result"] = "MAYBE"
    with pytest.raises(ResultsError, match=r"results.json: cases\[0\].scenarios\[0\].result"):
        results_from_doc(doc, "results.json")
    doc["cases"][0]["scenarios"][0].update(result="VALID", samples_per_s=-1.0)
    with pytest.raises(ResultsError, match=r"cases\[0\].scenarios\[0\].samples_per_s"):
        results_from_doc(doc, "results.json")
    del doc["cases"][0]["scenarios"]  # results written before --scenarios read as none
    assert results_from_doc(doc, "results.json").cases[0].scenarios == []


def test_report_shows_a_load_scenarios_table_per_model(config):
    from harness.report.render import render_html, render_markdown

    c = CaseRunner().run(case(1), config)
    c.scenarios = [
        ScenarioRun("single-stream", "VALID", latency_ms={"p50": 2.1, "p90": 2.2, "p99": 2.5}, min_duration_s=1.0,
                    min_query_count=64, query_count=480),
        ScenarioRun("server", "VALID", target_qps=200.0, target_latency_ms=21.0, search_step=1),
        ScenarioRun("server", "INVALID", target_qps=300.0, target_latency_ms=21.0, search_step=2,
                    reasons=["performance constraints not satisfied", "Reduce target QPS to improve latency."]),
    ]
    html = render_html(RunResults(run_id="r", started_at="t", environment=RunEnvironmentRecord(), config={}, cases=[c]))
    table = html[html.index("Load scenarios (MLPerf LoadGen)"):html.index("Drift and speed per precision")]
    assert "<h3>fake-linear</h3>" in table and "p90 2.2 ms" in table and ">480<" in table
    assert "200 QPS at p99 ≤ 21 ms" in table and "200 VALID, 300 INVALID" in table
    assert "INVALID" in table and "Reduce target QPS" not in table  # the peak row is the VALID try
    md = render_markdown(RunResults(run_id="r", started_at="t", environment=RunEnvironmentRecord(), config={}, cases=[c]))
    assert "### Load scenarios (MLPerf LoadGen)" in md and "200 QPS at p99 ≤ 21 ms" in md


def test_scenario_options_parse_from_the_table(tmp_path):
    from harness.options import parse_run_options

    raw = {"models": "mlp", "runtimes": "torch-cpu", "out": str(tmp_path / "o"),
           "scenarios": "server,single-stream", "scenario_duration": "0.5", "server_latency": "15"}
    cfg = parse_run_options(raw)
    assert cfg.loadgen.scenarios == ("server", "single-stream") and cfg.loadgen.scenario_duration_s == 0.5
    assert cfg.loadgen.server_latency_ms == 15.0 and cfg.loadgen.server_qps is None and cfg.loadgen.scenario_queries is None
    assert parse_run_options({**raw, "scenarios": "all"}).loadgen.scenarios == (
        "single-stream", "multi-stream", "server", "offline")
    assert parse_run_options({k: v for k, v in raw.items() if k != "scenarios"}).loadgen.scenarios == ()
    with pytest.raises(UsageError, match="--scenarios 'burst': valid scenarios"):
        parse_run_options({**raw, "scenarios": "burst"})


@pytest.mark.e2e
def test_cli_run_stores_scenarios_from_the_worker_and_renders_them(fake_env, tmp_path):
    import subprocess
    import sys

    from harness.results import load_results

    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--models", "fake-linear", "--runtimes",
                           "fake-2ms", "--batch-sizes", "1", "--min-time", "0.05", "--min-iters", "5",
                           "--repeats", "1", "--scenarios", "single-stream,server", "--server-qps", "100",
                           "--scenario-duration", "0.1", "--scenario-queries", "20", "--out", str(out)],
                          capture_output=True, text=True, env=fake_env, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (c,) = load_results(out).cases
    assert [s.scenario for s in c.scenarios] == ["single-stream", "server"]
    assert c.scenarios[1].target_qps == 100 and c.scenarios[1].query_count >= 10
    assert (out / c.scenarios[0].log_dir / "mlperf_log_summary.txt").is_file()
    assert "Load scenarios (MLPerf LoadGen)" in (out / "report.html").read_text()
    assert Path(out / "loadgen").is_dir()


def test_a_test_that_would_pass_the_case_budget_is_skipped_with_the_reason(config):
    cfg = config.replace(scenarios=("single-stream", "multi-stream"), case_timeout_s=2.0,
                              scenario_duration_s=0.05)
    ss, ms = CaseRunner().run(case(1), cfg).scenarios
    assert ss.result == "VALID"  # 64 queries x 2 ms fit in 1 s
    assert ms.result == "skipped" and "past the case's budget" in ms.error  # 662 x 8 calls x 2 ms do not


def test_every_try_of_a_server_search_is_judged_against_one_bound(config):
    cfg = config.replace(scenarios=("server",), server_tries=2, scenario_duration_s=0.05,
                              scenario_queries=20)
    tries = CaseRunner().run(case(1), cfg).scenarios
    assert [t.search_step for t in tries] == [1, 2] and tries[0].target_qps > tries[1].target_qps > 0
    bounds = {t.target_latency_ms for t in tries}
    # at least 10 x the calibrated call, or 5 x the single-stream p99 where that is more (a busy machine)
    assert len(bounds) == 1 and 10 * DELAY_MS <= bounds.pop()
    bases = {t.target_latency_basis for t in tries}
    assert len(bases) == 1 and ("median call" in tries[0].target_latency_basis
                                or "single-stream p99" in tries[0].target_latency_basis)
    assert all(t.result == "INVALID" and t.checks["early_stopping"] is False for t in tries)  # 20 < 459 queries


def test_the_csv_carries_each_scenarios_figure_and_verdict():
    from harness.report.tables import case_row
    from harness.results.schema import CaseId, CaseResult, ScenarioRun

    runs = [ScenarioRun("single-stream", "VALID", latency_ms={"p90": 2.5}),
            ScenarioRun("offline", "VALID", samples_per_s=480.0),
            ScenarioRun("server", "VALID", target_qps=200.0, search_step=1),
            ScenarioRun("server", "INVALID", target_qps=400.0, search_step=2),
            ScenarioRun("server", "VALID", target_qps=300.0, search_step=3)]
    r = CaseResult(CaseId("m", "fake-ok", "fp32", 1, None, "cpu"), "passed", scenarios=runs)
    row = case_row(r)
    assert (row["single_stream_p90_ms"], row["single_stream_result"]) == (2.5, "VALID")
    assert (row["offline_sps"], row["server_qps"], row["server_result"]) == (480.0, 300.0, "VALID")
    assert row["multi_stream_p99_ms"] is None and row["multi_stream_result"] is None


class _PacedSut(RuntimeSut):
    """RuntimeSut with a known call pace and a canned single-stream test (no LoadGen)."""

    def __init__(self, pace_ms: float, single_p99_ms: float | None, loop: list[ScenarioRun] | None = None) -> None:
        super().__init__(lambda: None, lambda: None, batch=1)
        self.call_ns = [int(pace_ms * 1e6)] * 5
        self.single_p99_ms, self.tests = single_p99_ms, []
        self.loop = list(loop) if loop is not None else None  # the issuing loop's no-op tests, in order
        self.loop_rates: list[float] = []

    def test(self, scenario, config, p50_s, log_dir, qps=None, probe=None):
        self.tests.append(scenario)
        lat = {"p99": self.single_p99_ms} if self.single_p99_ms else {}
        return ScenarioRun(scenario, "VALID", latency_ms=lat)

    def issuing_loop(self, config, qps):
        self.loop_rates.append(qps)
        if self.loop is None:
            return ScenarioRun("server", "INVALID", latency_ms={"p99": LOOP_P99_MS})
        return self.loop.pop(0)


LOOP_P99_MS = 0.25  # the canned no-op Server test's p99


def test_the_default_server_bound_comes_from_the_single_stream_p99_and_says_so(config):
    """A sub-millisecond call (0.05 ms) under a noisy machine (single-stream p99 4 ms): 10 x the call would be a
    0.5 ms bound that no try can meet; 5 x the single-stream p99 is 20 ms. Without a single-stream record the
    SUT runs one for the bound (unrecorded); --server-latency wins and is named."""
    sut = _PacedSut(pace_ms=0.05, single_p99_ms=4.0)
    sut.server_bound(config, 5e-5, None, 3408.0)
    assert sut.tests == ["single-stream"] and sut.default_bound_ms == pytest.approx(20.0 + LOOP_P99_MS)
    assert sut.bound_basis == ("5 x the single-stream p99 of 4 ms + the issuing loop's p99 at 3408 QPS of 0.25 ms (the "
                               "lower of 2 no-op Server tests through the same path)")
    assert sut.loop_rates == [3408.0, 3408.0] and sut.loop_p99_ms == LOOP_P99_MS
    given = ScenarioRun("single-stream", "VALID", latency_ms={"p99": 1.0})
    sut = _PacedSut(pace_ms=0.05, single_p99_ms=None)
    sut.server_bound(config, 5e-5, given, 20.0)  # a slow rate: the no-op test runs at 459 queries / 0.25 s
    assert sut.tests == [] and sut.default_bound_ms == pytest.approx(5.0 + LOOP_P99_MS)
    assert sut.loop_rates == [1836.0] * 2 and "at 1836 QPS" in sut.bound_basis
    sut = _PacedSut(pace_ms=2.0, single_p99_ms=None)  # no p99 at all: the calls' bound
    sut.server_bound(config, 2e-3, None, 10.0)
    assert sut.default_bound_ms == pytest.approx(20.0 + LOOP_P99_MS)
    assert sut.bound_basis.startswith("10 x the median call of 2 ms + the issuing loop's p99 at 1836 QPS of 0.25 ms")
    sut = _PacedSut(pace_ms=0.05, single_p99_ms=4.0)
    sut.server_bound(config.replace(server_latency_ms=3.0), 5e-5, None)
    assert sut.tests == [] and sut.loop_rates == [] and sut.bound_basis == "--server-latency"
    settings = sut.settings("server", config.replace(server_latency_ms=3.0), 5e-5, 100.0)
    assert settings.server_target_latency_ns == 3_000_000


def test_a_server_qps_loadgen_cannot_schedule_is_refused_before_the_run(tmp_path):
    """1e12 QPS ended in LoadGen's std::bad_alloc while the run said "1 passed": now one line, before any case."""
    from harness.options import parse_run_options

    raw = {"models": "mlp", "runtimes": "ort-cpu", "out": str(tmp_path / "o"), "scenarios": "server"}
    assert parse_run_options({**raw, "server_qps": "5000"}).loadgen.server_qps == 5000
    with pytest.raises(UsageError, match=r"--server-qps 1e\+12 x --scenario-duration 1 s .* 1e\+07"):
        parse_run_options({**raw, "server_qps": "1e12"})
    with pytest.raises(UsageError, match="lower either"):
        parse_run_options({**raw, "server_qps": "1e5", "scenario_duration": "600"})


def test_scenario_verdicts_reach_the_terminal():
    from harness.report.terminal import scenario_lines

    runs = [ScenarioRun("single-stream", "VALID", latency_ms={"p90": 1.62}),
            ScenarioRun("server", "INVALID", target_qps=800.0, target_latency_ms=7.5, search_step=1,
                        latency_ms={"p99": 30.0}, reasons=["99.00 percentile latency (ns) : 30000000"],
                        target_latency_basis="5 x the single-stream p99 of 1.5 ms"),
            ScenarioRun("server", "VALID", target_qps=400.0, target_latency_ms=7.5, search_step=2,
                        latency_ms={"p99": 6.96}, target_latency_basis="5 x the single-stream p99 of 1.5 ms")]
    from harness.results.schema import CaseResult

    run = RunResults(run_id="r", started_at="", finished_at="", complete=True, environment=RunEnvironmentRecord(), config={},
                     cases=[CaseResult(case(1), "passed", scenarios=runs)])
    (line,) = scenario_lines(run)
    assert line == ("fake-linear-fake-2ms-fp32-b1: LoadGen single-stream VALID p90 1.62 ms; server VALID 400 QPS, "
                    "p99 6.96 ms under a 7.5 ms bound (5 x the single-stream p99 of 1.5 ms); 1 of 2 tries VALID")


class _ContendedSut(_PacedSut):
    """Its single-stream tests are contended (True) or quiet (False) in the order given."""

    def __init__(self, contended: list[bool], p99s: list[float]) -> None:
        super().__init__(pace_ms=0.05, single_p99_ms=None)
        self.contended, self.p99s = list(contended), list(p99s)

    def test(self, scenario, config, p50_s, log_dir, qps=None, probe=None):
        self.tests.append(scenario)
        busy = self.contended.pop(0)
        return ScenarioRun(scenario, "VALID", latency_ms={"p99": self.p99s.pop(0)}, contended=busy,
                           contention_cause="1 thread(s): waited 40% for a CPU" if busy else None)


@pytest.mark.parametrize("given_busy, later, bound", [
    (True, [False], 5.0),            # the recorded test was contended: an unrecorded quiet one sets the bound
    (True, [True, False], 5.0),      # two contended, the third quiet
    (False, [], 20.0),               # the recorded one was quiet: used as it is
    (None, [False], 5.0),            # no recorded single-stream test: one is run
])
def test_the_default_server_bound_comes_from_an_uncontended_single_stream_figure(given_busy, later, bound, config):
    given = None if given_busy is None else ScenarioRun("single-stream", "VALID", latency_ms={"p99": 4.0},
                                                           contended=given_busy)
    sut = _ContendedSut(later, [1.0] * len(later))
    sut.server_bound(config, 5e-5, given, 2000.0)
    assert sut.default_bound_ms == pytest.approx(bound + LOOP_P99_MS) and sut.bound_unusable is None
    assert len(sut.tests) == len(later)


def test_only_contended_single_stream_figures_make_the_default_bound_unusable(config):
    """The recorded test and every re-run contended: no bound is taken from them; the Server tests are one skipped
    record that says why and what to give (the issue's 0 of 4 VALID under a bound from a contended run)."""
    from harness.workloads.forward import scenarios

    given = ScenarioRun("single-stream", "VALID", latency_ms={"p99": 0.0872}, contended=True,
                        contention_cause="1 thread(s): waited 40% for a CPU")
    sut = _ContendedSut([True] * scenarios.SERVER_BOUND_RETRIES, [0.09] * scenarios.SERVER_BOUND_RETRIES)
    sut.server_bound(config, 5e-5, given)
    assert sut.default_bound_ms is None and len(sut.tests) == scenarios.SERVER_BOUND_RETRIES
    assert sut.bound_unusable.startswith("no default Server latency bound: the 3 single-stream test(s) it would come "
                                         "from were all contended (1 thread(s): waited 40% for a CPU)")
    assert "--server-latency MS" in sut.bound_unusable
    sut = _ContendedSut([True] * 3, [0.09] * 3)  # --server-latency needs no figure
    sut.server_bound(config.replace(server_latency_ms=3.0), 5e-5, given)
    assert sut.bound_unusable is None and sut.tests == []


def test_the_issuing_loops_own_p99_is_measured_uncontended_or_the_bound_is_unusable(config):
    """The default bound adds the p99 the harness's own loop gives a call that does nothing (the issue: mlp's Server
    tests were never VALID under 5 x its single-stream p99, which leaves that loop out). Its figure comes from an
    uncontended no-op test as the single-stream one does; one that cannot run leaves the bound without it, said."""
    from harness.workloads.forward import scenarios

    busy = ScenarioRun("server", "INVALID", latency_ms={"p99": 9.0}, contended=True,
                       contention_cause="1 thread(s): waited 40% for a CPU")
    quiet = ScenarioRun("server", "INVALID", latency_ms={"p99": 0.4})
    spike = ScenarioRun("server", "INVALID", latency_ms={"p99": 17.7})  # not flagged, and yet: the lower is taken
    sut = _PacedSut(pace_ms=0.05, single_p99_ms=1.0, loop=[busy, spike, quiet])
    sut.server_bound(config, 5e-5, None, 2000.0)
    assert sut.default_bound_ms == pytest.approx(5.0 + 0.4) and sut.loop_rates == [2000.0] * 3
    sut = _PacedSut(pace_ms=0.05, single_p99_ms=1.0, loop=[busy] * (scenarios.SERVER_BOUND_RETRIES + 1))
    sut.server_bound(config, 5e-5, None, 2000.0)
    assert sut.default_bound_ms is None and sut.bound_unusable.startswith(
        "no default Server latency bound: the 3 no-op Server test(s) at 2000 QPS that measure the issuing loop's own "
        "p99 were all contended (1 thread(s): waited 40% for a CPU)")
    failed = ScenarioRun("server", "error", error="RuntimeError: no LoadGen")
    sut = _PacedSut(pace_ms=0.05, single_p99_ms=1.0, loop=[quiet, failed])
    sut.server_bound(config, 5e-5, None, 2000.0)
    assert sut.default_bound_ms == pytest.approx(5.0)
    assert sut.bound_basis.endswith("; the issuing loop's p99 not included (its no-op Server test: RuntimeError: no "
                                    "LoadGen)")


class _LoopSearchSut(_PacedSut):
    """A Server search on fakes: the no-op loop's p99 (and completed samples/s) per rate as given; each try's p99 is
    the loop's at its rate plus `extra_ms`, VALID when under the try's bound, as LoadGen would judge it. `short`:
    a test of --scenario-duration has its p99 under the bound but too few queries (early stopping), a longer one
    not."""

    def __init__(self, loop_p99: dict[float, float], extra_ms: float | dict[float, float],
                 done: dict[float, float] | None = None,
                 short: bool = False) -> None:
        super().__init__(pace_ms=0.02, single_p99_ms=0.06)  # base bound 5 x 0.06 = 0.3 ms (over 10 x 0.02)
        self.loop_p99, self.extra_ms, self.done, self.short = loop_p99, extra_ms, done or {}, short
        self.server: list[tuple[float, float, float | None]] = []  # (qps, its bound, its duration)

    def issuing_loop(self, config, qps):
        self.loop_rates.append(qps)
        return ScenarioRun("server", "INVALID", latency_ms={"p99": self.loop_p99[qps]}, target_qps=qps,
                           samples_per_s=self.done.get(qps, qps))

    def test(self, scenario, config, p50_s, log_dir, qps=None, probe=None, duration_s=None):
        if scenario != "server":
            return super().test(scenario, config, p50_s, log_dir, qps, probe)
        self.server.append((qps, self.default_bound_ms, duration_s))
        p99 = self.loop_p99[qps] + (self.extra_ms[qps] if isinstance(self.extra_ms, dict) else self.extra_ms)
        met = p99 <= self.default_bound_ms
        early = not (self.short and duration_s is None)
        return ScenarioRun("server", "VALID" if met and early else "INVALID", target_qps=qps,
                           latency_ms={"p99": p99}, target_latency_ms=self.default_bound_ms,
                           target_latency_basis=self.bound_basis,
                           checks={"min_duration": True, "min_queries": True, "early_stopping": early,
                                   "performance_constraints": met})


def test_each_server_try_is_judged_with_the_issuing_loops_p99_at_its_own_rate(config):
    """The issue's quiet runs: the loop measured once at the search's first rate (0.17 ms) was not its p99 at the
    lower rates where the search ends, so tries there were INVALID by a hair. Now each try adds the loop's p99 at
    its own rate (measured once per rate); the base stays 5 x the single-stream p99."""
    # the model adds 0.4 ms to the loop's p99 at 2000 QPS (its queue), 0.25 ms below
    sut = _LoopSearchSut({2000.0: 0.17, 1000.0: 0.3, 1500.0: 0.25}, extra_ms={2000.0: 0.4, 1000.0: 0.25, 1500.0: 0.25})
    cfg = config.replace(server_tries=3, scenario_duration_s=1.0)  # the loop's lowest rate: 459 QPS
    sut.server_bound(cfg, 5e-5, None, 2000.0)
    tries = server_search(sut, cfg, p50_s=5e-5, offline_sps=4000.0, logs=None)
    assert [t.target_qps for t in tries] == [2000.0, 1000.0, 1500.0]
    assert [b for _, b, _ in sut.server] == pytest.approx([0.3 + 0.17, 0.3 + 0.3, 0.3 + 0.25])
    # 0.57 > 0.47; at 1000 QPS 0.55 ms: INVALID under the first rate's 0.47 ms bound, VALID under its own 0.6 ms
    assert [t.result for t in tries] == ["INVALID", "VALID", "VALID"]
    assert sut.loop_rates == [2000.0] * 2 + [1000.0] * 2 + [1500.0] * 2  # the first rate's loop is not re-measured
    assert [t.loop_p99_ms for t in tries] == [0.17, 0.3, 0.25]  # stored with each try
    assert tries[2].target_latency_basis == ("5 x the single-stream p99 of 0.06 ms + the issuing loop's p99 at 1500 QPS "
                                             "of 0.25 ms (the lower of 2 no-op Server tests through the same path)")


def test_a_rate_the_issuing_loop_cannot_keep_up_with_adds_nothing_to_the_bound(config):
    """Past what the harness's own loop serves, its p99 is a growing queue: added, it would call a saturated model
    VALID. Such a rate is judged on the base alone, and the basis says why."""
    sut = _LoopSearchSut({8000.0: 40.0}, extra_ms=0.5, done={8000.0: 6100.0})
    sut.server_bound(config, 5e-5, None, 8000.0)
    assert sut.default_bound_ms == pytest.approx(0.3) and sut.loop_p99_ms is None
    assert sut.bound_basis == ("5 x the single-stream p99 of 0.06 ms; the issuing loop's p99 not included: at 8000 QPS "
                               "its no-op Server test completed 6100 samples/s, so the rate is past what the harness's "
                               "own loop serves")
    sut.done[8000.0] = 7300.0  # within LOOP_KEEPS_UP of the rate: it kept up
    sut._loops.clear()
    sut.bound_at(config, 8000.0)
    assert sut.default_bound_ms == pytest.approx(40.3) and sut.loop_p99_ms == 40.0


def test_a_try_short_only_of_early_stopping_is_run_again_longer(config):
    """A 1 s try whose p99 met the bound but gave LoadGen's early stopping too few queries is run once more,
    EARLY_STOPPING_RETRY x --scenario-duration long; both tests are kept under the try's number and the longer
    one's verdict steers the search. A try over the bound is not re-run; nor are fixed --server-qps tests or
    tests made short on purpose with --scenario-queries."""
    from harness.workloads.forward import scenarios

    # the first try is over its bound (0.7 > 0.5 ms): no re-run
    sut = _LoopSearchSut({1000.0: 0.2, 2000.0: 0.2, 1500.0: 0.2}, extra_ms={2000.0: 0.5, 1000.0: 0.05, 1500.0: 0.05},
                         short=True)
    cfg = config.replace(server_tries=2, scenario_duration_s=1.0)
    sut.server_bound(cfg, 5e-5, None)
    tries = server_search(sut, cfg, p50_s=5e-5, offline_sps=4000.0, logs=None)
    assert [(t.search_step, t.result) for t in tries] == [(1, "INVALID"), (2, "INVALID"), (2, "VALID")]
    assert [d for _, _, d in sut.server] == [None, None, scenarios.EARLY_STOPPING_RETRY * 1.0]
    assert peak_server(tries).target_qps == 1000.0
    sut.server.clear()
    assert len(server_search(sut, cfg.replace(server_qps=1500.0), 5e-5, 4000.0, None)) == 1
    tries = server_search(sut, cfg.replace(scenario_queries=100), 5e-5, 4000.0, None)
    assert [t.search_step for t in tries] == [1, 2] and all(d is None for _, _, d in sut.server)


def test_a_later_try_whose_issuing_loop_was_all_contended_ends_the_search_skipped(config):
    """The loop is measured at each try's rate; where every test of it was contended that try is one skipped record
    naming --server-latency, and the search stops (no try judged against a bound from an inflated figure)."""
    from harness.workloads.forward import scenarios

    busy = ScenarioRun("server", "INVALID", latency_ms={"p99": 9.0}, contended=True,
                       contention_cause="1 thread(s): waited 40% for a CPU")
    quiet = ScenarioRun("server", "INVALID", latency_ms={"p99": 0.2}, samples_per_s=2000.0)
    sut = _PacedSut(pace_ms=0.05, single_p99_ms=0.06, loop=[quiet, quiet] + [busy] * (scenarios.SERVER_BOUND_RETRIES + 1))
    sut.test = lambda scenario, config, p50_s, log_dir, qps=None, probe=None, duration_s=None: ScenarioRun(
        scenario, "INVALID", target_qps=qps, latency_ms={"p99": 0.6}, checks={"performance_constraints": False})
    cfg = config.replace(server_tries=3, scenario_duration_s=1.0)
    sut.server_bound(cfg, 5e-5, None, 2000.0)
    tries = server_search(sut, cfg, p50_s=5e-5, offline_sps=4000.0, logs=None)
    assert [(t.search_step, t.result) for t in tries] == [(1, "INVALID"), (2, "skipped")]
    assert tries[1].target_qps == 1000.0 and "--server-latency MS" in tries[1].error
    assert "no-op Server test(s) at 1000 QPS" in tries[1].error


def test_the_issuing_loop_runs_a_no_op_call_through_the_server_path(config):
    """The real no-op test: LoadGen's Server scenario through the SUT's queue and serving thread with a call that
    does nothing gives a latency figure (its p99 is what the bound adds), never calling the case's runtime."""
    pytest.importorskip("mlperf_loadgen")
    called: list[int] = []
    sut = RuntimeSut(lambda: called.append(1), lambda: None, batch=1)
    r = sut.issuing_loop(config.replace(scenario_duration_s=0.1), 2000.0)
    assert r.scenario == "server" and r.latency_ms.get("p99") is not None and r.latency_ms["p99"] > 0
    assert r.contended is not None and called == [] and r.target_qps == pytest.approx(2000.0)


def test_loadgens_scratch_folder_is_under_the_run_folder_and_the_session_removes_it(config, tmp_path, monkeypatch):
    """An interrupted LoadGen scenario left LoadGen's temporary folder in $TMPDIR (its worker was stopped before
    its own clean-up). The folder is now made under the run folder's scratch space, which the session removes
    when it finishes, interrupted or not."""
    import tempfile

    from harness.execution.session import HarnessSession
    from harness.workloads.forward import scenarios

    made: list[str] = []
    real = tempfile.mkdtemp
    monkeypatch.setattr(scenarios.tempfile, "mkdtemp",
                        lambda **kw: made.append(kw.get("dir")) or real(**kw))
    # a Server test's bound comes from an unrecorded single-stream test: LoadGen's logs go to a temporary folder
    cfg = config.replace(scenarios=("server",), server_qps=50.0, server_tries=1)
    assert cfg.outputs.scratch_dir == tmp_path / "out" / ".scratch"
    r = CaseRunner().run(case(1), cfg)
    assert r.scenarios and made and all(Path(d) == cfg.outputs.scratch_dir for d in made), made
    left = cfg.outputs.scratch_dir / "harness-loadgen-killed"  # what a stopped worker leaves behind
    left.mkdir(parents=True)
    session = HarnessSession(cfg.replace(isolation=False))
    session.start()
    session.finish(interrupted=True)
    assert not cfg.outputs.scratch_dir.exists()


@pytest.mark.parametrize("others_cores, contended", [(0.0, False), (1.5, True)])
def test_a_server_tests_own_threads_waiting_is_not_a_neighbour(config, monkeypatch, others_cores, contended):
    """Quiet (PSI 0-7%), every no-op loop test read `contended`: LoadGen's issue thread and the serving thread
    outnumber a 2-core machine's cores and wait for each other ("2.0 core(s) free: the worker's threads waited
    42%"). A Server test's threads sleep between arrivals, as recommend's replays do: a wait while no other
    process used the machine is its own (`own_wait`), a wait beside a neighbour stays contended."""
    pytest.importorskip("mlperf_loadgen")
    import harness.workloads.forward.scenarios as scenarios

    class Probe:
        def __init__(self, *a, **k):
            pass

        def start(self):
            pass

        def stop(self):
            return BlockContention(contended=True, cause="run-queue wait", others_cores=others_cores, steal_fraction=0.0)

    monkeypatch.setattr(scenarios, "ContentionProbe", Probe)
    sut = RuntimeSut(lambda: None, lambda: None, batch=1)
    r = sut.issuing_loop(config.replace(scenario_duration_s=0.1), 2000.0)
    assert r.contended is contended


def test_the_server_tries_tool_shows_the_share_of_the_allowance_each_test_used(tmp_path):
    """tools/server_tries.py, what the default bound is judged on: (p99 - loop p99) / (bound - loop p99) per test,
    a try's longer re-run marked, and how many searches had a VALID try; a missing file is one line, exit 2."""
    import subprocess
    import sys

    from harness.results.schema import CaseResult
    from harness.results.store import write_results

    runs = [ScenarioRun("server", "INVALID", target_qps=3000.0, search_step=1, latency_ms={"p99": 0.7},
                        target_latency_ms=0.5, loop_p99_ms=0.2, reasons=["performance constraints not satisfied"]),
            ScenarioRun("server", "INVALID", target_qps=1500.0, search_step=2, latency_ms={"p99": 0.45},
                        target_latency_ms=0.55, loop_p99_ms=0.25, reasons=["early stopping not satisfied"]),
            ScenarioRun("server", "VALID", target_qps=1500.0, search_step=2, latency_ms={"p99": 0.4},
                        target_latency_ms=0.55, loop_p99_ms=0.25)]
    c = CaseResult(case(1), "passed", samples_ns=[1000, 1100, 1200], scenarios=runs)
    write_results(RunResults(run_id="r", started_at="t", environment=RunEnvironmentRecord(), config={}, cases=[c]), tmp_path)
    tool = Path(__file__).resolve().parents[2] / "tools" / "server_tries.py"
    done = subprocess.run([sys.executable, str(tool), str(tmp_path / "results.json")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    out = done.stdout.splitlines()
    assert out[0].endswith("try 1: 3000 QPS INVALID p99 0.7 ms, bound 0.5 ms, loop p99 0.2 ms, used 1.67 "
                           "(performance constraints not satisfied)")
    assert out[1].endswith("try 2: 1500 QPS INVALID p99 0.45 ms, bound 0.55 ms, loop p99 0.25 ms, used 0.67 "
                           "(early stopping not satisfied)")
    assert "try 2+: 1500 QPS VALID" in out[2] and out[2].endswith("used 0.50")
    assert out[3].endswith(": 1 of 1 Server search(es) VALID")
    done = subprocess.run([sys.executable, str(tool), str(tmp_path / "none.json")], capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.startswith("server_tries: ") and "Traceback" not in done.stderr
