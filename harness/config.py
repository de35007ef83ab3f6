"""Run options, defined once for the CLI and the pytest plugin, and the validated, frozen RunConfig."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.artifacts.cache import default_cache_dir
from harness.errors import UsageError
from harness.measure.stats import DEFAULT_NOISE_CV
from harness.measure.timer import TimingPolicy
from harness.artifacts.int8 import CALIBRATION_METHODS, INT8_METHODS
from harness.precision import Precision, Tolerance, parse_tolerance_overrides
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

    @property
    def argparse_help(self) -> str:
        """The help text escaped for argparse (and so pytest), which %-formats it."""
        return self.help.replace("%", "%%")


OPTIONS: tuple[OptionDef, ...] = (
    OptionDef("models", "comma-separated zoo model names (default: all; with --quick: models tagged quick)",
              "NAMES"),
    OptionDef("model", "a user model to add to the matrix: path/to/model.onnx or package.module:factory "
                       "(repeatable; combines with --models; alone, only these models run)", "PATH",
              multiple=True),
    OptionDef("shape", "sizes for symbolic dimensions of --model ONNX files other than batch/seq, by name or "
                       "INPUT:AXIS, e.g. height=224,width=224", "NAME=DIM,..."),
    OptionDef("runtimes", "comma-separated runtime names (default: every runtime that can run on this machine, "
                          "see `harness runtimes`; with --quick: torch-cpu,ort-cpu)", "NAMES"),
    OptionDef("precisions", "comma-separated precisions: fp32, fp16, bf16, int8 (default: fp32)", "NAMES"),
    OptionDef("batch-sizes", "comma-separated batch sizes (default: 1,8; with --quick: 1,4)", "INTS"),
    OptionDef("seq-lens", "comma-separated sequence lengths for text models, ignored by models without a "
                          "sequence axis (default: 128; with --quick: 32)", "INTS"),
    OptionDef("min-time", "minimum measured seconds per case (default: 1.0; with --quick: 0.5)", "SECONDS"),
    OptionDef("min-iters", "minimum measured iterations per case (default: 20; with --quick: 10)", "N"),
    OptionDef("warmup", "warm-up iterations before measuring, at least 0.2 s in all (default: 5)", "N"),
    OptionDef("repeats", "measure each case in N blocks, each after a fresh activation (session, thread pool, "
                         "buffers): the first when the case runs, the others in rounds over the whole matrix at the "
                         "end (runtimes whose activation is a compile: all N back to back); the gate reads each "
                         "case in its least-disturbed block (default: 3)", "N"),
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
    OptionDef("noise-cv", "flag a measurement as noisy above this robust coefficient of variation, 1.4826 x "
                          "MAD / median (default: 0.10)",
              "FLOAT"),
    OptionDef("int8-method", "INT8 recipe of ONNX runtimes: static (QDQ, calibrated), dynamic, or auto (default: "
                             "dynamic for MatMul graphs without Conv and without calibration data, else static)",
              "NAME"),
    OptionDef("calibration-method", "activation calibration of static INT8: minmax (default), entropy, percentile",
              "NAME"),
    OptionDef("tolerance", "override drift tolerances, e.g. fp16.max_rel_l2=0.05,int8.min_cosine=0.98 (bounds: "
                           "atol, rtol, max_rel_l2, min_cosine, min_top1)", "P.BOUND=V,..."),
    OptionDef("localize", "localise drift layer by layer for every ONNX low-precision case, not only for cases "
                          "that fail their tolerance", flag=True),
    OptionDef("baseline", "compare the run with this baseline (a stored name or a results.json path) and gate "
                          "on it: verdicts.md beside the results, exit status 1 on a regression", "NAME|PATH"),
    OptionDef("gate", "a regression gate STAT:PERCENT, e.g. median:10% or p99:20% (repeatable; default "
                      "median:10%)", "SPEC", multiple=True),
    OptionDef("gate-config", "TOML file with gates, per-model overrides and the confidence level", "FILE"),
    OptionDef("confirm", "with --baseline: measure each case judged regressed on latency N more blocks (fresh "
                         "activations) and judge again, so only a slowdown that reproduces fails the run; 0 turns "
                         "it off (default: 2)", "N"),
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
    int8_method: str = "auto"
    calibration_method: str = "minmax"
    tolerance_overrides: dict[str, dict[str, float]] = field(default_factory=dict)  # {"fp16": {"max_rel_l2": .05}}
    localize: bool = False

    shapes: tuple[tuple[str, int], ...] = ()  # --shape NAME=DIM for user ONNX files
    baseline: str | None = None  # --baseline: resolved path of the baseline results
    gates: tuple[str, ...] = ()  # --gate strings, validated
    gate_config: str | None = None  # --gate-config file (absolute path)
    compile_mode: str = "default"  # --compile-mode for the torch-compile-* runtimes
    repeats: int = 3  # --repeats: measurement blocks per case
    confirm: int = 2  # --confirm: more blocks for cases the gate judged regressed, then judged again

    def tolerance_override(self, precision: Precision | str) -> Tolerance | None:
        """The --tolerance bounds given for `precision` (None when none were)."""
        bounds = self.tolerance_overrides.get(str(Precision(precision)))
        return Tolerance(**bounds) if bounds else None

    def cases(self) -> list[CaseId]:
        """The matrix in execution order: cases sharing a runtime activation are adjacent."""
        from harness.model import get_model
        from harness.plugins import load_plugins
        from harness.runtimes import get_runtime

        load_plugins()
        out = []
        for m in self.models:
            spec = get_model(m)
            for r in self.runtimes:
                cls = get_runtime(r)
                device = cls.device
                # a runtime may run a requested precision as another (torch-cpu: fp16 -> bf16); once each
                for p in dict.fromkeys(cls.case_precision(p) for p in self.precisions):
                    for b in spec.batch_sizes(self.batch_sizes):
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
        from harness.plugins import load_plugins
        from harness.runtimes import get_runtime

        from harness.model_files import (check_shape_names, is_factory_ref, normalize_user_model, parse_shapes,
                                         register_user_model)

        load_plugins()  # the zoo and user models/runtimes, before any name is resolved
        quick = bool(raw.get("quick"))
        for ref in raw.get("model") or ():
            if not is_factory_ref(ref) and not os.path.lexists(ref):
                raise UsageError(f"--model {ref}: no such file (expected path/to/model.onnx or "
                                 "package.module:factory)")
        user_paths = tuple(normalize_user_model(p) for p in (raw.get("model") or ()))
        shapes = parse_shapes(raw.get("shape"))
        if shapes and not user_paths:
            raise UsageError("--shape sizes dimensions of --model ONNX files; no --model was given")
        user_names = tuple(register_user_model(p, shapes) for p in user_paths)
        check_shape_names(shapes, (get_model(n) for n in user_names if "onnx" in get_model(n).tags))
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
            runtimes = ("torch-cpu", "ort-cpu") if quick else available_runtimes()
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
        check_out_dir(out_dir)
        exporter = raw.get("exporter") or "dynamo"
        if exporter not in ("dynamo", "legacy"):
            raise UsageError(f"--exporter {exporter!r}: valid exporters: dynamo, legacy")
        int8_method = (raw.get("int8_method") or "auto").strip().lower()
        if int8_method not in INT8_METHODS:
            raise UsageError(f"--int8-method {int8_method!r}: valid methods: {', '.join(INT8_METHODS)}")
        calibration_method = (raw.get("calibration_method") or "minmax").strip().lower()
        if calibration_method not in CALIBRATION_METHODS:
            raise UsageError(f"--calibration-method {calibration_method!r}: valid methods: "
                             f"{', '.join(CALIBRATION_METHODS)}")
        overrides: dict[str, dict[str, float]] = {}
        if raw.get("tolerance"):
            try:
                parsed = parse_tolerance_overrides(raw["tolerance"])
            except ValueError as exc:
                raise UsageError(f"--tolerance: {exc}") from None
            overrides = {p.value: {k: v for k, v in t.as_dict().items() if v is not None} for p, t in parsed.items()}
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
            int8_method=int8_method, calibration_method=calibration_method, tolerance_overrides=overrides,
            localize=bool(raw.get("localize")), shapes=shapes, **_gating_options(raw),
            compile_mode=compile_mode, repeats=_int(raw.get("repeats"), 3, "repeats", minimum=1),
            confirm=_int(raw.get("confirm"), 2, "confirm", minimum=0),
        )


def available_runtimes() -> tuple[str, ...]:
    """The default runtime set: every registered runtime that can run on this machine (availability probes)."""
    from harness.plugins import load_plugins
    from harness.runtimes import get_runtime, runtime_names

    load_plugins()
    return tuple(r for r in runtime_names() if get_runtime(r).availability())


def check_out_dir(out_dir: Path) -> None:
    """A usage error, before anything runs, when `out_dir` cannot be a writable folder (creates nothing)."""
    p = Path(out_dir).absolute()
    probe = p
    while not probe.exists() and probe != probe.parent:
        if probe.is_symlink():  # a dangling link
            raise UsageError(f"--out {out_dir}: {probe} is a broken symbolic link")
        probe = probe.parent
    if not probe.is_dir():
        what = "is a file" if probe == p else f"cannot be created: {probe} is a file, not a folder"
        raise UsageError(f"--out {out_dir}: {what}")
    if not os.access(probe, os.W_OK | os.X_OK):
        what = "is not writable" if probe == p else f"cannot be created: {probe} is not writable"
        raise UsageError(f"--out {out_dir}: {what}")


def _gating_options(raw: Mapping[str, Any]) -> dict[str, Any]:
    """--baseline / --gate / --gate-config, checked before the run starts (a bad baseline is a usage error)."""
    from harness.errors import ResultsError
    from harness.gating.baseline import load_baseline, resolve_baseline
    from harness.gating.gates import load_gate_config

    gates = tuple(raw.get("gate") or ())
    gate_config = str(Path(raw["gate_config"]).absolute()) if raw.get("gate_config") else None
    load_gate_config(gate_config, gates)
    baseline = None
    if raw.get("baseline"):
        try:
            path = resolve_baseline(raw["baseline"])
            load_baseline(path)
        except ResultsError as exc:
            raise UsageError(f"--baseline: {exc}") from None
        baseline = str(path.absolute())
    elif gates or gate_config:
        raise UsageError("--gate / --gate-config need --baseline NAME|PATH to compare with")
    return {"baseline": baseline, "gates": gates, "gate_config": gate_config}


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
