"""Result records: CaseId (the one identity), CaseResult, RunResults; schema version, migrations and the reader."""

# Each stored record is defined once, here: the dataclass is what the harness writes (`as_dict`, `to_json`), and
# its field types (harness.results.stored's constrained types) declare what the strict reader accepts; the reader
# is a pydantic TypeAdapter over the same dataclasses (`reader()`), so a field cannot exist on one side only
# (tests/results/test_schema_drift.py).

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import AfterValidator, Field, Strict, TypeAdapter

from harness.errors import ResultsError
from harness.precision import Precision
from harness.results.records import EndToEndRecord, GenerationRecord, LocalizationRecord, MemoryRecord
from harness.results.stats import LatencyStats, checked_figures, median_ci_ms, median_ms, median_ns
from harness.results.stored import (
    RECORD_CONFIG,
    Amount,
    BlockContention,
    CaseContention,
    Count,
    EnvironmentRecord,
    Figures,
    Finite,
    Flag,
    Flags,
    Name,
    NonNegative,
    Object,
    Profile,
    Record,
    RunEnvironmentRecord,
    Samples,
    Shape,
    Share,
    Text,
    Texts,
    adapter,
    check_ab,
    read_json_object,
    short,
    validate,
)

SCHEMA_VERSION = 2

# The closed set of case statuses.
#   passed   measured, drift within tolerance        failed   measured, drift over tolerance
#   skipped  not run, with the reason                error    the case raised (bad model, export failure, ...)
#   crashed  the worker died on a signal             timeout  the case exceeded --case-timeout
#   oom      the case exceeded the memory cap
Status = Literal["passed", "failed", "skipped", "error", "crashed", "timeout", "oom"]
STATUSES: tuple[str, ...] = get_args(Status)
MEASURED = ("passed", "failed")
BROKEN = ("error", "crashed", "timeout", "oom")


@dataclass(frozen=True, order=True)
class CaseId(Record):
    """One cell of the matrix: the pytest id, the results key and the report layout."""

    __pydantic_config__ = RECORD_CONFIG

    model: Name
    runtime: Name
    precision: Precision  # a plain string is converted ("fp32" -> Precision.FP32); ids and JSON say "fp32"
    batch: Shape
    seq: Shape | None
    device: Name
    gen: Shape | None = None  # generation workload: tokens generated per sequence (seq is then the prompt length)
    variant: Name | None = None  # a deployment variant's canonical name (harness.variants), e.g. "opt=basic"

    def __post_init__(self) -> None:
        if not isinstance(self.precision, Precision):
            object.__setattr__(self, "precision", Precision(self.precision))

    @property
    def id(self) -> str:
        s = f"-s{self.seq}" if self.seq is not None else ""
        g = f"-g{self.gen}" if self.gen is not None else ""
        v = f"~{self.variant}" if self.variant is not None else ""
        return f"{self.model}-{self.runtime}-{self.precision}-b{self.batch}{s}{g}{v}"

    @property
    def runtime_label(self) -> str:
        """The runtime as tables show it: `ort-cpu`, or `ort-cpu~opt=basic` for a variant's cases."""
        return self.runtime if self.variant is None else f"{self.runtime}~{self.variant}"

    @property
    def dims(self) -> dict[str, int]:
        d = {"batch": self.batch}
        if self.seq is not None:
            d["seq"] = self.seq
        if self.gen is not None:
            d["gen"] = self.gen
        return d

    @property
    def activation_key(self) -> tuple[str, str, Precision, str | None]:
        """Cases sharing this key share one runtime activation (session, compile, engine)."""
        return (self.model, self.runtime, self.precision, self.variant)

    def as_dict(self) -> dict[str, Any]:
        d = {**asdict(self), "precision": self.precision.value}
        if self.gen is None:  # forward cases are stored as before the generation workload
            del d["gen"]
        if self.variant is None:  # and cases without a variant as before the variant axis
            del d["variant"]
        return d


BlockKind = Literal["case", "round", "confirm"]
BLOCK_KINDS: tuple[str, ...] = get_args(BlockKind)


@dataclass
class Block(Record):
    """One measurement block of a case (--repeats), in order: the next `samples` of the case's samples_ns.

    kind: "case" (measured when the case ran), "round" (a later round over the matrix) or "confirm" (--confirm).
    A failed block holds no samples and says why (`error`); the case keeps its other blocks."""

    __pydantic_config__ = RECORD_CONFIG

    samples: Count
    p50_ms: Finite | None = None  # the median of the block's samples; None for a failed block
    kind: BlockKind = "case"
    reactivated: Flag = False  # measured after a fresh activation
    error: Text | None = None
    # the 95% distribution-free interval of the block's median (harness.results.stats.median_ci_ms); None: a side
    # its samples cannot bound (under 6 samples), a failed block, or results from before it was stored
    p50_ci_low_ms: Finite | None = None
    p50_ci_high_ms: Finite | None = None
    # what the kernel said about the block's timed loop (harness.measure.contention): run-queue wait of the
    # worker's threads, CPU time, preemptions, machine CPU pressure; `contended` and its `cause`
    contention: BlockContention | None = None

    def __post_init__(self) -> None:
        if self.kind not in BLOCK_KINDS:
            raise ValueError(f"unknown block kind {self.kind!r}; valid: {BLOCK_KINDS}")

    @classmethod
    def measured(cls, samples_ns: Any, kind: str, reactivated: bool = False,
                 contention: BlockContention | None = None) -> Block:
        """The block holding these samples (nanoseconds), its median and the median's 95% interval in ms."""
        lo, hi = median_ci_ms(samples_ns)
        return cls(len(samples_ns), block_p50_ms(samples_ns), kind, bool(reactivated), contention=contention,
                   p50_ci_low_ms=lo, p50_ci_high_ms=hi)

    @classmethod
    def failed(cls, error: str, kind: str, reactivated: bool = False) -> Block:
        return cls(0, None, kind, bool(reactivated), str(error))


def block_p50_ms(samples_ns: Any) -> float:
    """A block's median in ms, rounded to the nanosecond (what results.json stores): stats.median_ms."""
    return median_ms(samples_ns)


ScenarioName = Literal["single-stream", "multi-stream", "server", "offline"]
ScenarioResult = Literal["VALID", "INVALID", "error", "skipped"]
SCENARIO_NAMES: tuple[str, ...] = get_args(ScenarioName)
SCENARIO_RESULTS: tuple[str, ...] = get_args(ScenarioResult)


@dataclass
class BatcherRun:
    """What the dynamic batcher (--batcher) did during one LoadGen test: its policy, how many samples each call
    took (`batch_sizes[i]`: the calls of i + 1 samples) and how long samples waited in its queue, from LoadGen
    handing them over to their call starting (p50, p90, p99, mean, max, in ms). LoadGen's latency of a sample is
    this wait, plus its call, plus LoadGen's own overhead."""

    __pydantic_config__ = RECORD_CONFIG

    max_batch: Shape
    max_wait_ms: NonNegative
    batch_sizes: Annotated[list[Count], Strict()] = field(default_factory=list)
    queue_wait_ms: Figures = field(default_factory=dict)
    full_batches: Count = 0  # calls that went out because max_batch samples were waiting (the rest: max_wait)

    @property
    def batches(self) -> int:
        return sum(self.batch_sizes)

    @property
    def samples(self) -> int:
        return sum((i + 1) * n for i, n in enumerate(self.batch_sizes))

    @property
    def mean_batch(self) -> float | None:
        """Samples per call, derived from the histogram (never stored beside it)."""
        return self.samples / self.batches if self.batches else None


@dataclass
class ScenarioRun(Record):
    """One MLPerf LoadGen test of a case (--scenarios; harness.execution.scenarios), as LoadGen's log says it.

    result: LoadGen's verdict, VALID or INVALID; "error" (the test did not finish) or "skipped" (it would not fit
    the case's time budget): `error` says why;
    checks: LoadGen's conditions (min_duration, min_queries, early_stopping, performance_constraints) and
    whether each was met; reasons: LoadGen's own words for an INVALID result. Latencies are per sample (per
    query for multi-stream's p*_query_ms); a Server search stores one record per try (search_step 1, 2, ...)."""

    __pydantic_config__ = RECORD_CONFIG

    scenario: ScenarioName
    result: ScenarioResult
    reasons: Texts = field(default_factory=list)
    checks: Flags = field(default_factory=dict)
    min_duration_s: NonNegative | None = None  # LoadGen's effective min duration and min query count
    min_query_count: Count | None = None
    query_count: Count | None = None  # queries LoadGen issued
    samples_per_query: Count | None = None
    samples_per_s: NonNegative | None = None  # offline: LoadGen's samples/s; server: completed samples/s
    latency_ms: Figures = field(default_factory=dict)  # p50, p90, p95, p97, p99, p99.9, mean, min, max
    query_latency_ms: Figures = field(default_factory=dict)  # multi-stream: per query (8 samples)
    early_stopping_ms: NonNegative | None = None  # LoadGen's early-stopping estimate of the scenario's percentile
    target_qps: NonNegative | None = None  # server: the Poisson arrival rate asked for
    target_latency_ms: NonNegative | None = None  # server: the latency bound at target_latency_percentile
    target_latency_percentile: NonNegative | None = None
    # server: what the bound came from ("--server-latency", "5 x the single-stream p99 (...)")
    target_latency_basis: Text | None = None
    # server, default bound: the p99 the harness's issuing loop gave a no-op call at this try's rate, the part of
    # target_latency_ms that is not the model's allowance (None: not added, or --server-latency)
    loop_p99_ms: NonNegative | None = None
    # single-stream: whether the machine held the worker's threads off a CPU during the test (harness.measure.
    # contention) and why; a contended figure is never a Server bound's basis
    contended: Flag | None = None
    contention_cause: Text | None = None
    overlatency_queries: Count | None = None  # server: queries over the bound
    # the runtime's calls during the test as the SUT timed them (call + synchronise): LoadGen's latency is this
    # plus the wait in the SUT's queue and LoadGen's own overhead
    calls: Count | None = None
    call_p50_ms: NonNegative | None = None
    call_mean_ms: NonNegative | None = None
    # server search: which try (1, 2, ...); None: a fixed --server-qps
    search_step: Annotated[int, Strict(), Field(ge=1, le=10**6)] | None = None
    wall_s: NonNegative | None = None
    log_dir: Text | None = None  # LoadGen's summary and detail logs, relative to the run folder
    error: Text | None = None
    batcher: BatcherRun | None = None  # --batcher: the server and offline tests' batches and queue waits

    def __post_init__(self) -> None:
        if self.scenario not in SCENARIO_NAMES:
            raise ValueError(f"unknown scenario {self.scenario!r}; valid: {SCENARIO_NAMES}")
        if self.result not in SCENARIO_RESULTS:
            raise ValueError(f"unknown scenario result {self.result!r}; valid: {SCENARIO_RESULTS}")

    @property
    def valid(self) -> bool:
        return self.result == "VALID"


def peak_server(runs: list[ScenarioRun]) -> ScenarioRun | None:
    """The Server test that sums up a search: the highest target QPS that was VALID, else the last one tried."""
    server = [r for r in runs if r.scenario == "server"]
    valid = [r for r in server if r.valid and r.target_qps]
    return max(valid, key=lambda r: r.target_qps or 0.0) if valid else (server[-1] if server else None)


AbSideName = Literal["a", "b"]


@dataclass
class AbBlock(Record):
    """One block of an interleaved A/B measurement (`harness ab`): which side, which pair, its raw samples and
    what the kernel said about it (harness.measure.contention)."""

    __pydantic_config__ = RECORD_CONFIG

    side: AbSideName
    pair: Count  # 0-based pair index; a pair is one block of each side, back to back in the drawn order
    samples_ns: Samples
    contention: BlockContention | None = None
    activation: Count = 0  # which activation of the two sides measured it (--ab-activations; 0: the first)

    @property
    def p50_ms(self) -> float:
        return median_ms(self.samples_ns)


@dataclass
class AbResult(Record):
    """An interleaved A/B measurement of one case (`harness ab`; harness.workloads.ab): both sides activated in
    the same worker (anew every pairs / ab_activations pairs; on one CPU each activation in a new worker),
    measured in short alternating blocks in a drawn order (AB or BA per pair, balanced), and
    judged by a paired test on the block medians (harness.gating.ab): `ratio` is B over A (>1: B slower),
    with its confidence interval. The case's own samples are side A's; `b_case` is side B's identity."""

    __pydantic_config__ = RECORD_CONFIG

    a: Text  # what each side is, e.g. "base", "opt=basic", "model.onnx"
    b: Text
    b_case: CaseId
    order: Texts = field(default_factory=list)  # per pair, "ab" or "ba"
    blocks: Annotated[list[AbBlock], Strict()] = field(default_factory=list)
    block_time_s: Amount | None = None
    inject: Amount = 0.0  # gate-check only: B's calls made this fraction of A's p50 slower on purpose
    verdict: Text = ""  # harness.gating.verdicts.Verdict value
    reason: Text = ""
    ratio: Finite | None = None
    ci_low: Finite | None = None
    ci_high: Finite | None = None
    confidence: Share | None = None
    min_effect: Amount | None = None
    pairs_used: Count = 0  # pairs neither of whose blocks was contended
    waited_s: Amount = 0.0  # --ab-budget: seconds spent waiting for quiet cores after contended pairs
    extra_pairs: Count = 0  # --ab-budget: pairs measured beyond the planned ones because the verdict was unjudged
    # B's outputs against A's on the same feed (accuracy.compare at the model's FP32 tolerance)
    b_vs_a: Object | None = None


@dataclass
class EnergySource:
    """One energy counter over a case's timed blocks (harness.measure.energy): joules read, the idle draw
    measured before the first block, what is left above idle, and the figure's uncertainty."""

    __pydantic_config__ = RECORD_CONFIG

    name: Text
    method: Text
    joules: Finite
    window_s: NonNegative
    idle_w: Finite | None
    net_joules: Finite
    uncertainty_j: NonNegative
    update_s: NonNegative


@dataclass
class TrafficReplayRecord(Record):
    """`harness run --traffic FILE`: the case's runtime replaying that traffic open-loop after its timed loop
    (harness.traffic.replay, as `harness recommend` replays it). Latency runs from each request's intended send
    time to its completion (no coordinated omission); the send-time error is how late the replay loop sent a
    request it waited for; figures in ms."""

    __pydantic_config__ = RECORD_CONFIG

    source: Text  # the traffic file
    traffic: Text  # what it describes (TrafficSpec.describe)
    rate: NonNegative  # the mean rate asked for, requests/s
    requests: Count  # requests replayed (served, for a replay ended by an error)
    offered_rps: NonNegative | None = None  # the schedule's own mean rate
    throughput_rps: NonNegative | None = None  # completed requests/s over the replay
    latency_ms: Figures = field(default_factory=dict)  # p50, p90, p99, p99.9, max
    send_error_ms: Figures = field(default_factory=dict)  # p50, p99, max
    calls: Count = 0
    mean_batch: NonNegative | None = None  # requests per call (the --batcher forms batches)
    batcher: Text | None = None  # the --batcher policy, None: a call per request
    dims: Text = ""  # where a request's dimensions came from ("batch 4 (the case's), seq 16-128 (the traffic's)")
    contended: Flag = False  # the replay's threads waited for a CPU a neighbour held: its tails are inflated
    contention_cause: Text | None = None
    wall_s: NonNegative | None = None
    error: Text | None = None  # a call failed: the replay ended there, its figures so far kept


MIN_JOULES_PER_INFERENCE = 1e-15  # a femtojoule: far below any inference's energy (a multiply-add costs ~1e-12 J)


@dataclass
class EnergyRecord(Record):
    """Energy of a case (harness.measure.energy): `measured` (the counters' sources), `unavailable` (no counter
    here: the reason, never 0) or `refused` (windows too short for the counter's update rate, or a wrap that
    cannot be undone). An inference is one call at the case's batch size."""

    __pydantic_config__ = RECORD_CONFIG

    status: Literal["measured", "unavailable", "refused"]
    reason: Text = ""
    calls: Count = 0
    batch: Count = 1
    sources: Annotated[list[EnergySource], Strict()] = field(default_factory=list)
    net_joules: Finite | None = None
    uncertainty_j: NonNegative | None = None
    joules_per_inference: NonNegative | None = None
    joules_per_sample: NonNegative | None = None
    inferences_per_joule: NonNegative | None = None
    method: Text = ""

    def __post_init__(self) -> None:
        """What one record says twice must agree, and no figure may be physically impossible: per-inference
        figures only from a positive net energy over counted calls, each the others' arithmetic (within 1%: a
        figure rounded for display still reads),
        at least a femtojoule an inference (no inference costs less; 1e34 inferences per joule is a hand edit)."""
        per = self.joules_per_inference
        if per is None:
            if self.inferences_per_joule is not None or self.joules_per_sample is not None:
                raise ValueError("inferences_per_joule / joules_per_sample without joules_per_inference")
            return
        if self.status != "measured" or not self.calls or self.net_joules is None or self.net_joules <= 0:
            raise ValueError("joules_per_inference needs a measured record with calls and a positive net_joules")
        if per < MIN_JOULES_PER_INFERENCE:
            raise ValueError(f"joules_per_inference {per:g} is below {MIN_JOULES_PER_INFERENCE:g} J (physically "
                             "impossible for an inference)")

        def near(a: float | None, b: float) -> bool:
            return a is not None and abs(a - b) <= 1e-2 * max(abs(a), abs(b))

        if not near(per, self.net_joules / self.calls):
            raise ValueError("joules_per_inference is not net_joules / calls")
        if self.inferences_per_joule is not None and not near(self.inferences_per_joule, 1.0 / per):
            raise ValueError("inferences_per_joule is not 1 / joules_per_inference")
        if self.joules_per_sample is not None and not near(self.joules_per_sample, per / max(self.batch, 1)):
            raise ValueError("joules_per_sample is not joules_per_inference / batch")


@dataclass
class CaseResult(Record):
    """What happened to one case. Raw samples are kept; statistics are derived from them."""

    __pydantic_config__ = RECORD_CONFIG

    case: CaseId
    status: Status
    reason: Text = ""
    phase: Text | None = None  # load | warmup | run | accuracy: where a case broke
    signal: Text | None = None  # SIGSEGV, SIGABRT, ... for crashed cases
    stderr_tail: Text = ""
    samples_ns: Samples = field(default_factory=list)
    warmup_iters: Count = 0
    timing_scope: Text | None = None  # host_to_host | device
    # how the timed loop above is read: "single-stream" at batch 1, else "offline" (back-to-back calls, no
    # load generator); the LoadGen-driven scenarios (--scenarios) are `scenarios` below
    scenario: Text | None = None
    latency: LatencyStats | None = None  # the statistics of samples_ns (harness.results.stats.latency_stats)
    throughput_sps: Finite | None = None
    accuracy: Object | None = None  # AccuracyResult.as_dict()
    reference_runtime: Text | None = None
    setup_s: Finite | None = None
    artifact: Text | None = None
    artifact_cache_hit: Flag | None = None
    feed_sha256: Text | None = None
    model_fingerprint: Text | None = None
    details: Object = field(default_factory=dict)
    # --repeats: the measurement blocks, in the order of samples_ns (empty: one block, all the samples); the
    # gate reads a case in its least-disturbed block (harness.gating.compare)
    blocks: Annotated[list[Block], Strict()] = field(default_factory=list)
    blocks_pending: Count = 0  # blocks still to come from later rounds (a run killed before them keeps this)
    duration_s: Finite | None = None
    # Memory over the case (harness.measure.memory): MiB; None where not measured. `memory` holds every figure
    # and what it covers (MemoryRecord); gpu_peak_mb is the figure memory.gpu_source names.
    host_peak_mb: Finite | None = None
    gpu_peak_mb: Finite | None = None
    memory: MemoryRecord | None = None
    # GPU runtimes: per timed call, CUDA-event time on the runtime's stream (samples_ns is host wall time)
    device_samples_ns: Samples = field(default_factory=list)
    precision_recipe: Text | None = None  # what ran at this precision, e.g. "int8: ORT static QDQ, per-channel ..."
    localization: LocalizationRecord | None = None  # layer-wise drift findings (harness.accuracy.localize)
    # generation workload (harness.workloads.generate): TTFT, per-token decode samples, tokens/s, greedy-token
    # agreement (GenerationRecord)
    generation: GenerationRecord | None = None
    # True when this case is its model's FP32 reference runtime: its drift compares two of its own runs, so
    # reports show "reference" in the drift cells, not a measured drift of 0
    is_reference: Flag = False
    # False when the reference runtime's FP32 outputs differed between two runs on the same feed: the drift
    # figures are then marked "nondeterministic reference" (None: not checked, e.g. older results)
    reference_deterministic: Flag | None = None
    # --scenarios: MLPerf LoadGen tests run on this case's activated runtime after its timed loop, in order
    scenarios: Annotated[list[ScenarioRun], Strict()] = field(default_factory=list)
    # models that declare pre/post-processing (ModelSpec.pipeline): raw input -> pre -> runtime -> post, timed
    # (harness.measure.end_to_end): steps, samples_ns, latency, throughput_sps, pre/model/post_p50_ms
    # (EndToEndRecord)
    end_to_end: EndToEndRecord | None = None
    # the case's contention (harness.measure.contention.case_contention): blocks, contended_blocks, contended,
    # cause, the worst wait_fraction and PSI; a contended case's figures are not judged as clean ones
    contention: CaseContention | None = None
    # `harness ab`: the interleaved A/B measurement of this case and its paired verdict (harness.workloads.ab)
    ab: Annotated[AbResult | None, AfterValidator(check_ab)] = None
    # the runtime's own environment when it ran in one (harness.envs): key, requirements, python, and the exact
    # version of every package installed there (None: the harness's own environment)
    environment: EnvironmentRecord | None = None
    # --profile (harness.workloads.forward.profiling, after the timed loop): the graph's FLOPs and bytes ("cost"),
    # the roofline point of the measured p50 ("roofline"), and a profiled pass's time per ONNX node ("nodes",
    # "unmapped", "total_ms" against "measured_p50_ms", "gap_percent"), or why there is none ("unsupported",
    # "error"); layout: harness.profile.layers.profile_record
    profile: Profile | None = None
    # energy over the timed blocks (harness.measure.energy): joules per inference where a counter could be read,
    # else `unavailable` with the reason (never 0); None in results from before it
    energy: EnergyRecord | None = None
    # --traffic FILE: the open-loop replay of that traffic on this case's runtime (TrafficReplayRecord)
    traffic: TrafficReplayRecord | None = None

    @property
    def drift_note(self) -> str:
        """How to read this case's drift figures: "reference", "nondeterministic reference", "reference ~0"
        (an output passed by its absolute floor: its relative figures are float noise over a reference near 0,
        harness.accuracy.drift) or ""."""
        if self.reference_deterministic is False:
            return "nondeterministic reference"
        if self.is_reference:
            return "reference"
        return "reference ~0" if isinstance(self.accuracy, dict) and self.accuracy.get("notes") else ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown status {self.status!r}; valid: {STATUSES}")

    @property
    def measured(self) -> bool:
        return self.status in MEASURED

    @property
    def block_sizes(self) -> list[int]:
        """Samples per block that measured any, in order (empty: the case has no block information)."""
        return [b.samples for b in self.blocks if b.samples > 0]

    @property
    def confirm_blocks(self) -> int:
        """Blocks added by --confirm that measured."""
        return sum(1 for b in self.blocks if b.kind == "confirm" and b.samples > 0)

    def as_dict(self) -> dict[str, Any]:
        """Every field as records write it (Record.as_dict: memory, end to end ... as the keys they hold), then
        the case's id."""
        return {**super().as_dict(), "id": self.case.id}


@dataclass
class RunResults(Record):
    """One run: environment snapshot, configuration, and every case's result."""

    __pydantic_config__ = RECORD_CONFIG

    run_id: Text
    started_at: Text
    environment: RunEnvironmentRecord = field(default_factory=RunEnvironmentRecord)
    config: Object = field(default_factory=dict)
    cases: Annotated[list[CaseResult], Strict()] = field(default_factory=list)
    finished_at: Text | None = None
    complete: Flag = False  # False until the run ends: a killed run's file says so
    interrupted: Flag = False
    harness_version: Text = ""
    schema_version: Annotated[int, Strict(), Field(ge=0, le=10**6)] = SCHEMA_VERSION

    def as_dict(self) -> dict[str, Any]:
        return {"schema_version": self.schema_version, "harness_version": self.harness_version,
                "run_id": self.run_id, "started_at": self.started_at, "finished_at": self.finished_at,
                "complete": self.complete, "interrupted": self.interrupted, "environment": self.environment.as_dict(),
                "config": self.config, "cases": [c.as_dict() for c in self.cases]}

    def to_json(self) -> str:
        return json.dumps(_finite(self.as_dict()), indent=1, sort_keys=False)

    def counts(self) -> dict[str, int]:
        out = {s: 0 for s in STATUSES}
        for c in self.cases:
            out[c.status] += 1
        return out


def _finite(obj: Any) -> Any:
    """JSON has no NaN/Inf: write them as the strings "nan", "inf", "-inf"."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


# details keys of schema_version 1 that became CaseResult.blocks / blocks_pending
_V1_BLOCK_KEYS = ("blocks", "block_p50_ms", "block_reactivated", "block_errors", "confirm_blocks", "blocks_pending")


def _v1_to_v2(doc: dict[str, Any]) -> dict[str, Any]:
    """Block bookkeeping from `details` (sizes, errors, counts) to typed `blocks` and `blocks_pending`."""
    def case(c: Any) -> Any:
        details = c.get("details") if isinstance(c, dict) else None
        if not isinstance(details, dict):
            return c
        old = {k: v for k, v in details.items() if k in _V1_BLOCK_KEYS}
        pending = old.get("blocks_pending") or 0
        return {**c, "details": {k: v for k, v in details.items() if k not in _V1_BLOCK_KEYS},
                "blocks": _v1_blocks(old, c.get("samples_ns")),
                "blocks_pending": pending if isinstance(pending, int) and not isinstance(pending, bool) else 0}

    cases = doc.get("cases")
    return {**doc, "schema_version": 2, **({"cases": [case(c) for c in cases]} if isinstance(cases, list) else {})}


def _v1_blocks(old: dict[str, Any], samples: Any) -> list[dict[str, Any]]:
    """Version-1 block details as version-2 blocks. Version 1 read sizes that do not add up to the samples as
    one block, so they become none here; it kept counts, not per-block facts, for re-activations and
    confirmation blocks: the last blocks carry them, and failed blocks (position unknown) come last."""
    sizes = old.get("blocks")
    ints = isinstance(samples, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in samples)
    if not (ints and isinstance(sizes, list) and sizes
            and all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in sizes)
            and sum(sizes) == len(samples)):
        return []
    n_confirm, n_reactivated = (v if isinstance(v, int) and not isinstance(v, bool) else 0
                                for v in (old.get("confirm_blocks"), old.get("block_reactivated")))
    blocks, at = [], 0
    for i, n in enumerate(sizes):
        kind = "case" if i == 0 else ("confirm" if i >= len(sizes) - n_confirm else "round")
        blocks.append({"samples": n, "p50_ms": block_p50_ms(samples[at:at + n]), "kind": kind,
                       "reactivated": i > 0 and i >= len(sizes) - n_reactivated, "error": None})
        at += n
    errors = old.get("block_errors")
    for e in errors if isinstance(errors, list) else ():
        blocks.append({"samples": 0, "p50_ms": None, "kind": "round", "reactivated": False, "error": str(e)})
    return blocks


# Upgrade functions: MIGRATIONS[n] turns a version-n document into version n+1.
MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _v1_to_v2}


def migrate(doc: dict[str, Any], source: str = "<results>") -> dict[str, Any]:
    version = doc.get("schema_version")
    if not isinstance(version, int):
        raise ResultsError(f"{source}: no integer schema_version: not a harness results file")
    if version > SCHEMA_VERSION:
        raise ResultsError(f"{source}: schema_version {version} is newer than this harness reads "
                           f"({SCHEMA_VERSION}); upgrade the harness")
    while version < SCHEMA_VERSION:
        if version not in MIGRATIONS:
            raise ResultsError(f"{source}: schema_version {version} has no migration to {SCHEMA_VERSION}")
        doc = MIGRATIONS[version](doc)
        version = doc["schema_version"]
    return doc


def load_results(path: str | Path) -> RunResults:
    """Read a results.json (or its run folder) through the one stored-file reader (harness.results.stored):
    bounded parsing, older schema versions migrated, the declared schema and the samples checked."""
    path = Path(path)
    if path.is_dir():
        path = path / "results.json"
    return results_from_doc(read_json_object(path), str(path))


def results_from_doc(doc: dict[str, Any], source: str = "<results>", prefix: str = "") -> RunResults:
    """A parsed results document (migrated to the current schema, then read and checked by
    `check_results_doc`) as RunResults; errors name `source` and the place (`prefix` + path)."""
    doc = migrate(doc, f"{source}: {prefix}" if prefix else source)
    return check_results_doc(doc, source, prefix)


def reader() -> TypeAdapter[RunResults]:
    """The strict reader of a (migrated) results document: the TypeAdapter over RunResults and the records it
    holds, their constraints read from the fields' types (harness.results.stored.adapter). Built on first use."""
    return adapter(RunResults)


def check_results_doc(doc: dict[str, Any], source: str, prefix: str = "") -> RunResults:
    """A (migrated) results document read by `reader()` and checked for numbers that cannot be true: every
    measured case has finite, positive samples, and its stored statistics agree with them; case ids are unique
    and the run holds at least one case. The run; ResultsError naming `source` and the place otherwise."""
    run = validate(reader(), doc, source, prefix)
    assert isinstance(run, RunResults)
    at = f"{prefix}." if prefix else ""
    if not run.cases:
        raise ResultsError(f"{source}: {at}cases: the run holds no cases: nothing to report or compare")
    seen: dict[str, int] = {}
    for i, c in enumerate(run.cases):
        where = f"{source}: {at}cases[{i}]"
        cid = f"{c.case.id}@{c.case.device}"
        if cid in seen:
            raise ResultsError(f"{where}: duplicate case id {cid!r} (first at cases[{seen[cid]}])")
        seen[cid] = i
        for key, values in (("samples_ns", c.samples_ns), ("device_samples_ns", c.device_samples_ns)):
            if values and min(values) <= 0:
                bad = next(j for j, v in enumerate(values) if v <= 0)
                raise ResultsError(f"{where}.{key}[{bad}]: {values[bad]} ns: a latency sample must be positive")
        _check_blocks(c.blocks, c.samples_ns, f"{where}.blocks")
        if c.status not in ("passed", "failed"):
            continue
        if not c.samples_ns:
            raise ResultsError(f"{where}.samples_ns: status {c.status} but no latency samples")
        if c.throughput_sps is not None and c.throughput_sps <= 0:
            raise ResultsError(f"{where}.throughput_sps: {c.throughput_sps}: must be positive for a measured case")
        if c.latency is not None:
            _check_latency(c.latency, c.samples_ns, f"{where}.latency")
        if c.generation is not None:
            _check_generation(c.generation, c.samples_ns, f"{where}.generation")
    return run


def _check_generation(g: GenerationRecord, samples_ns: list[int], where: str) -> None:
    """A generation case's raw samples (harness.generation): positive integers, one TTFT and one list of
    decode steps per generation, each generation's end-to-end time their sum, and those times the case's
    samples_ns."""
    def ints(v: Any, at: str) -> list[int]:
        if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in v):
            raise ResultsError(f"{where}.{at}: {short(v)}: expected a list of positive integer nanoseconds")
        return v

    ttft, e2e = ints(g.ttft_ns, "ttft_ns"), ints(g.e2e_ns, "e2e_ns")
    decode = g.decode_ns
    if not isinstance(decode, list) or len(decode) != len(ttft) or len(e2e) != len(ttft):
        raise ResultsError(f"{where}: ttft_ns, decode_ns and e2e_ns must hold one entry per generation")
    for i, (t, steps, total) in enumerate(zip(ttft, decode, e2e)):
        if t + sum(ints(steps, f"decode_ns[{i}]")) != total:
            raise ResultsError(f"{where}.e2e_ns[{i}]: {total} ns but TTFT + decode steps give "
                               f"{t + sum(steps)} ns: samples that disagree")
    if e2e != samples_ns:
        raise ResultsError(f"{where}.e2e_ns: not the case's samples_ns (a generation's end-to-end times are its "
                           "latency samples)")


def _check_blocks(blocks: list[Block], samples_ns: list[int], where: str) -> None:
    """Blocks that hold the samples in order: their counts add up to samples_ns, a block with samples has their
    median as p50_ms and no error, a block without samples says why it failed."""
    if not blocks:
        return
    total = sum(b.samples for b in blocks)
    if total != len(samples_ns):
        raise ResultsError(f"{where}: the blocks hold {total} samples but samples_ns holds {len(samples_ns)}")
    at = 0
    for j, b in enumerate(blocks):
        if b.samples == 0:
            if not b.error:
                raise ResultsError(f"{where}[{j}]: a block with no samples must say why it failed (error)")
            continue
        if b.error is not None:
            raise ResultsError(f"{where}[{j}].error: a block with samples did not fail; found {short(b.error)}")
        want = median_ns(samples_ns[at:at + b.samples]) / 1e6
        if b.p50_ms is None or not math.isclose(b.p50_ms, want, rel_tol=1e-6, abs_tol=2e-6):
            got = "none" if b.p50_ms is None else f"{b.p50_ms:.6g} ms"
            raise ResultsError(f"{where}[{j}].p50_ms: {got} but its samples give {want:.6g} ms: statistics "
                               "that disagree with the raw samples")
        at += b.samples


def _check_latency(lat: LatencyStats, samples_ns: list[int], where: str) -> None:
    """Stored statistics (finite and flags by their types: the reader) positive and, where they are derived from
    the samples, equal to them within rounding."""
    for f in fields(lat):
        v = getattr(lat, f.name)
        if isinstance(v, bool) or v is None:
            continue
        if v < 0 or (v == 0 and f.name.endswith("_ms") and f.name not in ("std_ms", "iqr_ms")):
            raise ResultsError(f"{where}.{f.name}: {v}: a latency must be positive")
    if lat.iterations != len(samples_ns):
        raise ResultsError(f"{where}.iterations: {lat.iterations} but samples_ns holds {len(samples_ns)} samples")
    for key, want in checked_figures(samples_ns).items():
        got = getattr(lat, key)
        if not math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-6):
            unit = " ms" if key.endswith("_ms") else ""
            raise ResultsError(f"{where}.{key}: {got:.6g}{unit} but the samples (samples_ns) give "
                               f"{want:.6g}{unit}: statistics that disagree with the raw samples")
