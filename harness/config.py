"""RunConfig: the typed, frozen run configuration, one section per concern; constructing one does nothing else."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.artifacts.cache import default_cache_dir
from harness.artifacts.int8 import DEFAULT_CALIBRATION_METHOD
from harness.errors import UsageError
from harness.measure.contention import default_contention_limit
from harness.measure.timer import TimingPolicy
from harness.precision import Precision, Tolerance
from harness.results.environment import default_threads
from harness.results.stats import DEFAULT_NOISE_CV

QUICK_TAG = "quick"
EXPORTERS = ("dynamo", "legacy")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


@dataclass(frozen=True, kw_only=True)
class MatrixConfig:
    """Which cases: models x runtimes x precisions x batch sizes (x sequence lengths)."""

    models: tuple[str, ...] = ()
    runtimes: tuple[str, ...] = ()
    precisions: tuple[Precision, ...] = (Precision.FP32,)
    batch_sizes: tuple[int, ...] = (1, 8)
    seq_lens: tuple[int, ...] = (128,)  # ignored by models without a sequence axis
    variants: tuple[str | None, ...] = (None,)  # canonical deployment-variant names (harness.variants); None: base
    quick: bool = False
    user_models: tuple[str, ...] = ()  # --model files (absolute paths) or factories, registered in every worker
    shapes: tuple[tuple[str, int], ...] = ()  # --shape NAME=DIM for user ONNX files


@dataclass(frozen=True, kw_only=True)
class MeasureConfig:
    """How a case is timed: the timing policy, threads, blocks and the noise threshold."""

    timing: TimingPolicy = field(default_factory=TimingPolicy)
    threads: int = field(default_factory=default_threads)  # intra-op threads of every runtime
    repeats: int = 3  # measurement blocks per case
    noise_cv: float = DEFAULT_NOISE_CV
    # a block is `contended` when its threads waited this share of their runnable time for a CPU
    # (harness.measure.contention); $HARNESS_CONTENTION_LIMIT sets the default (1 turns the verdict off)
    contention_limit: float = field(default_factory=default_contention_limit)
    # --settle: wait up to this long for a quiet machine before each case, and re-measure a contended block once
    # it is quiet again (both kept); 0: off
    settle_s: float = 0.0
    # --profile: after the timed loop (never inside it), a profiled pass per case: per-layer times on the ONNX
    # graph, FLOPs, bytes and the case's place under the machine's roofline (harness.workloads.forward.profiling)
    profile: bool = False


@dataclass(frozen=True, kw_only=True)
class ProcessConfig:
    """Where a case runs: a supervised worker process (the default), with its limits."""

    isolation: bool = True  # cases in supervised worker processes
    case_timeout_s: float = 600.0
    case_memory_gb: float = 8.0  # address-space cap per worker (harness run: half the machine's memory)
    # harness.envs: "auto" - a runtime whose requirements this interpreter lacks, a pinned NAME@VERSION or one that
    # always needs its own runs in an environment built from its requirements; "off": never (a skip, as before)
    envs: str = "auto"
    env_wheels: str | None = None  # --env-wheels: build environments from this folder of wheels only (absolute path)


@dataclass(frozen=True, kw_only=True)
class InputsConfig:
    """What every runtime is fed: the seed of generated feeds, real inputs, per-input overrides."""

    seed: int = 0
    feeds: str | None = None  # --feeds: an .npz or a folder of arrays (absolute path), harness.feeds
    input_values: tuple[Any, ...] = ()  # --input-value NAME=V: harness.feeds.InputOverride
    input_ranges: tuple[Any, ...] = ()  # --input-range NAME=LO:HI: harness.feeds.InputOverride

    @property
    def overrides(self) -> tuple[Any, ...]:
        return tuple(self.input_values) + tuple(self.input_ranges)


@dataclass(frozen=True, kw_only=True)
class ArtifactsConfig:
    """How artifacts are built: the cache, the ONNX exporter, INT8 recipes, torch.compile's mode."""

    cache_dir: Path = field(default_factory=default_cache_dir)
    exporter: str = "dynamo"  # one of EXPORTERS
    int8_method: str = "auto"  # harness.artifacts.int8.INT8_METHODS
    calibration_method: str = DEFAULT_CALIBRATION_METHOD  # one of harness.artifacts.int8.CALIBRATION_METHODS
    compile_mode: str = "default"  # one of COMPILE_MODES, for the torch-compile-* runtimes


@dataclass(frozen=True, kw_only=True)
class AccuracyConfig:
    """How drift is judged: tolerance overrides per precision, layer-wise localisation."""

    tolerance_overrides: dict[str, dict[str, float]] = field(default_factory=dict)  # {"fp16": {"max_rel_l2": .05}}
    localize: bool = False
    # --audit (qualify: always): timed outputs against untimed ones and the caching audit, inside each forward case
    # (harness.workloads.forward.audit); a failed audit fails the case
    audit: bool = False
    # golden outputs (harness qualify): the store (an absolute folder: index.json and SHA256.npz), and whether
    # this run records them (a trusted machine) or compares every case's outputs with them
    golden_dir: str | None = None
    record_golden: bool = False

    def tolerance_override(self, precision: Precision | str) -> Tolerance | None:
        """The --tolerance bounds given for `precision` (None when none were)."""
        bounds = self.tolerance_overrides.get(str(Precision(precision)))
        return Tolerance(**bounds) if bounds else None


@dataclass(frozen=True)
class BatcherPolicy:
    """--batcher: a dynamic batcher in front of the runtime for the LoadGen Server and Offline scenarios
    (harness.workloads.forward.batcher): queued samples go out as one call when `max_batch` are waiting or the
    oldest has waited `max_wait_ms`, whichever comes first."""

    max_batch: int
    max_wait_ms: float

    def describe(self) -> str:
        return f"max={self.max_batch},wait={self.max_wait_ms:g}"


@dataclass(frozen=True, kw_only=True)
class LoadgenConfig:
    """MLPerf LoadGen scenarios run on every measured forward case (harness.workloads.forward.scenarios)."""

    scenarios: tuple[str, ...] = ()  # () runs none
    scenario_duration_s: float = 1.0  # LoadGen's min duration of each test
    scenario_queries: int | None = None  # LoadGen's min query count (None: the fewest its early stopping accepts)
    server_qps: float | None = None  # a fixed Server target QPS (None: search for the highest VALID one)
    server_latency_ms: float | None = None  # the Server p99 bound (None: derived from the measured latency)
    server_tries: int = 4  # Server search: LoadGen tests tried
    batcher: BatcherPolicy | None = None  # --batcher: Server and Offline through a dynamic batcher (None: none)
    # --traffic FILE [--rate R]: each measured case also replays this traffic open-loop (harness.traffic: the
    # replay `harness recommend` uses) at R requests/s (None: the traffic's own rate); its tails in `traffic`
    traffic_file: str | None = None
    traffic_rate: float | None = None

    def __post_init__(self) -> None:
        if self.batcher is not None and not {"server", "offline"} & set(self.scenarios) and not self.traffic_file:
            raise UsageError(f"--batcher {self.batcher.describe()} serves the server and offline scenarios and "
                             f"--traffic; --scenarios has neither ({', '.join(self.scenarios) or 'none'}) and no "
                             "--traffic was given")
        if self.traffic_rate is not None and not self.traffic_file:
            raise UsageError(f"--rate {self.traffic_rate:g} is the rate of --traffic FILE's replay; give --traffic")
        if self.server_qps and self.server_qps * max(self.scenario_duration_s, 1.0) > MAX_SERVER_QUERIES:
            raise UsageError(
                f"--server-qps {self.server_qps:g} x --scenario-duration {self.scenario_duration_s:g} s asks LoadGen "
                f"to schedule {self.server_qps * max(self.scenario_duration_s, 1.0):.3g} queries up front (it holds "
                f"them all in memory; over {MAX_SERVER_QUERIES:.0e} it runs out): lower either")


# LoadGen draws a Server test's whole Poisson schedule before it starts (target QPS x min duration queries,
# each with its own bookkeeping): 1e12 QPS ended in std::bad_alloc. 1e7 queries is ~1 GB of it.
MAX_SERVER_QUERIES = 1e7


@dataclass(frozen=True, kw_only=True)
class GenerationConfig:
    """The generation workload's axes: prompt and output lengths in tokens."""

    prompt_lens: tuple[int, ...] = (128,)
    output_lens: tuple[int, ...] = (64,)


@dataclass(frozen=True, kw_only=True)
class ConformanceConfig:
    """The conformance workload's case filter: ONNX backend test cases by operator, name, opset, kind."""

    ops: tuple[str, ...] = ()
    keywords: tuple[str, ...] = ()  # -k: name substrings or globs
    names: tuple[str, ...] = ()  # --case: exact test names
    opset_min: int | None = None
    opset_max: int | None = None
    expanded: bool = True  # the *_expanded (function body) cases
    light: bool = True  # the light models of onnx/backend/test/data/light

    def filters(self) -> dict[str, Any]:
        return {"ops": list(self.ops), "k": list(self.keywords), "cases": list(self.names),
                "opset_min": self.opset_min, "opset_max": self.opset_max, "expanded": self.expanded,
                "light": self.light}


@dataclass(frozen=True, kw_only=True)
class AbConfig:
    """The A/B workload (`harness ab A B`, harness.workloads.ab): the two sides and how they are interleaved."""

    # a side: "base", a variant's canonical name (harness.variants) or "model:NAME" (a --model file's model)
    ab_a: str = "base"
    ab_b: str = "base"
    # pairs of blocks (one of each side, in a drawn order AB or BA, balanced). Many short pairs: the machine's
    # episodes last seconds, so both blocks of a 0.1 s pair see the same one (gate-check --ab: 40 x 0.05 s found
    # 5% in 45 of 45 measurements, quiet and with a busy core, 0 of 45 A/A false alarms; 10 x 0.2 s: 80% / 40%)
    ab_pairs: int = 40
    ab_block_time_s: float = 0.05  # measured time per block, at least 5 calls (plus a short warm-up of its own)
    ab_min_effect: float = 0.02  # B/A beyond 1 +- this is a change (under it: pass), as compare's threshold
    ab_confidence: float = 0.99  # of the interval on B/A; regressed/improved need it to exclude 1
    ab_seed: int = 0  # the draw of the block order
    # each side activated this many times, anew every ab_pairs / ab_activations pairs: two activations of one model
    # differ by a bias of their own (buffer addresses, thread placement: up to 16% at 0.03 ms on 2 threads) that
    # no number of pairs in one activation removes; harness.gating.ab.judge_ab judges on the activations when
    # they differ (docs/measurements.md). On one CPU the gate makes each activation in new workers (a process's own
    # bias lasted all its activations there: pairs.renews_workers); `harness ab` too
    ab_activations: int = 4
    # seconds per case the A/B may spend beyond its planned pairs to reach a verdict: waiting for quiet cores after
    # a contended pair, then one more activation's pairs at a time while the verdict is unjudged (contended pairs,
    # an interval too wide); 0: the planned pairs only (harness.workloads.ab.pairs, docs/measurements.md)
    ab_budget_s: float = 30.0
    # --detect: the smallest slowdown to detect (a fraction, 0.05 for 5%); the pairs per case are then chosen
    # from a pilot's spread (harness.gating.ab.next_pairs), at most harness.gating.ab.DETECT_MAX_PAIRS
    ab_detect: float | None = None
    ab_inject: float = 0.0  # gate-check: B's calls made this fraction of A's p50 slower (a planted slowdown)

    @property
    def activations_used(self) -> int:
        """The activations each side gets: --ab-activations, at most one per planned pair (an activation needs a
        pair of its own; harness.workloads.ab.pairs.activation_of)."""
        return max(1, min(self.ab_activations, self.ab_pairs))

    def activations_text(self) -> str:
        """"4 activation(s) per side", saying it when --ab-activations was lowered to the pairs (never a header that
        promises 50 activations over 2 pairs)."""
        used = self.activations_used
        lowered = (f" (--ab-activations {self.ab_activations} lowered to {used}: an activation needs a pair of its "
                   f"own, and --ab-pairs is {self.ab_pairs})") if used < self.ab_activations else ""
        return f"{used} activation(s) per side{lowered}"


@dataclass(frozen=True, kw_only=True)
class GatingConfig:
    """Judging the run against a baseline as it finishes."""

    baseline: str | None = None  # resolved path of the baseline results
    gates: tuple[str, ...] = ()  # gate strings (median:10%)
    gate_config: str | None = None  # gate TOML file (absolute path)
    confirm: int = 2  # more blocks for cases the gate judged regressed, then judged again
    allow_unjudged: bool = False  # a gated row not judged (contended, ...) exits 0 instead of 3, still said


@dataclass(frozen=True, kw_only=True)
class OutputsConfig:
    """Where the run goes: its folder, its id, the history database it is recorded in."""

    out_dir: Path = Path("reports")
    run_id: str = ""
    history: str | None = None  # --history: the database URL the finished run is recorded in

    @property
    def scratch_dir(self) -> Path:
        """Where the run's workers keep temporary files (LoadGen's logs of a test): under the run folder, so a worker
        stopped mid-way leaves nothing in $TMPDIR; the session removes it when it finishes, interrupted or not."""
        return self.out_dir / ".scratch"


@dataclass(frozen=True, kw_only=True)
class FleetConfig:
    """Sharding the matrix over a Ray cluster (harness.execution.ray_shards)."""

    ray: str | None = None  # --ray: the cluster address
    placement: tuple[tuple[str, str], ...] = ()  # --placement: (runtime glob, Ray resource) rules


@dataclass(frozen=True, kw_only=True)
class CapacityConfig:
    """`harness recommend` (harness.execution.recommend_run): the model and traffic, the SLO and the limits a
    configuration must hold, and the search's budgets. The axes it searches are the matrix's runtimes, precisions
    and variants, with `thread_counts` and `batchers` of its own."""

    model_ref: str = ""  # --model as given: a zoo or plugin name, an ONNX file or pkg.module:factory
    traffic: str = ""  # --traffic FILE (a spec or a trace, harness.traffic)
    traffic_seed: int | None = None  # --traffic-seed (None: the file's)
    slo_ms: float = 0.0  # the latency bound at slo_percentile
    slo_percentile: float = 99.0
    drift_limit: float | None = None  # --drift-tolerance: largest rel_l2 drift against the FP32 reference
    memory_cap_mb: float | None = None  # largest resident memory growth
    thread_counts: tuple[int, ...] = (1,)  # intra-op threads, one configuration each
    batchers: tuple[str, ...] = ("none",)  # `none` or `max=N,wait=MS` each (harness.workloads.capacity.live)
    search_tolerance: float = 0.03  # the capacity interval's relative width at which a search stops
    probes: int = 25  # most probed rates per search
    probe_requests: int = 2000  # requests per probe (doubled while a probe cannot decide)
    probe_max_requests: int = 16000
    capacity_ab_pairs: int = 8  # the interleaved A/B of the best two
    capacity_activations: int = 3  # activations each final capacity is measured over
    grid: bool = False  # every configuration searched fully instead of successive halving
    resume: bool = False  # go on with the stopped run in outputs.out_dir


SECTIONS: dict[str, type] = {
    "matrix": MatrixConfig, "measure": MeasureConfig, "process": ProcessConfig, "inputs": InputsConfig,
    "artifacts": ArtifactsConfig, "accuracy": AccuracyConfig, "loadgen": LoadgenConfig,
    "generation": GenerationConfig, "conformance": ConformanceConfig, "ab": AbConfig, "gating": GatingConfig,
    "outputs": OutputsConfig, "fleet": FleetConfig, "capacity": CapacityConfig,
}
# sections a run records in results.json only when it set them (recommend's: no case run holds them)
RECORDED_WHEN_SET = frozenset({"capacity"})


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    """A run: its workload and one typed section per concern. Frozen and picklable; strings become one in
    harness.options (the CLI and the pytest plugin), code builds one with `RunConfig.build(**fields)`."""

    workload: str = "forward"  # a harness.workloads name: forward, generate, conform
    matrix: MatrixConfig = field(default_factory=MatrixConfig)
    measure: MeasureConfig = field(default_factory=MeasureConfig)
    process: ProcessConfig = field(default_factory=ProcessConfig)
    inputs: InputsConfig = field(default_factory=InputsConfig)
    artifacts: ArtifactsConfig = field(default_factory=ArtifactsConfig)
    accuracy: AccuracyConfig = field(default_factory=AccuracyConfig)
    loadgen: LoadgenConfig = field(default_factory=LoadgenConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    conformance: ConformanceConfig = field(default_factory=ConformanceConfig)
    ab: AbConfig = field(default_factory=AbConfig)
    gating: GatingConfig = field(default_factory=GatingConfig)
    outputs: OutputsConfig = field(default_factory=OutputsConfig)
    fleet: FleetConfig = field(default_factory=FleetConfig)
    capacity: CapacityConfig = field(default_factory=CapacityConfig)

    @classmethod
    def build(cls, workload: str = "forward", **values: Any) -> RunConfig:  # type: ignore[override]
        """A RunConfig from field values by their names (`threads=1, models=("mlp",)`), each routed to the
        section that declares it; a name no section declares is a TypeError."""
        return cls(workload=workload).replace(**values)

    def replace(self, **values: Any) -> RunConfig:
        """A copy with these fields changed, by their names (section fields, or whole sections)."""
        sections: dict[str, dict[str, Any]] = {}
        top: dict[str, Any] = {}
        for name, value in values.items():
            if name in SECTIONS or name == "workload":
                top[name] = value
            else:
                sections.setdefault(section_of(name), {})[name] = value
        out = dataclasses.replace(self, **top) if top else self
        changed = {s: dataclasses.replace(getattr(out, s), **v) for s, v in sections.items()}
        return dataclasses.replace(out, **changed) if changed else out

    def as_dict(self) -> dict[str, Any]:
        """The configuration as results.json stores it: one flat object (field names are unique across sections)."""
        d: dict[str, Any] = {"workload": self.workload}
        for name, cls in SECTIONS.items():
            if name not in RECORDED_WHEN_SET or getattr(self, name) != cls():
                d.update(dataclasses.asdict(getattr(self, name)))
        d["precisions"] = [p.value for p in self.matrix.precisions]
        d["out_dir"] = str(self.outputs.out_dir)
        d["cache_dir"] = str(self.artifacts.cache_dir)
        if self.outputs.history:  # results.json never holds a database password
            from harness.history.store import masked

            d["history"] = masked(self.outputs.history)
        return d


def section_of(name: str) -> str:
    """The section that declares field `name` (TypeError for a name none declares)."""
    for section, cls in SECTIONS.items():
        if name in {f.name for f in dataclasses.fields(cls)}:
            return section
    raise TypeError(f"RunConfig has no field {name!r}")


def _check_unique() -> None:
    seen: dict[str, str] = {}
    for section, cls in SECTIONS.items():
        for f in dataclasses.fields(cls):
            assert f.name not in seen, f"{f.name} in both {seen[f.name]} and {section}"
            seen[f.name] = section


_check_unique()
