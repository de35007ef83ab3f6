"""MLPerf LoadGen scenarios on a case's activated runtime (--scenarios): LoadGen drives, the runtime is the SUT.
See docs/scenarios.md."""

from __future__ import annotations

import json
import math
import queue
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.config import RunConfig
from harness.measure.contention import ContentionProbe, own_wait
from harness.model import ModelSpec
from harness.results.schema import CaseId, ScenarioRun
from harness.workloads.forward.batcher import STOP, Batcher, batch_feeds, batch_refusal

# LoadGen's names of the scenarios
LOADGEN_SCENARIO = {"single-stream": "SingleStream", "multi-stream": "MultiStream", "server": "Server",
                    "offline": "Offline"}
# The fewest queries with which LoadGen 6.0's early stopping can accept a run (none over the latency bound);
# measured from its "Need to process at least N queries" lines. Offline issues one query of many samples.
EARLY_STOPPING_QUERIES = {"single-stream": 64, "multi-stream": 662, "server": 459, "offline": 1}
RUN_ORDER = ("single-stream", "multi-stream", "offline", "server")  # Offline first: the Server search starts there
MULTI_STREAM_SAMPLES = 8  # MLPerf's samples per MultiStream query
SERVER_LATENCY_FACTOR = 10.0  # default Server p99 bound: at least this many calls at the pace calibrated before the tests
# ... and at least this many times the p99 of a single-stream test: the same path (LoadGen -> the SUT's queue ->
# the call) with no queueing. 10 calls alone was 0.08-0.44 ms for a sub-millisecond model, under the SUT's own
# hand-off and the machine's jitter: every try INVALID.
SERVER_SINGLE_STREAM_FACTOR = 5.0
# ... plus the p99 of the harness's own issuing loop at the rate being tried, measured before each Server try: a
# Server test through the same path (LoadGen's issue callback, the queue, the serving thread, the completion) with
# a call that does nothing, at that try's rate. A single-stream test never queues, so its p99 leaves out what
# Poisson arrivals cost that loop: mlp (0.05 ms calls) had 0 of 4 tries VALID under 5 x its single-stream p99 even
# quiet. Measured once at the search's first rate only, the loop's p99 was not the one at the lower rates where
# the search ends (1 of 3 quiet runs VALID). The no-op test runs at no less than its min queries per
# --scenario-duration (loop_floor: 459 QPS at the defaults), so that it lasts about that long whatever the model
# (459 queries at a slow model's 25 QPS would take 18 s).
# the no-op loop kept up with a rate when it completed at least this share of it (LoadGen's completed samples/s);
# below, the rate is past what the harness's own loop serves, and its p99 (a growing queue) is not added: a bound
# widened by a saturated loop would call a saturated model VALID
LOOP_KEEPS_UP = 0.9
# a Server try INVALID only for early stopping (its p99 under the bound, too few queries for LoadGen to be sure of
# it) is run once more at the same rate for this many times --scenario-duration: a 1 s test at 3,000 QPS leaves
# LoadGen's early stopping short whenever a few queries pass the bound
EARLY_STOPPING_RETRY = 4.0
# a Server search with no VALID try after --server-tries goes on halving its rate up to this many more tries, until
# one is VALID: from the Offline throughput (47,600 samples/s for mlp, whose Server path saturated at 6,000-7,200
# loaded) four tries reach capacity / 16 only, and the search ended with no answer where the first VALID rate was
# lower
SERVER_EXTRA_TRIES = 3
# no-op tests of the loop, the lowest p99 taken: the loop's own cost is what the quietest test shows, and one spike
# of the machine (measured here under other jobs: 4-17 ms p99 beside quiet tests' 0.2-0.3 ms, not all of them
# flagged contended) would otherwise widen the bound of every try of the case
LOOP_TESTS = 2
# single-stream tests run again (unrecorded) for the bound when the one at hand was contended, before the default
# bound is called unusable
SERVER_BOUND_RETRIES = 2
# what LoadGen's detail log calls its checks
_CHECKS = {"result_min_duration_met": "min_duration", "result_min_queries_met": "min_queries",
           "early_stopping_met": "early_stopping", "result_perf_constraints_met": "performance_constraints"}
_CHECK_WORDS = {"min_duration": "min duration not satisfied", "min_queries": "min queries not satisfied",
                "early_stopping": "early stopping not satisfied",
                "performance_constraints": "performance constraints not satisfied"}
_PCTS = (("50.00", "p50"), ("90.00", "p90"), ("95.00", "p95"), ("97.00", "p97"), ("99.00", "p99"),
         ("99.90", "p99.9"))

Phase = Callable[[str], None]
BATCHED = ("server", "offline")  # the scenarios --batcher serves


def run_scenarios(runtime: Any, feed: dict[str, Any], case: CaseId, config: RunConfig, timed_p50_ms: float,
                  on_phase: Phase = lambda phase: None, spec: ModelSpec | None = None) -> list[ScenarioRun]:
    """Every scenario the run asks for (config.loadgen.scenarios; none: []) on `runtime`, already activated and warm,
    with `feed` (the case's batch) as the query sample library. A scenario that fails is a record with
    result "error", never the case's failure. Offline runs before Server, whose search starts from it.
    --batcher: Server and Offline go through the dynamic batcher, its feeds of batch 1..max cut from `feed`
    along `spec`'s batch axis (a model that cannot batch: those tests are skipped with the reason)."""
    wanted = tuple(config.loadgen.scenarios)
    if not wanted:
        return []
    on_phase("scenarios")
    order = sorted(wanted, key=RUN_ORDER.index)
    p50_s = max(timed_p50_ms, 1e-3) / 1e3
    # the tests get half the case's time limit, so that a slow model's scenarios never cost its measured row
    budget_s = 0.5 * float(config.process.case_timeout_s)
    try:
        sut = RuntimeSut(runtime.bind(feed), runtime.synchronize, case.batch,
                         deadline=time.perf_counter() + budget_s)
        policy = config.loadgen.batcher
        if policy is not None and any(name in BATCHED for name in order):
            refused = "--batcher: the case's model is unknown here" if spec is None else batch_refusal(spec, runtime)
            if refused:
                sut.batcher_refusal = refused
            else:
                assert spec is not None
                calls = [runtime.bind(f) for f in batch_feeds(spec, feed, policy.max_batch)]
                sut.batcher = Batcher(policy, calls, runtime.synchronize, _complete)
    except Exception as exc:  # noqa: BLE001 - a scenario's failure is its record, never the case's
        return [ScenarioRun(name, "error", error=f"binding the feed: {type(exc).__name__}: {exc}") for name in order]
    logs = _log_root(config, case)
    out: list[ScenarioRun] = []
    try:
        sut.calibrate()
    except Exception as exc:  # noqa: BLE001
        return [ScenarioRun(name, "error", error=f"timing calls before the tests: {type(exc).__name__}: {exc}")
                for name in order]
    for name in order:
        if name != "server":
            out.append(sut.test(name, config, p50_s, logs / name if logs else None))
            continue
        offline = next((r for r in out if r.scenario == "offline" and r.samples_per_s), None)
        single = next((r for r in out if r.scenario == "single-stream"), None)
        sut.server_bound(config, p50_s, single,
                         first_rate(sut, config, p50_s, offline.samples_per_s if offline else None))
        if sut.bound_unusable:
            out.append(ScenarioRun("server", "skipped", error=sut.bound_unusable,
                                   target_latency_basis=sut.bound_basis))
            continue
        out += server_search(sut, config, p50_s, offline.samples_per_s if offline else None, logs)
    return out


def server_search(sut: RuntimeSut, config: RunConfig, p50_s: float, offline_sps: float | None,
                  logs: Path | None) -> list[ScenarioRun]:
    """--server-qps: one Server try at that rate. Otherwise a bisection of (0, capacity] over
    config.loadgen.server_tries tries, capacity being the Offline samples/s (else batch / call time): each try's
    VALID raises the floor, INVALID lowers the ceiling; with no VALID try by then, up to SERVER_EXTRA_TRIES more
    halve the rate until one is (not when --scenario-queries made the tests short on purpose). Every test is
    kept, numbered by search_step (a try's longer re-run for early stopping has its number: server_try)."""
    fixed = config.loadgen.server_qps
    if fixed:
        return server_try(sut, config, p50_s, float(fixed), logs / "server" if logs else None, None, retry=False)
    lo, hi = 0.0, _capacity(sut, p50_s, offline_sps)
    tries: list[ScenarioRun] = []
    planned = max(1, int(config.loadgen.server_tries))
    extra = 0 if _short_on_purpose(config) else SERVER_EXTRA_TRIES
    for step in range(1, planned + extra + 1):
        if step > planned and lo > 0:  # the extra tries only look for a first VALID rate
            break
        qps = _round(hi / 2 if step == 1 else (lo + hi) / 2)
        runs = server_try(sut, config, p50_s, qps, logs / f"server-try{step}" if logs else None, step)
        tries += runs
        r = runs[-1]
        if r.result in ("error", "skipped"):
            break
        lo, hi = (qps, hi) if r.valid else (lo, qps)
    return tries


def server_try(sut: RuntimeSut, config: RunConfig, p50_s: float, qps: float, log_dir: Path | None,
               step: int | None, retry: bool = True) -> list[ScenarioRun]:
    """One Server try at `qps`: under the default bound, the issuing loop measured at this rate first (the try's
    bound). With `retry` (a search's try) a test INVALID only for early stopping is run once more,
    EARLY_STOPPING_RETRY x --scenario-duration long, and both tests are kept (the longer one's verdict is the
    try's), unless --scenario-queries asked for fewer queries than early stopping needs (quick tests, INVALID by
    choice). A loop whose figures were all contended makes the try one skipped record saying so."""
    sut.bound_at(config, qps)
    if sut.bound_unusable:
        return [ScenarioRun("server", "skipped", error=sut.bound_unusable, target_qps=qps, search_step=step,
                            target_latency_basis=sut.bound_basis)]
    r = sut.test("server", config, p50_s, log_dir, qps=qps)
    r.search_step, r.loop_p99_ms = step, sut.loop_p99_ms
    if not retry or _short_on_purpose(config) or not _early_stopping_only(r):
        return [r]
    longer = sut.test("server", config, p50_s, log_dir.with_name(log_dir.name + "-longer") if log_dir else None,
                      qps=qps, duration_s=EARLY_STOPPING_RETRY * float(config.loadgen.scenario_duration_s))
    longer.search_step, longer.loop_p99_ms = step, sut.loop_p99_ms
    return [r, longer]


def loop_floor(config: RunConfig) -> float:
    """The lowest rate of the issuing loop's no-op test: its min queries (--scenario-queries, else 459) in
    --scenario-duration, so that it lasts about that long at a slow model's low rates too."""
    queries = int(config.loadgen.scenario_queries or EARLY_STOPPING_QUERIES["server"])
    return _round(queries / max(float(config.loadgen.scenario_duration_s), 1e-3))


def _short_on_purpose(config: RunConfig) -> bool:
    """--scenario-queries under what LoadGen's early stopping needs of a Server test: quick tests, INVALID by choice,
    that neither a longer re-run nor extra tries of a search would be asked for."""
    queries = config.loadgen.scenario_queries
    return bool(queries) and int(queries) < EARLY_STOPPING_QUERIES["server"]


def _early_stopping_only(r: ScenarioRun) -> bool:
    """An INVALID Server test whose only unmet check was LoadGen's early stopping (its p99 was under the bound)."""
    return (r.result == "INVALID" and r.checks.get("early_stopping") is False
            and r.checks.get("performance_constraints") is True
            and all(ok for name, ok in r.checks.items() if name != "early_stopping"))


def _capacity(sut: RuntimeSut, p50_s: float, offline_sps: float | None) -> float:
    """The Server search's ceiling: the Offline samples/s, else the samples of one call / its pace."""
    return offline_sps or sut.per_call("server") / sut.pace_for("server", p50_s)


def first_rate(sut: RuntimeSut, config: RunConfig, p50_s: float, offline_sps: float | None) -> float:
    """The rate of the first (the highest) Server test: --server-qps, else half the search's ceiling."""
    return float(config.loadgen.server_qps or _round(_capacity(sut, p50_s, offline_sps) / 2))


class RuntimeSut:
    """LoadGen's system under test over one bound runtime call: a LoadGen sample is one row of the case's
    batch. LoadGen runs in a helper thread; the samples it issues wait in a queue, and the thread that
    activated the runtime and ran its timed loop (so a GPU runtime's context and stream stay its own) takes
    up to `batch` of them per call of the case's feed (the same bound call as the timed loop: a batch that is
    not full is padded), synchronises the device, then tells LoadGen they are complete. Samples carry no
    output data (performance mode). With --batcher, the Server and Offline tests are served by a Batcher
    (harness.workloads.forward.batcher) on this same thread instead: one call per batch of its own size."""

    def __init__(self, call: Callable[[], object], synchronize: Callable[[], None], batch: int,
                 deadline: float = math.inf) -> None:
        self.call, self.synchronize, self.batch = call, synchronize, max(1, int(batch))
        self.deadline = deadline  # time.perf_counter() past which no test starts
        self.call_ns: list[int] = []  # how long each call took (with its synchronisation), in order
        self.default_bound_ms: float | None = None  # the Server p99 bound without --server-latency (server_bound)
        self.bound_basis: str | None = None  # what the Server bound came from, in words
        self.bound_unusable: str | None = None  # why no default bound could be taken (only contended figures)
        self.base_bound_ms: float | None = None  # the default bound before the issuing loop's p99 (server_bound)
        self.base_basis: str | None = None
        self.loop_p99_ms: float | None = None  # the issuing loop's own p99 in the latest try's bound (bound_at)
        self._loops: dict[float, ScenarioRun | str | None] = {}  # the issuing loop's test at each rate (bound_at)
        self.error: str | None = None
        self.batcher: Batcher | None = None  # --batcher: serves the Server and Offline tests
        self.batcher_refusal: str | None = None  # --batcher asked, and why this case cannot batch
        self.batched_ns: list[int] = []  # the batcher's full-batch calls timed before the tests (calibrate)
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._stop = STOP

    def issue(self, samples: Any) -> None:
        """LoadGen's issue_query (called on LoadGen's threads): queue the samples, with their arrival time, for
        the serving thread."""
        now = time.perf_counter_ns()
        for s in samples:
            self._queue.put((s, now))

    def batched(self, scenario: str) -> bool:
        """Whether this scenario's test goes through the dynamic batcher."""
        return self.batcher is not None and scenario in BATCHED

    def per_call(self, scenario: str) -> int:
        """The most samples one call of this scenario's test serves."""
        return self.batcher.policy.max_batch if self.batched(scenario) and self.batcher else self.batch

    def flush(self) -> None:
        pass

    def serve(self) -> None:
        """Serve queued samples on this thread until the test ends (the stop marker after LoadGen returns)."""
        import mlperf_loadgen as lg

        stop = False
        while not stop:
            first = self._queue.get()
            if first is self._stop:
                return
            chunk = [first[0]]
            while len(chunk) < self.batch:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is self._stop:  # not expected: LoadGen returns only when every sample completed
                    stop = True
                    break
                chunk.append(item[0])
            if self.error is None:
                try:
                    t = time.perf_counter_ns()
                    self.call()
                    self.synchronize()
                    self.call_ns.append(time.perf_counter_ns() - t)
                except Exception as exc:  # noqa: BLE001 - recorded; LoadGen still gets its completions
                    self.error = f"{type(exc).__name__}: {exc}"
            lg.QuerySamplesComplete([lg.QuerySampleResponse(s.id, 0, 0) for s in chunk])

    def run_loadgen(self, settings: Any, log: Any, batcher: Batcher | None = None) -> None:
        """One LoadGen test in a helper thread while this thread serves its samples (through `batcher` when
        given: this thread is its one dispatcher); LoadGen's own failure is raised here."""
        import mlperf_loadgen as lg

        failure: list[BaseException] = []

        def drive() -> None:
            sut = lg.ConstructSUT(self.issue, self.flush)
            qsl = lg.ConstructQSL(self.batch, self.batch, _noop, _noop)
            try:
                lg.StartTestWithLogSettings(sut, qsl, settings, log)
            except BaseException as exc:  # noqa: BLE001 - handed to the serving thread
                failure.append(exc)
            finally:
                lg.DestroyQSL(qsl)
                lg.DestroySUT(sut)
                self._queue.put(self._stop)

        driver = threading.Thread(target=drive, name="loadgen", daemon=True)
        driver.start()
        if batcher is not None:
            batcher.serve(self._queue)
        else:
            self.serve()
        driver.join()
        if failure:
            raise failure[0]

    def calibrate(self, calls: int = 5, min_s: float = 0.2) -> None:
        """A few calls (at least `calls` and `min_s`) to know the runtime's pace now, in this process's present
        load, before LoadGen is told what to expect (the timed loop may have run under other load)."""
        end = time.perf_counter() + min_s
        for i in range(1000):
            if i >= calls and time.perf_counter() >= end:
                break
            t = time.perf_counter_ns()
            self.call()
            self.synchronize()
            self.call_ns.append(time.perf_counter_ns() - t)
        if self.batcher is not None:  # the batcher's full call, for what LoadGen is told to expect of it
            full = self.batcher.calls[-1]
            for _ in range(calls):
                t = time.perf_counter_ns()
                full()
                self.synchronize()
                self.batched_ns.append(time.perf_counter_ns() - t)

    def server_bound(self, config: RunConfig, p50_s: float, single: ScenarioRun | None,
                     qps: float | None = None) -> None:
        """The base of the Server tests' p99 bound and what it came from (`bound_basis`, stored with each try):
        --server-latency, else SERVER_SINGLE_STREAM_FACTOR x the p99 of this case's single-stream test (run here,
        unrecorded, when --scenarios has none), at least SERVER_LATENCY_FACTOR x the calibrated call. Each try
        then adds the issuing loop's p99 at its own rate and the batcher's max wait (bound_at; here at `qps` when
        given). The single-stream figure comes from an uncontended test; when every try of it was contended
        the bound is unusable."""
        if config.loadgen.server_latency_ms:
            self.bound_basis = "--server-latency"
            return
        calls_ms = SERVER_LATENCY_FACTOR * self.pace_s(p50_s) * 1e3
        # the bound is a multiple of an uncontended single-stream p99: a figure the machine inflated (another
        # process on the worker's cores) would set a bound the quiet Server tests can never meet or always meet
        if single is not None and not single.latency_ms.get("p99"):
            single = None
        single, causes = _uncontended(lambda: self.test("single-stream", config, p50_s, None), single)
        if single.contended:
            self._unusable(f"the {len(causes)} single-stream test(s) it would come from were all contended "
                           f"({causes[-1] if causes else 'no figure'})", "every single-stream test was contended")
            return
        p99 = single.latency_ms.get("p99") or 0.0
        if SERVER_SINGLE_STREAM_FACTOR * p99 >= calls_ms:
            self.base_bound_ms = SERVER_SINGLE_STREAM_FACTOR * p99
            self.base_basis = f"{SERVER_SINGLE_STREAM_FACTOR:g} x the single-stream p99 of {p99:.3g} ms"
        else:
            self.base_bound_ms = calls_ms
            self.base_basis = f"{SERVER_LATENCY_FACTOR:g} x the median call of {calls_ms / SERVER_LATENCY_FACTOR:.3g} ms"
        self.default_bound_ms, self.bound_basis = self.base_bound_ms, self.base_basis
        if qps is not None:
            self.bound_at(config, qps)

    def bound_at(self, config: RunConfig, qps: float) -> None:
        """The default bound of a Server try at `qps`: the base (server_bound) plus the p99 the issuing loop itself
        gives a no-op call at that rate (the lowest of LOOP_TESTS issuing_loop tests, each uncontended or run again;
        measured once per rate), plus the batcher's max wait. A loop that did not keep up with the rate
        (LOOP_KEEPS_UP) adds nothing, and the basis says so. Nothing to do under --server-latency or before
        server_bound; every figure of the loop contended: the bound is unusable."""
        if config.loadgen.server_latency_ms or self.base_bound_ms is None or self.bound_unusable:
            return
        rate = max(float(qps), loop_floor(config))
        if rate not in self._loops:
            self._loops[rate] = self._measure_loop(config, rate)
        loop = self._loops[rate]
        if isinstance(loop, str):  # every no-op test at this rate was contended
            self._unusable(loop, "every no-op Server test of the issuing loop was contended")
            return
        bound, basis = self.base_bound_ms, self.base_basis
        self.loop_p99_ms = None
        p99 = loop.latency_ms.get("p99") if loop is not None else None
        done = loop.samples_per_s if loop is not None else None
        if loop is None or p99 is None:
            why = (loop.error or "; ".join(loop.reasons) or f"LoadGen gave {loop.result}") if loop else "no test"
            basis += f"; the issuing loop's p99 not included (its no-op Server test: {why})"
        elif done is not None and done < LOOP_KEEPS_UP * rate:
            basis += (f"; the issuing loop's p99 not included: at {rate:g} QPS its no-op Server test completed "
                      f"{done:.4g} samples/s, so the rate is past what the harness's own loop serves")
        else:
            self.loop_p99_ms = p99
            bound += p99
            basis += (f" + the issuing loop's p99 at {rate:g} QPS of {p99:.3g} ms (the lower of {LOOP_TESTS} no-op "
                      "Server tests through the same path)")
        if self.batcher is not None and self.batcher.policy.max_wait_ms:  # the wait the batcher adds by design
            bound += self.batcher.policy.max_wait_ms
            basis += f", plus the batcher's max wait of {self.batcher.policy.max_wait_ms:g} ms"
        self.default_bound_ms, self.bound_basis = bound, basis

    def _measure_loop(self, config: RunConfig, rate: float) -> ScenarioRun | str | None:
        """The no-op test of the issuing loop at `rate` with the lowest p99 of LOOP_TESTS uncontended ones; a test
        LoadGen could not run (no p99) is returned as it is; why, when every figure was contended; None: no test."""
        loops: list[ScenarioRun] = []
        for _ in range(LOOP_TESTS):
            loop, causes = _uncontended(lambda: self.issuing_loop(config, rate), None)
            if loop.contended:
                return (f"the {len(causes)} no-op Server test(s) at {rate:g} QPS that measure the issuing loop's own "
                        f"p99 were all contended ({causes[-1] if causes else 'no figure'})")
            if loop.latency_ms.get("p99") is None:  # LoadGen failed on a call that does nothing
                return loop
            loops.append(loop)
        return min(loops, key=lambda r: r.latency_ms["p99"]) if loops else None

    def _unusable(self, why: str, basis: str) -> None:
        self.default_bound_ms = None
        self.bound_basis = f"none: {basis}"
        self.bound_unusable = (f"no default Server latency bound: {why}, and a bound from an inflated p99 would "
                               "judge nothing; give --server-latency MS, or rerun on a quiet machine (--settle)")

    def issuing_loop(self, config: RunConfig, qps: float) -> ScenarioRun:
        """A Server test at `qps` through this SUT's serving path (LoadGen's issue callback, the queue, this
        thread, the completion) with a call that does nothing: the latency the harness's own loop gives a query
        at that rate, which every Server test of the case pays on top of its calls. Unrecorded; its logs go to a
        temporary folder; its contention is probed as a single-stream test's is."""
        noop = RuntimeSut(_nothing, _nothing, self.batch, deadline=self.deadline)
        noop.default_bound_ms = 1e3  # not judged: only its latency figures are read
        return noop.test("server", config, 1e-6, None, qps=qps, probe=True)

    def pace_for(self, scenario: str, fallback_s: float) -> float:
        """The pace of one call of this scenario's test: the batcher's full call where it serves the scenario."""
        if self.batched(scenario) and self.batched_ns:
            recent = sorted(self.batched_ns)
            return max(recent[len(recent) // 2] / 1e9, 1e-6)
        return self.pace_s(fallback_s)

    def pace_s(self, fallback_s: float) -> float:
        """The median of the latest calls, in seconds (`fallback_s` before any)."""
        recent = sorted(self.call_ns[-101:])
        return max(recent[len(recent) // 2] / 1e9, 1e-6) if recent else fallback_s

    def test(self, scenario: str, config: RunConfig, p50_s: float, log_dir: Path | None,
             qps: float | None = None, probe: bool | None = None, duration_s: float | None = None) -> ScenarioRun:
        """One LoadGen performance test; its verdict and figures as LoadGen's detail log gives them. `probe`:
        whether its contention is probed (default: single-stream tests only, where a Server bound comes from);
        `duration_s`: its min duration (default --scenario-duration)."""
        import mlperf_loadgen  # noqa: F401 - not installed: raised here, not a record (logged_test's failures are)

        t0 = time.perf_counter()
        skipped = self.skipped(scenario, config, p50_s, qps, duration_s, t0)
        if skipped is not None:
            return skipped
        # under the run folder's scratch space: a worker stopped mid-test (Ctrl-C, SIGTERM) cannot clean up, the
        # session removes the scratch space when it finishes
        scratch = config.outputs.scratch_dir
        scratch.mkdir(parents=True, exist_ok=True)
        tmp = None if log_dir else Path(tempfile.mkdtemp(prefix="harness-loadgen-", dir=scratch))
        where = log_dir or tmp
        assert where is not None
        record: ScenarioRun
        try:
            where.mkdir(parents=True, exist_ok=True)
            record = self.logged_test(scenario, config, p50_s, where, qps, probe, duration_s)
        except Exception as exc:  # noqa: BLE001 - a failed scenario is its record, never the case's failure
            record = ScenarioRun(scenario, "error", error=f"{type(exc).__name__}: {exc}",
                                 target_qps=qps if scenario == "server" else None)
        finally:
            for junk in ("mlperf_log_trace.json", "mlperf_log_accuracy.json"):
                (where / junk).unlink(missing_ok=True)
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
        if scenario == "server":
            record.target_latency_basis = self.bound_basis
        record.wall_s = round(time.perf_counter() - t0, 3)
        if log_dir is not None and config.outputs.out_dir:
            try:
                record.log_dir = str(log_dir.relative_to(Path(config.outputs.out_dir)))
            except ValueError:
                record.log_dir = str(log_dir)
        return record

    def skipped(self, scenario: str, config: RunConfig, p50_s: float, qps: float | None, duration_s: float | None,
                t0: float) -> ScenarioRun | None:
        """The skipped record of a test that is not run (a batched scenario the batcher refused, or one that
        would end past the case's budget when started at `t0`); None when it runs."""
        if self.batcher_refusal and scenario in BATCHED:
            return ScenarioRun(scenario, "skipped", target_qps=qps if scenario == "server" else None,
                               error=self.batcher_refusal)
        expected = self.expected_s(scenario, config, p50_s, qps, duration_s)
        if t0 + expected > self.deadline:
            return ScenarioRun(scenario, "skipped", target_qps=qps if scenario == "server" else None,
                               error=f"would take about {expected:.0f} s, past the case's budget for scenarios "
                                     f"(half of --case-timeout); lower --scenario-queries or raise --case-timeout")
        return None

    def logged_test(self, scenario: str, config: RunConfig, p50_s: float, where: Path, qps: float | None,
                    probe: bool | None, duration_s: float | None) -> ScenarioRun:
        """Run the test with LoadGen's logs in `where` (contention probed around it when asked) and read its
        record from the detail log, with the contention, the batcher's figures and the calls timed."""
        import mlperf_loadgen as lg

        settings = self.settings(scenario, config, p50_s, qps, duration_s)
        log = lg.LogSettings()
        log.log_output.outdir = str(where)
        log.log_output.copy_summary_to_stdout = False
        log.enable_trace = False
        self.error = None
        before = len(self.call_ns)
        batcher = self.batcher if self.batched(scenario) else None
        if batcher is not None:
            batcher.reset()
        watch = ContentionProbe(config.measure.threads, config.measure.contention_limit) \
            if (scenario == "single-stream" if probe is None else probe) else None
        if watch is not None:
            watch.start()
        self.run_loadgen(settings, log, batcher)
        contention = watch.stop() if watch is not None else None
        if scenario == "server":  # its threads sleep between arrivals and outnumber the cores (LoadGen's issue
            contention = own_wait(contention)  # thread, this serving thread): their own wait is not a neighbour
        if batcher is not None:  # its calls (of several sizes) stay out of call_ns, the case call's pace
            self.error = batcher.error
        record = parse_detail_log(where / "mlperf_log_detail.txt", scenario)
        if contention is not None:
            record.contended = bool(contention.contended)
            record.contention_cause = contention.cause
        if batcher is not None:
            record.batcher = batcher.figures()
        timed = sorted(batcher.call_ns if batcher is not None else self.call_ns[before:])
        if timed:
            record.calls = len(timed)
            record.call_p50_ms = round(timed[len(timed) // 2] / 1e6, 6)
            record.call_mean_ms = round(sum(timed) / len(timed) / 1e6, 6)
        if self.error:
            record.result, record.error = "error", f"the runtime raised during the test: {self.error}"
        return record

    def expected_s(self, scenario: str, config: RunConfig, p50_s: float, qps: float | None,
                   duration_s: float | None = None) -> float:
        """About how long a test takes: its min duration, or its min queries at the timed loop's pace."""
        duration = float(duration_s or config.loadgen.scenario_duration_s)
        queries = int(config.loadgen.scenario_queries or EARLY_STOPPING_QUERIES[scenario])
        pace = self.pace_s(p50_s)
        per_query = {"single-stream": pace, "multi-stream": math.ceil(MULTI_STREAM_SAMPLES / self.batch) * pace,
                     "offline": 0.0, "server": 1.0 / qps if qps else pace}[scenario]
        return max(duration * (1.1 if scenario == "offline" else 1.0), queries * per_query)

    def settings(self, scenario: str, config: RunConfig, p50_s: float, qps: float | None,
                 duration_s: float | None = None) -> Any:
        """LoadGen TestSettings: performance mode, the run's min duration and query count; expected latencies
        and throughput from the runtime's present pace (latencies halved and throughput doubled, so that
        LoadGen generates enough queries to fill the min duration); the Server p99 bound is
        --server-latency, else the one server_bound derived. `p50_s` (the timed loop's) stands in for the
        pace before any call was timed."""
        import mlperf_loadgen as lg

        s = lg.TestSettings()
        s.scenario = getattr(lg.TestScenario, LOADGEN_SCENARIO[scenario])
        s.mode = lg.TestMode.PerformanceOnly
        s.min_duration_ms = max(1, round(float(duration_s or config.loadgen.scenario_duration_s) * 1000))
        s.min_query_count = int(config.loadgen.scenario_queries or EARLY_STOPPING_QUERIES[scenario])
        calls_per_query = math.ceil(MULTI_STREAM_SAMPLES / self.batch)
        pace = self.pace_s(p50_s)
        s.single_stream_expected_latency_ns = max(1, int(pace * 0.5e9))
        s.multi_stream_expected_latency_ns = max(1, int(calls_per_query * pace * 0.5e9))
        s.multi_stream_samples_per_query = MULTI_STREAM_SAMPLES
        s.offline_expected_qps = 2.0 * self.per_call(scenario) / self.pace_for(scenario, p50_s)
        if qps is not None:
            s.server_target_qps = float(qps)
        bound_ms = (config.loadgen.server_latency_ms or self.default_bound_ms
                    or SERVER_LATENCY_FACTOR * pace * 1e3)
        s.server_target_latency_ns = max(1, int(bound_ms * 1e6))
        s.server_target_latency_percentile = 0.99
        return s



def _uncontended(run: Callable[[], ScenarioRun], given: ScenarioRun | None) -> tuple[ScenarioRun, list[str]]:
    """`given` (else `run()`) when not contended, else `run()` again up to SERVER_BOUND_RETRIES times; the last
    record and the contention causes of the contended ones."""
    causes: list[str] = []
    record = given if given is not None else run()
    while record.contended:
        causes.append(record.contention_cause or "contended")
        if len(causes) > SERVER_BOUND_RETRIES:
            break
        record = run()
    return record, causes


def _nothing() -> None:
    """The no-op call and synchronisation of the issuing loop's test (RuntimeSut.issuing_loop)."""


def _complete(samples: list[Any]) -> None:
    """Tell LoadGen these samples are done (performance mode: no output data)."""
    import mlperf_loadgen as lg

    lg.QuerySamplesComplete([lg.QuerySampleResponse(s.id, 0, 0) for s in samples])


def _noop(_samples: Any) -> None:
    """QSL load/unload: the samples are the rows of the case's feed, already in memory."""


def parse_detail_log(path: Path, scenario: str) -> ScenarioRun:
    """A ScenarioRun from LoadGen's mlperf_log_detail.txt (one `:::MLLOG {json}` record per line)."""
    d, errors = _mllog_values(path)
    validity = d.get("result_validity")
    if validity not in ("VALID", "INVALID"):
        return ScenarioRun(scenario, "error", error=f"{path.name}: LoadGen logged no result_validity"
                           + (f"; its errors: {'; '.join(errors)}" if errors else ""))
    checks = {name: bool(d[key]) for key, name in _CHECKS.items() if key in d}
    reasons = [_CHECK_WORDS[k] for k, ok in checks.items() if not ok]
    if d.get("result_invalid_reason"):
        reasons.append(str(d["result_invalid_reason"]).strip())
    if checks.get("early_stopping") is False and d.get("early_stopping_result"):
        reasons.append(" ".join(str(d["early_stopping_result"]).split()))
    reasons += errors
    spq = d.get("effective_samples_per_query")
    sps = _samples_per_s(d, scenario)
    early = d.get("early_stopping_latency_ss") if scenario == "single-stream" else (
        d.get("early_stopping_latency_ms") if scenario == "multi-stream" else None)
    latency = {name: _ms(d.get(f"result_{pct}_percentile_latency_ns")) for pct, name in _PCTS}
    latency.update(mean=_ms(d.get("result_mean_latency_ns")), min=_ms(d.get("result_min_latency_ns")),
                   max=_ms(d.get("result_max_latency_ns")))
    per_query = {name: _ms(d.get(f"result_{pct}_percentile_per_query_latency_ns")) for pct, name in _PCTS}
    per_query.update(mean=_ms(d.get("result_mean_query_latency_ns")))
    server = scenario == "server"
    return ScenarioRun(
        scenario, str(validity), reasons=reasons, checks=checks,
        min_duration_s=_num(d.get("effective_min_duration_ms"), 1e-3),
        min_query_count=_int(d.get("effective_min_query_count")), query_count=_int(d.get("result_query_count")),
        samples_per_query=_int(spq), samples_per_s=_num(sps),
        latency_ms={k: v for k, v in latency.items() if v is not None},
        query_latency_ms={k: v for k, v in per_query.items() if v is not None},
        early_stopping_ms=_ms(early),
        target_qps=_num(d.get("effective_target_qps")) if server else None,
        target_latency_ms=_ms(d.get("effective_target_latency_ns")) if server else None,
        target_latency_percentile=_num(d.get("effective_target_latency_percentile")) if server else None,
        overlatency_queries=_int(d.get("result_overlatency_query_count")) if server else None)


def _mllog_values(path: Path) -> tuple[dict[str, Any], list[str]]:
    """Key -> value of every `:::MLLOG {json}` record of a LoadGen log (the last of a key kept; unreadable lines
    skipped), and the values of the records marked as errors."""
    d: dict[str, Any] = {}
    errors: list[str] = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if not line.startswith(":::MLLOG "):
            continue
        try:
            rec = json.loads(line[len(":::MLLOG "):])
        except ValueError:
            continue
        d[rec.get("key")] = rec.get("value")
        if (rec.get("metadata") or {}).get("is_error"):
            errors.append(str(rec.get("value")))
    return d, errors


def _samples_per_s(d: dict[str, Any], scenario: str) -> Any:
    """The samples per second LoadGen reports for the scenario (single- and multi-stream: its queries per second
    times the samples per query); None when it logged none."""
    if scenario == "offline":
        return d.get("result_samples_per_second")
    if scenario == "server":
        return d.get("result_completed_samples_per_sec")
    qps, spq = d.get("result_qps_with_loadgen_overhead"), d.get("effective_samples_per_query")
    return qps * spq if isinstance(qps, (int, float)) and isinstance(spq, int) else None


def _num(v: Any, scale: float = 1.0) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        return None
    return round(float(v) * scale, 6)


def _ms(v: Any) -> float | None:
    return _num(v, 1e-6)


def _int(v: Any) -> int | None:
    return int(v) if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def _round(qps: float) -> float:
    """A target QPS to 3 significant figures (what the report shows)."""
    if qps <= 0:
        return qps
    return round(qps, max(0, 2 - math.floor(math.log10(qps))))


def _log_root(config: RunConfig, case: CaseId) -> Path | None:
    """Where LoadGen's logs of this case go: RUN_FOLDER/loadgen/CASE_ID (None: no run folder; a temporary one)."""
    out = config.outputs.out_dir
    return Path(out) / "loadgen" / case.id if out else None
