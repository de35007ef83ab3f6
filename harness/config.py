"""RunConfig: the typed, frozen run configuration with its defaults; constructing one does nothing else."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.artifacts.cache import default_cache_dir
from harness.artifacts.int8 import DEFAULT_CALIBRATION_METHOD
from harness.measure.stats import DEFAULT_NOISE_CV
from harness.measure.timer import TimingPolicy
from harness.precision import Precision, Tolerance
from harness.results.environment import default_threads
from harness.results.schema import CaseId

QUICK_TAG = "quick"
EXPORTERS = ("dynamo", "legacy")
WORKLOADS = ("forward", "generate")  # one forward pass per call; greedy generation with a KV cache
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    """A matrix and measurement policy. Frozen, picklable; strings become one in harness.options."""

    models: tuple[str, ...]
    runtimes: tuple[str, ...]
    out_dir: Path
    precisions: tuple[Precision, ...] = (Precision.FP32,)
    batch_sizes: tuple[int, ...] = (1, 8)
    seq_lens: tuple[int, ...] = (128,)  # ignored by models without a sequence axis
    timing: TimingPolicy = field(default_factory=TimingPolicy)
    threads: int = field(default_factory=default_threads)  # intra-op threads of every runtime
    seed: int = 0  # of the input feeds
    feeds: str | None = None  # --feeds: an .npz or a folder of arrays (absolute path), harness.feeds
    input_values: tuple[Any, ...] = ()  # --input-value NAME=V: harness.feeds.InputOverride
    input_ranges: tuple[Any, ...] = ()  # --input-range NAME=LO:HI: harness.feeds.InputOverride
    quick: bool = False
    isolation: bool = True  # cases in supervised worker processes
    case_timeout_s: float = 600.0
    case_memory_gb: float = 8.0  # address-space cap per worker (harness run: half the machine's memory)
    cache_dir: Path = field(default_factory=default_cache_dir)
    exporter: str = "dynamo"  # one of EXPORTERS
    noise_cv: float = DEFAULT_NOISE_CV
    run_id: str = ""
    user_models: tuple[str, ...] = ()  # --model files (absolute paths) or factories, registered in every worker
    shapes: tuple[tuple[str, int], ...] = ()  # --shape NAME=DIM for user ONNX files
    int8_method: str = "auto"  # harness.artifacts.int8.INT8_METHODS
    calibration_method: str = DEFAULT_CALIBRATION_METHOD  # one of harness.artifacts.int8.CALIBRATION_METHODS
    tolerance_overrides: dict[str, dict[str, float]] = field(default_factory=dict)  # {"fp16": {"max_rel_l2": .05}}
    localize: bool = False
    baseline: str | None = None  # resolved path of the baseline results
    gates: tuple[str, ...] = ()  # gate strings (median:10%)
    gate_config: str | None = None  # gate TOML file (absolute path)
    compile_mode: str = "default"  # one of COMPILE_MODES, for the torch-compile-* runtimes
    repeats: int = 3  # measurement blocks per case
    confirm: int = 2  # more blocks for cases the gate judged regressed, then judged again
    # MLPerf LoadGen scenarios per measured case (harness.execution.scenarios); () runs none
    scenarios: tuple[str, ...] = ()
    scenario_duration_s: float = 1.0  # LoadGen's min duration of each test
    scenario_queries: int | None = None  # LoadGen's min query count (None: the fewest its early stopping accepts)
    server_qps: float | None = None  # a fixed Server target QPS (None: search for the highest VALID one)
    server_latency_ms: float | None = None  # the Server p99 bound (None: 10 x the runtime's call time then)
    server_tries: int = 4  # Server search: LoadGen tests tried
    history: str | None = None  # --history: the database URL the finished run is recorded in
    ray: str | None = None  # --ray: the Ray cluster address the matrix is sharded over (harness.execution.ray_shards)
    placement: tuple[tuple[str, str], ...] = ()  # --placement: (runtime glob, Ray resource) rules
    workload: str = "forward"  # one of WORKLOADS (harness.generation for "generate")
    prompt_lens: tuple[int, ...] = (128,)  # generate: prompt tokens per sequence
    output_lens: tuple[int, ...] = (64,)  # generate: tokens generated per sequence

    def tolerance_override(self, precision: Precision | str) -> Tolerance | None:
        """The --tolerance bounds given for `precision` (None when none were)."""
        bounds = self.tolerance_overrides.get(str(Precision(precision)))
        return Tolerance(**bounds) if bounds else None

    def cases(self) -> list[CaseId]:
        """The matrix in execution order (harness.matrix.case_ids)."""
        from harness.matrix import case_ids, generation_case_ids

        if self.workload == "generate":
            return generation_case_ids(self.models, self.runtimes, self.precisions, self.batch_sizes,
                                       self.prompt_lens, self.output_lens)
        return case_ids(self.models, self.runtimes, self.precisions, self.batch_sizes, self.seq_lens)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["precisions"] = [p.value for p in self.precisions]
        d["out_dir"] = str(self.out_dir)
        d["cache_dir"] = str(self.cache_dir)
        if self.history:  # results.json never holds a database password
            from harness.history.store import masked

            d["history"] = masked(self.history)
        return d
