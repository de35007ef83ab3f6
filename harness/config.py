"""Run options, defined once for the CLI and the pytest plugin, and the validated, frozen RunConfig."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.artifacts.cache import default_cache_dir
from harness.errors import UsageError
from harness.measure.stats import DEFAULT_NOISE_CV
from harness.measure.timer import TimingPolicy
from harness.precision import Precision
from harness.results.environment import default_threads
from harness.results.schema import CaseId

QUICK_TAG = "quick"


@dataclass(frozen=True)
class OptionDef:
    """One run option. The CLI spells it `--NAME`, pytest `--harness-NAME`; both parse with RunConfig."""

    name: str
    help: str
    metavar: str | None = None
    flag: bool = False  # a switch without a value
    multiple: bool = False  # may be given several times

    @property
    def dest(self) -> str:
        return self.name.replace("-", "_")


OPTIONS: tuple[OptionDef, ...] = (
    OptionDef("models", "comma-separated zoo model names (default: all; with --quick: models tagged quick)",
              "NAMES"),
    OptionDef("model", "a model file to add to the matrix, e.g. path/to/model.onnx (repeatable; combines with "
                       "--models; alone, only these files run)", "PATH", multiple=True),
    OptionDef("runtimes", "comma-separated runtime names (default: all registered; with --quick: "
                          "torch-cpu,ort-cpu)", "NAMES"),
    OptionDef("precisions", "comma-separated precisions: fp32, fp16, bf16, int8 (default: fp32)", "NAMES"),
    OptionDef("batch-sizes", "comma-separated batch sizes (default: 1,8; with --quick: 1,4)", "INTS"),
    OptionDef("seq-lens", "comma-separated sequence lengths for text models, ignored by models without a "
                          "sequence axis (default: 128; with --quick: 32)", "INTS"),
    OptionDef("min-time", "minimum measured seconds per case (default: 1.0; with --quick: 0.5)", "SECONDS"),
    OptionDef("min-iters", "minimum measured iterations per case (default: 20; with --quick: 10)", "N"),
    OptionDef("warmup", "warm-up iterations before measuring, at least 0.2 s in all (default: 5)", "N"),
    OptionDef("threads", "intra-op threads for every runtime (default: the CPUs this process may use)", "N"),
    OptionDef("seed", "seed of the input feeds, identical for every runtime (default: 0)", "N"),
    OptionDef("out", "output folder (default: reports/YYYYmmdd-HHMMSS, with reports/latest pointing at it)",
              "DIR"),
    OptionDef("quick", "a small default matrix for a smoke run", flag=True),
    OptionDef("no-isolation", "run cases in the harness's own process (debugging: a crash ends the run)",
              flag=True),
    OptionDef("case-timeout", "wall-clock limit per case in seconds, covering load/compile, warm-up and "
                              "measurement (default: 600)", "SECONDS"),
    OptionDef("case-memory", "address-space cap per worker in GiB (default: half the machine's memory)", "GB"),
    OptionDef("cache-dir", "artifact cache (default: $HARNESS_CACHE_DIR or ~/.cache/harness)", "DIR"),
    OptionDef("exporter", "torch.onnx exporter for zoo models: dynamo (default) or legacy", "NAME"),
    OptionDef("noise-cv", "flag a measurement as noisy above this coefficient of variation (default: 0.10)",
              "FLOAT"),
    OptionDef("compile-mode", "torch.compile mode for the torch-compile-* runtimes: default, reduce-overhead, "
                              "max-autotune or max-autotune-no-cudagraphs (default: default)", "MODE"),
)
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
OPTION_NAMES = tuple(o.name for o in OPTIONS)


def default_case_memory_gb() -> float:
    import psutil

    return round(psutil.virtual_memory().total / 2**30 * 0.5, 1)


@dataclass(frozen=True)
class RunConfig:
    """A validated matrix and measurement policy. Frozen, picklable, no side effects."""

    models: tuple[str, ...]
    runtimes: tuple[str, ...]
    precisions: tuple[Precision, ...]
    batch_sizes: tuple[int, ...]
    seq_lens: tuple[int, ...]
    timing: TimingPolicy
    threads: int
    seed: int
    out_dir: Path
    quick: bool = False
    isolation: bool = True
    case_timeout_s: float = 600.0
    case_memory_gb: float = 8.0
    cache_dir: Path = field(default_factory=default_cache_dir)
    exporter: str = "dynamo"
    noise_cv: float = DEFAULT_NOISE_CV
    run_id: str = ""
    user_models: tuple[str, ...] = ()  # --model files (absolute paths), registered in every worker
    compile_mode: str = "default"

    def cases(self) -> list[CaseId]:
        """The matrix in execution order: cases sharing a runtime activation are adjacent."""
        from harness.model import get_model
        from harness.runtimes import get_runtime

        out = []
        for m in self.models:
            spec = get_model(m)
            for r in self.runtimes:
                device = get_runtime(r).device
                for p in self.precisions:
                    for b in self.batch_sizes:
                        for s in (self.seq_lens if spec.has_seq else (None,)):
                            out.append(CaseId(m, r, p.value, b, s, device))
        return out

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["precisions"] = [p.value for p in self.precisions]
        d["out_dir"] = str(self.out_dir)
        d["cache_dir"] = str(self.cache_dir)
        return d

    @classmethod
    def from_options(cls, raw: Mapping[str, Any]) -> "RunConfig":
        """Parse raw option values (strings, None when not given; keys are OptionDef.dest)."""
        from harness.model import all_models, get_model
        from harness.runtimes import get_runtime, runtime_names

        from harness.model_files import register_user_model

        quick = bool(raw.get("quick"))
        user_paths = tuple(str(Path(p).absolute()) for p in (raw.get("model") or ()))
        user_names = tuple(register_user_model(p) for p in user_paths)
        if raw.get("models"):
            models = _names(raw["models"], "models")
            for m in models:
                get_model(m)
        elif user_names:
            models = ()
        else:
            specs = all_models()
            models = tuple(s.name for s in specs if (not quick or QUICK_TAG in s.tags) and "user" not in s.tags)
        models = tuple(dict.fromkeys(models + user_names))
        if raw.get("runtimes"):
            runtimes = _names(raw["runtimes"], "runtimes")
            for r in runtimes:
                get_runtime(r)
        else:
            runtimes = ("torch-cpu", "ort-cpu") if quick else tuple(runtime_names())
        try:
            precisions = tuple(Precision.parse(p) for p in _names(raw.get("precisions") or "fp32", "precisions"))
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        batch_sizes = _ints(raw.get("batch_sizes") or ("1,4" if quick else "1,8"), "batch-sizes")
        seq_lens = _ints(raw.get("seq_lens") or ("32" if quick else "128"), "seq-lens")
        timing = TimingPolicy(
            warmup_iters=_int(raw.get("warmup"), 5, "warmup", minimum=0),
            min_iters=_int(raw.get("min_iters"), 10 if quick else 20, "min-iters", minimum=1),
            min_time_s=_float(raw.get("min_time"), 0.5 if quick else 1.0, "min-time", minimum=0.0),
        )
        run_id = time.strftime("%Y%m%d-%H%M%S")
        out_dir = Path(raw["out"]) if raw.get("out") else Path("reports") / run_id
        exporter = raw.get("exporter") or "dynamo"
        if exporter not in ("dynamo", "legacy"):
            raise UsageError(f"--exporter {exporter!r}: valid exporters: dynamo, legacy")
        compile_mode = raw.get("compile_mode") or "default"
        if compile_mode not in COMPILE_MODES:
            raise UsageError(f"--compile-mode {compile_mode!r}: valid modes: {', '.join(COMPILE_MODES)}")
        return cls(
            models=models, runtimes=runtimes, precisions=precisions, batch_sizes=batch_sizes,
            seq_lens=seq_lens, timing=timing,
            threads=_int(raw.get("threads"), default_threads(), "threads", minimum=1),
            seed=_int(raw.get("seed"), 0, "seed", minimum=0),
            out_dir=out_dir, quick=quick, isolation=not raw.get("no_isolation"),
            case_timeout_s=_float(raw.get("case_timeout"), 600.0, "case-timeout", minimum=0.001),
            case_memory_gb=_float(raw.get("case_memory"), None, "case-memory", minimum=0.01)
            or default_case_memory_gb(),
            cache_dir=Path(raw["cache_dir"]).expanduser() if raw.get("cache_dir") else default_cache_dir(),
            exporter=exporter,
            noise_cv=_float(raw.get("noise_cv"), DEFAULT_NOISE_CV, "noise-cv", minimum=0.0),
            run_id=run_id, user_models=user_paths,
            compile_mode=compile_mode,
        )


def _names(text: str, what: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(n.strip() for n in str(text).split(",") if n.strip()))
    if not names:
        raise UsageError(f"--{what}: empty list")
    return names


def _ints(text: str, what: str) -> tuple[int, ...]:
    out = []
    for part in _names(text, what):
        try:
            v = int(part)
        except ValueError:
            raise UsageError(f"--{what}: {part!r} is not an integer") from None
        if v <= 0:
            raise UsageError(f"--{what}: {v} is not a positive size (a shape dimension must be >= 1)")
        out.append(v)
    return tuple(out)


def _int(text: Any, default: int, what: str, minimum: int) -> int:
    if text is None or text == "":
        return default
    try:
        v = int(text)
    except (TypeError, ValueError):
        raise UsageError(f"--{what}: {text!r} is not an integer") from None
    if v < minimum:
        raise UsageError(f"--{what}: {v} is below the minimum {minimum}")
    return v


def _float(text: Any, default: float | None, what: str, minimum: float) -> float | None:
    if text is None or text == "":
        return default
    try:
        v = float(text)
    except (TypeError, ValueError):
        raise UsageError(f"--{what}: {text!r} is not a number") from None
    if not v >= minimum:
        raise UsageError(f"--{what}: {v} is below the minimum {minimum}")
    return v
