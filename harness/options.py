"""Run options as strings (`harness run --NAME`, pytest `--harness-NAME`) parsed into the typed RunConfig, in one place."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.artifacts.int8 import CALIBRATION_METHODS, INT8_METHODS
from harness.config import COMPILE_MODES, EXPORTERS, QUICK_TAG, BatcherPolicy, RunConfig, section_of
from harness.errors import UsageError
from harness.measure.memory import default_case_memory_gb
from harness.measure.timer import TimingPolicy
from harness.precision import Precision, parse_tolerance_overrides

Parser = Callable[[Any, str], Any]  # (raw value, option name) -> typed value; UsageError when invalid


# ------------------------------------------------------------------ value parsers
def names(text: Any, what: str) -> tuple[str, ...]:
    out = tuple(dict.fromkeys(n.strip() for n in str(text).split(",") if n.strip()))
    if not out:
        raise UsageError(f"--{what}: empty list")
    return out


MAX_DIM = 1 << 20  # a batch size or sequence length
MAX_THREADS = 4096  # more than any machine's cores: a thread pool that large only waits


def positive_ints(text: Any, what: str) -> tuple[int, ...]:
    out = []
    for part in names(text, what):
        try:
            v = int(part)
        except ValueError:
            raise UsageError(f"--{what}: {part!r} is not an integer") from None
        if v <= 0:
            raise UsageError(f"--{what}: {v} is not a positive size (a shape dimension must be >= 1)")
        if v > MAX_DIM:
            raise UsageError(f"--{what}: {v} is above the maximum {MAX_DIM} (a feed of that many rows or positions "
                             "would not fit in memory; a case is sized for one machine)")
        out.append(v)
    return tuple(out)


def at_least(minimum: float, kind: type = float, maximum: float | None = None, why: str = "") -> Parser:
    """A finite number of `kind` (int or float) not below `minimum` and, when given, not above `maximum` (`why`:
    what a larger value would cost). NaN and the infinities are refused alike, and so are integers spelt as
    floats (1e9 for a count)."""
    noun = "an integer" if kind is int else "a number"

    def parse(text: Any, what: str) -> Any:
        try:
            v = kind(text)
        except (TypeError, ValueError, OverflowError):
            raise UsageError(f"--{what}: {text!r} is not {noun}") from None
        if kind is float and not math.isfinite(v):
            raise UsageError(f"--{what}: {text!r} is not a finite number")
        if not v >= minimum:
            raise UsageError(f"--{what}: {v} is below the minimum {minimum}")
        if maximum is not None and v > maximum:
            shown = v if kind is int else f"{v:g}"
            raise UsageError(f"--{what}: {shown} is above the maximum {maximum:g}{f' ({why})' if why else ''}")
        return v
    parse.bounds = (minimum, maximum)  # type: ignore[attr-defined]  # a number option (tests find them by it)
    return parse


def int_at_least(minimum: int, maximum: int | None = None, why: str = "") -> Parser:
    return at_least(minimum, int, maximum, why)


def float_at_least(minimum: float, maximum: float | None = None, why: str = "") -> Parser:
    return at_least(minimum, float, maximum, why)


def fraction(text: Any, what: str) -> float:
    """A number in [0, 1]."""
    v = float_at_least(0.0)(text, what)
    if v > 1.0:
        raise UsageError(f"--{what}: {v:g} is not a fraction in [0, 1]")
    return v


fraction.bounds = (0.0, 1.0)  # type: ignore[attr-defined]


def slowdown(text: Any, what: str) -> float:
    """A slowdown to detect: a percentage ("5%") or a fraction ("0.05"), above 0 and under 1."""
    s = str(text).strip()
    pct = s.endswith("%")
    try:
        v = float(s[:-1] if pct else s) / (100.0 if pct else 1.0)
    except ValueError:
        raise UsageError(f"--{what}: {text!r} is not a slowdown such as 5% or 0.05") from None
    if not math.isfinite(v):
        raise UsageError(f"--{what}: {text!r} is not a finite number")
    if not 0.0 < v < 1.0:
        raise UsageError(f"--{what}: {text!r}: a slowdown to detect lies between 0 and 100% (e.g. 5%)")
    return v


slowdown.bounds = (0.0, 1.0)  # type: ignore[attr-defined]


def choice(valid: tuple[str, ...], noun: str, fold: bool = False) -> Parser:
    """One of `valid`; `fold`: spaces stripped and lower-cased first."""
    def parse(text: Any, what: str) -> str:
        v = str(text).strip().lower() if fold else str(text)
        if v not in valid:
            raise UsageError(f"--{what} {v!r}: valid {noun}: {', '.join(valid)}")
        return v
    return parse


def precisions(text: Any, what: str) -> tuple[Precision, ...]:
    try:
        return tuple(Precision.parse(p) for p in names(text, what))
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def variants(text: Any, what: str) -> tuple[str | None, ...]:
    from harness.variants import parse_variants

    try:
        return parse_variants(str(text))
    except UsageError as exc:
        raise UsageError(f"--{what}: {exc}") from None


def ab_side(text: Any, what: str) -> str:
    """An A/B side: `base`, a variant spelling (canonical name) or a --model file (`model:NAME`)."""
    from harness.model_files import is_factory_ref, user_model_name
    from harness.variants import parse_variant

    t = str(text).strip()
    if t.endswith(".onnx") or os.path.sep in t or is_factory_ref(t):
        if not is_factory_ref(t) and not os.path.isfile(t):
            raise UsageError(f"--{what} {t}: no such model file")
        return f"model:{user_model_name(t)}"
    try:
        v = parse_variant(t)
    except UsageError as exc:
        raise UsageError(f"--{what}: {exc} (or give an .onnx model file)") from None
    return "base" if v is None else v.name


def tolerances(text: Any, what: str) -> dict[str, dict[str, float]]:
    try:
        parsed = parse_tolerance_overrides(text)
    except ValueError as exc:
        raise UsageError(f"--{what}: {exc}") from None
    return {p.value: {k: v for k, v in t.as_dict().items() if v is not None} for p, t in parsed.items()}


def scenario_names(text: Any, what: str) -> tuple[str, ...]:
    from harness.results.schema import SCENARIO_NAMES

    given = names(text, what)
    if given == ("all",):
        return SCENARIO_NAMES
    for n in given:
        if n not in SCENARIO_NAMES:
            raise UsageError(f"--{what} {n!r}: valid scenarios: {', '.join(SCENARIO_NAMES)}, or all")
    return given


MAX_BATCHER_BATCH = 1024  # --batcher max: the batcher binds one feed per batch size 1..max before the tests
MAX_BATCHER_WAIT_MS = 10_000.0


def batcher_policy(text: Any, what: str) -> BatcherPolicy:
    """`max=N,wait=MS`: the dynamic batcher's largest batch (1..1024 samples) and the longest the oldest queued
    sample waits (ms, 0..10000) before a batch that is not full goes out."""
    spelling = f"--{what} {str(text)!r}"
    values: dict[str, str] = {}
    for part in str(text).split(","):
        key, sep, value = part.strip().partition("=")
        if not sep or key not in ("max", "wait") or not value.strip():
            raise UsageError(f"{spelling}: expected max=N,wait=MS (e.g. max=8,wait=2), not {part.strip()!r}")
        if key in values:
            raise UsageError(f"{spelling}: {key} given twice")
        values[key] = value.strip()
    missing = [k for k in ("max", "wait") if k not in values]
    if missing:
        raise UsageError(f"{spelling}: {' and '.join(missing)} missing (e.g. max=8,wait=2)")
    try:
        max_batch = int(values["max"])
    except ValueError:
        raise UsageError(f"{spelling}: max {values['max']!r} is not a whole number of samples") from None
    try:
        wait = float(values["wait"])
    except ValueError:
        raise UsageError(f"{spelling}: wait {values['wait']!r} is not a number of ms") from None
    if not 1 <= max_batch <= MAX_BATCHER_BATCH:
        raise UsageError(f"{spelling}: max {max_batch} is outside 1..{MAX_BATCHER_BATCH}")
    if not 0.0 <= wait <= MAX_BATCHER_WAIT_MS:  # also refuses nan and inf
        raise UsageError(f"{spelling}: wait {values['wait']} ms is outside 0..{MAX_BATCHER_WAIT_MS:g}")
    return BatcherPolicy(max_batch, wait)


def feeds_file(text: Any, what: str) -> str:
    from harness.feeds import load_feeds

    path = Path(str(text)).expanduser().absolute()
    load_feeds(path)  # a file nothing can read is a usage error before the run starts
    return str(path)


def overrides(ranged: bool) -> Parser:
    def parse(text: Any, what: str) -> tuple[Any, ...]:
        from harness.feeds import parse_overrides

        return parse_overrides(text, what, ranged)
    return parse


def folder(text: Any, what: str) -> Path:
    return Path(text).expanduser()


def history_db(text: Any, what: str) -> str:
    """--history [URL]: a SQLAlchemy URL or SQLite file; alone, $HARNESS_HISTORY or the default database.

    Opened (created and migrated when new) and probed for a write before the run starts: a URL that cannot be
    reached or written is a usage error now, not a note after the whole run.
    """
    from harness.history.store import HistoryError, history_url, open_history

    url = history_url(str(text) or None)
    try:
        history = open_history(url)
        try:
            history.check_writable()
        finally:
            history.close()
    except HistoryError as exc:
        raise UsageError(f"--{what}: {exc}") from None
    return url


def placement_rules(text: Any, what: str) -> tuple[tuple[str, str], ...]:
    """`GLOB=RESOURCE,...` (e.g. `ort-cuda*=GPU`): runtimes matching GLOB run on Ray nodes having RESOURCE."""
    rules = []
    for part in (p.strip() for p in str(text).split(",")):
        glob, sep, resource = part.partition("=")
        if not sep or not glob.strip() or not resource.strip():
            raise UsageError(f"--{what} {part!r}: expected RUNTIME-GLOB=RESOURCE, e.g. ort-cuda*=GPU")
        rules.append((glob.strip(), resource.strip()))
    return tuple(rules)


def wheel_folder(text: Any, what: str) -> str:
    """An existing folder of wheels (absolute): runtime environments are built from it alone."""
    p = Path(text).expanduser().absolute()
    if not p.is_dir():
        raise UsageError(f"--{what} {text}: not a folder (expected a folder of .whl files)")
    return str(p)


def workload_name(text: Any, what: str) -> str:
    from harness.workloads import workload_names

    return choice(workload_names(), "workloads")(text, what)


def pattern_list(text: Any, what: str) -> tuple[str, ...]:
    """A repeatable option's values, each comma-separated: one tuple of stripped, non-empty items."""
    items = text if isinstance(text, (list, tuple)) else [text]
    return tuple(dict.fromkeys(x.strip() for t in items for x in str(t).split(",") if x.strip()))


def switch(on: Any) -> Callable[[Any, str], Any]:
    """A flag's value when given (`--no-isolation` sets isolation=False)."""
    return lambda _text, _what: on


# ------------------------------------------------------------------ option groups, one per concern
@dataclass(frozen=True)
class OptionDef:
    """One run option: the CLI spells it `--NAME`, pytest `--harness-NAME`.

    `field`: the RunConfig field it sets, by name (RunConfig.replace routes it to its section; "timing.X": a
    TimingPolicy field); `parse(text, name)`: its value, or a UsageError; `quick`: the text used with --quick when
    the option is not given; `default`: the text used when it is not given (a command's own default; None: the
    RunConfig's). An option without `field` is read by parse_run_options itself (the matrix, --out, --opset and
    the gating options)."""

    name: str
    help: str
    metavar: str | None = None
    flag: bool = False  # a switch without a value
    multiple: bool = False  # may be given several times
    bare: str | None = None  # the value when the option is given without one (`--history` alone); None: required
    field: str | None = None
    parse: Parser | None = None
    quick: str | None = None
    default: str | None = None
    short: str | None = None  # a one-letter CLI alias (`-k`), never for pytest

    @property
    def dest(self) -> str:
        return self.name.replace("-", "_")

    @property
    def argparse_help(self) -> str:
        """The help text escaped for argparse (and so pytest), which %-formats it."""
        return self.help.replace("%", "%%")


@dataclass(frozen=True)
class OptionGroup:
    """The options of one concern (Polygraphy's argument groups): each command and the pytest plugin compose
    the groups they need; `with_defaults` gives a command its own defaults without a copy of the options."""

    name: str
    title: str
    options: tuple[OptionDef, ...]

    def with_defaults(self, **texts: str) -> OptionGroup:
        """The group with other default texts (by option dest), e.g. gate-check's models="mlp"."""
        unknown = set(texts) - {o.dest for o in self.options}
        assert not unknown, f"{self.name}: no options {unknown}"
        return dataclasses.replace(self, options=tuple(
            dataclasses.replace(o, default=texts[o.dest]) if o.dest in texts else o for o in self.options))

    def only(self, *names: str) -> OptionGroup:
        """The group with only these options (by dest), e.g. a command that needs the threads but no timing."""
        return dataclasses.replace(self, options=tuple(o for o in self.options if o.dest in names))


MODELS = OptionGroup("models", "models and shapes", (
    OptionDef("models", "comma-separated zoo model names (default: all; with --quick: models tagged quick)",
              "NAMES"),
    OptionDef("model", "a user model to add to the matrix: path/to/model.onnx or package.module:factory "
                       "(repeatable; combines with --models; alone, only these models run)", "PATH",
              multiple=True),
    OptionDef("shape", "sizes for free dimensions of --model ONNX files other than batch/seq, by name or "
                       "INPUT:AXIS, e.g. height=224,width=224", "NAME=DIM,..."),
    OptionDef("batch-sizes", "comma-separated batch sizes (default: 1,8; with --quick: 1,4)", "INTS",
              field="batch_sizes", parse=positive_ints, quick="1,4"),
    OptionDef("seq-lens", "comma-separated sequence lengths for text models, ignored by models without a "
                          "sequence axis (default: 128; with --quick: 32)", "INTS",
              field="seq_lens", parse=positive_ints, quick="32"),
    OptionDef("quick", "a small default matrix for a smoke run", flag=True, field="quick", parse=switch(True)),
))
RUNTIMES = OptionGroup("runtimes", "runtimes and precisions", (
    OptionDef("runtimes", "comma-separated runtime names (default: every runtime that can run on this machine, "
                          "see `harness runtimes`; with --quick: torch-cpu,ort-cpu)", "NAMES"),
    OptionDef("precisions", "comma-separated precisions: fp32, fp16, bf16, int8 (default: fp32)", "NAMES",
              field="precisions", parse=precisions),
    OptionDef("variants", "comma-separated deployment variants, each KIND=VALUE or several joined by +, `base` for "
                          "none, e.g. base,opt=basic,int8=dynamic+weights=per-tensor (default: base; `harness "
                          "variants` lists the kinds); a case of a runtime that cannot take a variant is skipped "
                          "with the reason", "SPELLINGS", field="variants", parse=variants),
))
TIMING = OptionGroup("timing", "timing", (
    OptionDef("min-time", "minimum measured seconds per case (default: 1.0; with --quick: 0.5)", "SECONDS",
              field="timing.min_time_s", parse=float_at_least(0.0), quick="0.5"),
    OptionDef("min-iters", "minimum measured iterations per case (default: 20; with --quick: 10)", "N",
              field="timing.min_iters", parse=int_at_least(1), quick="10"),
    OptionDef("warmup", "warm-up iterations before measuring, at least 0.2 s in all (default: 5)", "N",
              field="timing.warmup_iters", parse=int_at_least(0)),
    OptionDef("repeats", "measure each case in N blocks, each after a fresh activation (session, thread pool, "
                         "buffers): the first when the case runs, the others in rounds over the whole matrix at the "
                         "end (runtimes whose activation is a compile: all N back to back); the gate reads each "
                         "case in its least-disturbed block (default: 3)", "N",
              field="repeats", parse=int_at_least(1)),
    OptionDef("noise-cv", "flag a measurement as noisy above this robust coefficient of variation, 1.4826 x "
                          "MAD / median (default: 0.10)", "FLOAT",
              field="noise_cv", parse=float_at_least(0.0)),
    OptionDef("contention-limit", "call a measurement block contended (and its figures inconclusive for compare, "
                                  "gates and qualify) when the worker's threads waited this share of their "
                                  "runnable time for a CPU (default: 0.10, or $HARNESS_CONTENTION_LIMIT; 1: never); "
                                  "a block is contended too when the hypervisor stole 5% or more of the CPUs' time "
                                  "(steal, /proc/stat)",
              "FRACTION", field="contention_limit", parse=fraction),
    OptionDef("settle", "wait up to SECONDS for a quiet machine (as many cores free of other processes as the "
                        "case's threads) before each case, and re-measure a contended block once it is quiet "
                        "again, keeping the contended one in the case's details (default: 0, off)", "SECONDS",
              field="settle_s", parse=float_at_least(0.0)),
    OptionDef("profile", "after each case's timed loop (never inside it), a profiled pass under the runtime's own "
                         "profiler: time per layer of the ONNX graph (fused kernels credited to the nodes they "
                         "cover), FLOPs and bytes, achieved GFLOP/s and GB/s and the percent of this machine's "
                         "measured roofline; a runtime without a profiler says why (docs/profile.md)",
              flag=True, field="profile", parse=switch(True)),
))
PROCESS = OptionGroup("process", "threads, isolation and limits", (
    OptionDef("threads", "intra-op threads for every runtime (default: the CPUs this process may use)", "N",
              field="threads", parse=int_at_least(1, MAX_THREADS, "more threads than any machine has cores")),
    OptionDef("no-isolation", "run cases in the harness's own process (debugging: a crash ends the run)",
              flag=True, field="isolation", parse=switch(False)),
    OptionDef("case-timeout", "wall-clock limit per case in seconds, covering load/compile, warm-up and "
                              "measurement (default: 600)", "SECONDS",
              field="case_timeout_s", parse=float_at_least(0.001)),
    OptionDef("case-memory", "address-space cap per worker in GiB (default: half the machine's memory)", "GB",
              field="case_memory_gb", parse=float_at_least(0.01)),
    OptionDef("envs", "runtime environments: `auto` runs a runtime whose packages this environment lacks, a "
                      "pinned NAME@VERSION and ort-openvino in a virtual environment of its own, built on first "
                      "use into the cache and reused (`harness envs`); `off`: never (such cases are skipped) "
                      "(default: auto)", "auto|off", field="envs", parse=choice(("auto", "off"), "modes")),
    OptionDef("env-wheels", "build runtime environments from this folder of wheels only (offline machines: pip "
                            "--no-index --find-links DIR)", "DIR", field="env_wheels", parse=wheel_folder),
))
INPUTS = OptionGroup("inputs", "inputs", (
    OptionDef("seed", "seed of the input feeds, identical for every runtime (default: 0)", "N",
              field="seed", parse=int_at_least(0)),
    OptionDef("feeds", "real inputs for every model: an .npz keyed by input name (samples on axis 0; an array "
                       "'labels' adds task accuracy), or a folder of INPUT.npy files or of one-sample .npz files; "
                       "each case takes its batch from the first samples (repeated when fewer); drift uses the "
                       "same inputs (docs/inputs.md)", "NPZ|DIR", field="feeds", parse=feeds_file),
    OptionDef("input-value", "feed input NAME with the value V everywhere, e.g. sr=16000 (repeatable, "
                             "comma-separated)", "NAME=V", multiple=True, field="input_values",
              parse=overrides(False)),
    OptionDef("input-range", "feed input NAME from [LO, HI): integers uniform in LO..HI-1, floats uniform, e.g. "
                             "token_type_ids=0:2 (repeatable, comma-separated)", "NAME=LO:HI", multiple=True,
              field="input_ranges", parse=overrides(True)),
))
BUILD = OptionGroup("build", "artifacts and recipes", (
    OptionDef("cache-dir", "artifact cache (default: $HARNESS_CACHE_DIR or ~/.cache/harness)", "DIR",
              field="cache_dir", parse=folder),
    OptionDef("exporter", "torch.onnx exporter for zoo models: dynamo (default) or legacy", "NAME",
              field="exporter", parse=choice(EXPORTERS, "exporters")),
    OptionDef("int8-method", "INT8 recipe of ONNX runtimes: static (QDQ, calibrated), dynamic, or auto (default: "
                             "dynamic for MatMul graphs without Conv and without calibration data, else static)",
              "NAME", field="int8_method", parse=choice(INT8_METHODS, "methods", fold=True)),
    OptionDef("calibration-method", "activation calibration of static INT8: minmax (default), entropy, percentile",
              "NAME", field="calibration_method", parse=choice(tuple(CALIBRATION_METHODS), "methods", fold=True)),
    OptionDef("compile-mode", "torch.compile mode for the torch-compile-* runtimes: default, reduce-overhead, "
                              "max-autotune or max-autotune-no-cudagraphs (default: default)", "MODE",
              field="compile_mode", parse=choice(COMPILE_MODES, "modes")),
))
ACCURACY = OptionGroup("accuracy", "drift", (
    OptionDef("tolerance", "override drift tolerances, e.g. fp16.max_rel_l2=0.05,int8.min_cosine=0.98 (bounds: "
                           "atol, rtol, max_rel_l2, min_cosine, min_top1, floor)", "P.BOUND=V,...",
              field="tolerance_overrides", parse=tolerances),
    OptionDef("localize", "localise drift layer by layer for every ONNX low-precision case, not only for cases "
                          "that fail their tolerance", flag=True, field="localize", parse=switch(True)),
))
GATING = OptionGroup("gating", "gating against a baseline", (
    OptionDef("baseline", "compare the run with this baseline (a stored name or a results.json path) and gate "
                          "on it: verdicts.md beside the results, exit status 1 on a regression", "NAME|PATH"),
    OptionDef("gate", "a regression gate STAT:PERCENT, e.g. median:10% or p99:20% (repeatable; default "
                      "median:10%)", "SPEC", multiple=True),
    OptionDef("gate-config", "TOML file with gates, per-model overrides and the confidence level", "FILE"),
    OptionDef("confirm", "with --baseline: measure each case judged regressed on latency N more blocks (fresh "
                         "activations) and judge again, so only a slowdown that reproduces fails the run; 0 turns "
                         "it off (default: 2)", "N", field="confirm", parse=int_at_least(0)),
    OptionDef("allow-unjudged", "with --baseline (or --workload ab): exit 0 although a gated timing row (an A/B "
                                "case) was not judged (contended, too few samples or clean pairs, a changed "
                                "model); the last line still names them (default: such a run exits 3)", flag=True, field="allow_unjudged",
              parse=switch(True)),
))
WORKLOAD = OptionGroup("workload", "workload", (
    OptionDef("workload", "what a case measures: forward (one forward pass per call, default), generate (greedy "
                          "generation with the KV cache of causal LMs: TTFT, per-token decode, tokens/s, token "
                          "agreement; docs/generation.md) or conform (ONNX backend operator cases on every runtime "
                          "that runs an ONNX model; docs/conformance.md)", "NAME", field="workload",
              parse=workload_name),
))
AB_MAX_PAIRS, AB_MAX_BLOCK_S = 10_000, 60.0
AB = OptionGroup("ab", "A/B workload", (
    OptionDef("ab-a", "--workload ab: side A (the baseline): base, a variant spelling (e.g. opt=basic) or an .onnx "
                      "file also given with --model (default: base)", "SIDE", field="ab_a", parse=ab_side),
    OptionDef("ab-b", "--workload ab: side B (the candidate), as --ab-a (default: base)", "SIDE", field="ab_b",
              parse=ab_side),
    OptionDef("ab-pairs", "--workload ab: pairs of alternating blocks, AB or BA in a balanced random order "
                          "(default: 40)", "N", field="ab_pairs",
              parse=int_at_least(2, AB_MAX_PAIRS, "each pair is two blocks of --ab-block-time; a larger test "
                                                  "gains no power worth its hours")),
    OptionDef("ab-block-time", "--workload ab: measured seconds per block (default: 0.05; at least 5 calls)",
              "SECONDS",
              field="ab_block_time_s",
              parse=float_at_least(0.001, AB_MAX_BLOCK_S, "a block long enough to drift with the machine defeats "
                                                          "the pairing")),
    OptionDef("ab-min-effect", "--workload ab: a B/A change of this fraction or more whose interval excludes 1 is "
                               "regressed or improved; an interval within twice it either side of 1 is pass; "
                               "anything else noise (default: 0.02)", "FRACTION",
              field="ab_min_effect", parse=fraction),
    OptionDef("ab-confidence", "--workload ab: confidence of the interval on B/A (default: 0.99)", "FRACTION",
              field="ab_confidence", parse=fraction),
    OptionDef("ab-seed", "--workload ab: seed of the block order (default: 0)", "N", field="ab_seed",
              parse=int_at_least(0)),
    OptionDef("ab-activations", "--workload ab: activate each side this many times, anew every pairs/N pairs; "
                                "when the activations differ the verdict is judged on them, not on the pairs "
                                "(default: 4; 1: one activation per side)", "N", field="ab_activations",
              parse=int_at_least(1, 50, "an activation needs pairs of its own")),
    OptionDef("ab-budget", "--workload ab: seconds per case it may spend beyond the planned pairs to reach a "
                           "verdict: waiting for quiet cores after a contended pair, then more pairs in new "
                           "activations while the verdict is unjudged (default: 30; 0: the planned pairs only)",
              "SECONDS", field="ab_budget_s", parse=float_at_least(0.0, 3600.0, "an hour per case")),
    OptionDef("ab-detect", "--workload ab: the pair budget as a target: choose the pairs per case so that a "
                           "slowdown of this size (5% or 0.05) is judged regressed with 95% power, from the spread "
                           "of a 10-pair pilot, at most 200 pairs (replaces --ab-pairs; `harness ab --detect`)",
              "PERCENT", field="ab_detect", parse=slowdown),
))
GENERATION = OptionGroup("generation", "generation workload", (
    OptionDef("prompt-lens", "--workload generate: comma-separated prompt lengths in tokens (default: 128; with "
                             "--quick: 32)", "INTS", field="prompt_lens", parse=positive_ints, quick="32"),
    OptionDef("output-lens", "--workload generate: comma-separated numbers of tokens to generate per sequence "
                             "(default: 64; with --quick: 16)", "INTS", field="output_lens", parse=positive_ints,
              quick="16"),
))
CONFORMANCE = OptionGroup("conformance", "conformance workload (case filter)", (
    OptionDef("ops", "--workload conform: comma-separated operators (exact, any case), e.g. Conv,Softmax", "OPS",
              field="ops", parse=names),
    OptionDef("match", "--workload conform: test names containing PATTERN (a glob with * ? [): repeatable or "
                       "comma-separated", "PATTERN", multiple=True, field="keywords", parse=pattern_list,
              short="-k"),
    OptionDef("case", "--workload conform: one test by exact name (repeatable)", "NAME", multiple=True,
              field="names", parse=pattern_list),
    OptionDef("opset", "--workload conform: ai.onnx opset of the case's model: N, N:, :M or N:M", "BOUNDS"),
    OptionDef("no-expanded", "--workload conform: leave out the *_expanded (function body) cases", flag=True,
              field="expanded", parse=switch(False)),
    OptionDef("no-light", "--workload conform: leave out the light models (data/light)", flag=True,
              field="light", parse=switch(False)),
))
SCENARIOS = OptionGroup("scenarios", "LoadGen scenarios", (
    OptionDef("scenarios", "MLPerf LoadGen scenarios to run on every measured case after its timed loop: "
                           "single-stream (p90 latency), multi-stream (p99 per 8-sample query), server (Poisson "
                           "arrivals, p99 bound; searches the highest VALID QPS unless --server-qps) and offline "
                           "(samples/s), comma-separated, or all (default: none). See docs/scenarios.md", "NAMES",
              field="scenarios", parse=scenario_names),
    OptionDef("scenario-duration", "LoadGen min duration of each scenario test in seconds (default: 1.0; MLPerf "
                                   "submissions use 600)", "SECONDS",
              field="scenario_duration_s", parse=float_at_least(0.01)),
    OptionDef("scenario-queries", "LoadGen min query count of each scenario test (default: the fewest LoadGen's "
                                  "early stopping can accept: 64 single-stream, 662 multi-stream, 459 server, 1 "
                                  "offline)", "N", field="scenario_queries", parse=int_at_least(1)),
    OptionDef("server-qps", "a fixed Server target QPS (default: search for the highest VALID one); QPS x "
                            "--scenario-duration is at most 1e7 queries (LoadGen schedules them all up front)", "QPS",
              field="server_qps", parse=float_at_least(1e-3)),
    OptionDef("server-latency", "the Server p99 latency bound in ms (default: 5 x the p99 of the case's "
                                "single-stream test, at least 10 x its median call; the bound's basis is stored "
                                "and printed)", "MS",
              field="server_latency_ms", parse=float_at_least(1e-3)),
    OptionDef("server-tries", "LoadGen tests of the Server search, bisecting below the case's throughput "
                              "(default: 4)", "N", field="server_tries", parse=int_at_least(1)),
    OptionDef("batcher", "serve the Server and Offline scenarios through a dynamic batcher: queued samples go to "
                         "the runtime as one call of a batch-N feed when max are waiting or the oldest has waited "
                         "wait ms, whichever is first; its batch sizes and queue waits are stored with each test "
                         "(default: none: each call takes what is queued, up to the case's batch). A model with "
                         "a fixed batch cannot batch: those tests are skipped with the reason. See "
                         "docs/scenarios.md", "max=N,wait=MS", field="batcher", parse=batcher_policy),
))
OUTPUTS = OptionGroup("outputs", "outputs", (
    OptionDef("out", "output folder (default: reports/YYYYmmdd-HHMMSS, with reports/latest pointing at it)",
              "DIR"),
    OptionDef("history", "record the run in the history database as it finishes and add a trend section (p50 and "
                         "p99 over the recorded runs, change points marked) to the report: a SQLAlchemy URL or a "
                         "SQLite file; alone: $HARNESS_HISTORY, else history.db in the user data folder "
                         "(docs/history.md)", "[URL]", bare="", field="history", parse=history_db),
))
FLEET = OptionGroup("fleet", "Ray cluster", (
    OptionDef("ray", "shard the matrix over a Ray cluster's nodes (`auto`: the cluster this machine belongs to; "
                     "or HOST:PORT, ray://HOST:PORT), one shard per node under the harness's own isolation, every "
                     "node's run in OUT/NODE/ and one merged report (needs the [ray] extra; docs/fleet.md)",
              "ADDRESS|auto", field="ray", parse=lambda text, _what: str(text)),
    OptionDef("placement", "with --ray: which runtimes need which node resource, RUNTIME-GLOB=RESOURCE,... e.g. "
                           "ort-cuda*=GPU,tensorrt=accelerator_type:H100 (default: GPU for CUDA runtimes, else CPU)",
              "GLOB=RES,...", field="placement", parse=placement_rules),
))

# `harness run` and the pytest plugin: every group
RUN_GROUPS: tuple[OptionGroup, ...] = (MODELS, RUNTIMES, WORKLOAD, TIMING, PROCESS, INPUTS, BUILD, ACCURACY,
                                       SCENARIOS, GENERATION, CONFORMANCE, AB, GATING, OUTPUTS, FLEET)
OPTIONS: tuple[OptionDef, ...] = tuple(o for g in RUN_GROUPS for o in g.options)
OPTION_NAMES = tuple(o.name for o in OPTIONS)


def _check_groups() -> None:
    """Every option sets a RunConfig field (routed to its section) or is read by parse_run_options."""
    timing = {f.name for f in dataclasses.fields(TimingPolicy)}
    assert len(set(OPTION_NAMES)) == len(OPTION_NAMES), "an option in two groups"
    for o in OPTIONS:
        if o.field is not None:
            top, _, sub = o.field.partition(".")
            if sub:
                assert top == "timing" and sub in timing, o.field
            elif top != "workload":
                section_of(top)  # TypeError for a field no section declares
            assert o.parse is not None, o.name


_check_groups()


def add_options(add: Callable[..., Any], groups: tuple[OptionGroup, ...], prefix: str = "--") -> None:
    """Declare the groups' options through `add(group, *flags, **argparse_kwargs)` (argparse or pytest)."""
    for g in groups:
        for o in g.options:
            flags = [f"{prefix}{o.name}"] + ([o.short] if o.short and prefix == "--" else [])
            dest = o.dest if prefix == "--" else f"harness_{o.dest}"
            if o.flag:
                kw: dict[str, Any] = {"action": "store_true", "default": False}
            elif o.multiple:
                kw = {"action": "append", "default": None, "metavar": o.metavar}
            elif o.bare is not None:
                kw = {"nargs": "?", "const": o.bare, "default": None, "metavar": (o.metavar or "VALUE").strip("[]")}
            else:
                kw = {"default": None, "metavar": o.metavar}
            add(g, *flags, dest=dest, help=o.argparse_help, **kw)


# ------------------------------------------------------------------ strings -> RunConfig
def parse_run_options(raw: Mapping[str, Any], groups: tuple[OptionGroup, ...] = RUN_GROUPS,
                      out_prefix: str = "", workload: str | None = None) -> RunConfig:
    """Parse raw option values (strings, None when not given; keys are OptionDef.dest) of the options in `groups`
    into a RunConfig; an option not given takes its group's default text (a command's own), else the RunConfig's.

    What the type cannot default is decided here: the run id and output folder (the clock; `out_prefix` names
    the default folder, e.g. "conform-"), the case memory cap (half this machine's memory), the default runtimes
    (availability probes), --model files (checked and registered to build the matrix) and the gating files
    (read once, so a bad one is a usage error). `workload`: a command's own (`harness conform`)."""
    from harness.plugins import load_plugins

    load_plugins()  # the zoo and plugin models/runtimes, before any name is resolved
    present = {o.dest: o for g in groups for o in g.options}
    raw = {**{d: o.default for d, o in present.items() if o.default is not None and raw.get(d) in (None, False)},
           **{k: v for k, v in raw.items() if k in present and v not in (None, False)}}
    quick = bool(raw.get("quick"))
    values: dict[str, Any] = {}
    timing: dict[str, Any] = {}
    for o in present.values():
        if o.field is None:
            continue
        text = raw.get(o.dest)
        given = bool(text) if o.flag else text is not None and (text != "" or o.bare is not None)
        if not given and quick and o.quick is not None:
            text, given = o.quick, True
        if given:
            top, _, sub = o.field.partition(".")
            (timing if sub else values)[sub or top] = o.parse(text, o.name)  # type: ignore[misc]
    workload = workload or values.pop("workload", "forward")
    models, user_paths, shapes = _models(raw, quick, workload) if "models" in present else ((), (), ())
    run_id = time.strftime("%Y%m%d-%H%M%S")
    out_dir = Path(raw["out"]) if raw.get("out") else Path("reports") / f"{out_prefix}{run_id}"
    check_out_dir(out_dir)
    values.setdefault("case_memory_gb", default_case_memory_gb())
    _check_settle(values)
    values.update(_input_options(values, models, raw, workload))
    if "opset" in present:
        values["opset_min"], values["opset_max"] = opset_bounds(raw.get("opset"))
    if "gate" in present:
        values.update(_gating_options(raw))
    return RunConfig.build(workload, models=models, runtimes=_runtimes(raw, quick, workload), out_dir=out_dir,
                           run_id=run_id, timing=TimingPolicy(**timing), user_models=user_paths, shapes=shapes,
                           **values)


def _check_settle(values: Mapping[str, Any]) -> None:
    """--settle waits (before a case, and again per contended block) inside the case's wall-clock limit: one as
    long as --case-timeout would turn every case into a timeout and lose its measurement."""
    from harness.config import ProcessConfig

    settle = values.get("settle_s") or 0.0
    timeout = values.get("case_timeout_s", ProcessConfig.case_timeout_s)
    if settle and settle >= timeout:
        raise UsageError(f"--settle {settle:g} s is not shorter than --case-timeout {timeout:g} s: the wait for a "
                         "quiet machine counts against the case's limit; give a shorter --settle or a longer "
                         "--case-timeout")


def opset_bounds(text: str | None) -> tuple[int | None, int | None]:
    """`--opset` bounds: "13" (exactly), "13:" (at least), ":17" (at most), "13:17" (between, inclusive)."""
    if not text:
        return None, None
    lo, sep, hi = str(text).partition(":")
    try:
        a = int(lo) if lo.strip() else None
        b = int(hi) if hi.strip() else None
    except ValueError:
        raise UsageError(f"--opset {text!r}: expected N, N:, :M or N:M (integers)") from None
    if not sep:
        b = a
    if a is not None and b is not None and a > b:
        raise UsageError(f"--opset {text!r}: the lower bound is over the upper one")
    return a, b


def _models(raw: Mapping[str, Any], quick: bool, workload: str
            ) -> tuple[tuple[str, ...], tuple[str, ...], tuple[tuple[str, int], ...]]:
    """--models / --model / --shape: the model names, the user model references and the shape sizes."""
    from harness.model import all_models, get_model
    from harness.model_files import (check_shape_names, is_factory_ref, normalize_user_model, parse_shapes,
                                     register_user_model)

    for ref in raw.get("model") or ():
        if not is_factory_ref(ref) and not os.path.lexists(ref):
            raise UsageError(f"--model {ref}: no such file (expected path/to/model.onnx or "
                             "package.module:factory)")
    user_paths = tuple(normalize_user_model(p) for p in (raw.get("model") or ()))
    shapes = parse_shapes(raw.get("shape"))
    if shapes and not user_paths:
        raise UsageError("--shape sizes dimensions of --model ONNX files; no --model was given")
    # registered here to name their cases; every worker registers them again (ensure_user_models)
    user_names = tuple(register_user_model(p, shapes) for p in user_paths)
    check_shape_names(shapes, (get_model(n) for n in user_names if "onnx" in get_model(n).tags))
    if raw.get("models"):
        models = names(raw["models"], "models")
        for m in models:
            get_model(m)
    elif user_names:
        models = ()
    elif workload == "conform":  # the cases are ONNX's backend tests, not models
        models = ()
    elif workload == "generate":  # the causal LMs of the zoo
        models = tuple(s.name for s in all_models() if "decoder" in s.tags and "user" not in s.tags)
    else:
        models = tuple(s.name for s in all_models() if (not quick or QUICK_TAG in s.tags) and "user" not in s.tags)
    return tuple(dict.fromkeys(models + user_names)), user_paths, shapes


def _input_options(values: Mapping[str, Any], models: tuple[str, ...], raw: Mapping[str, Any], workload: str
                   ) -> dict[str, Any]:
    """--input-value / --input-range checked against the run's models; without --seq-lens, the sequence
    lengths of --feeds."""
    from harness.feeds import check_overrides, feeds_for_run, seq_lens
    from harness.model import get_model

    specs = [get_model(m) for m in models]
    given = tuple(values.get("input_values", ())) + tuple(values.get("input_ranges", ()))
    both = {o.name for o in values.get("input_values", ())} & {o.name for o in values.get("input_ranges", ())}
    if both:
        raise UsageError(f"--input-value and --input-range both name {', '.join(sorted(both))}; give one")
    check_overrides(given, specs)
    out: dict[str, Any] = {}
    if values.get("feeds"):
        lens = seq_lens(feeds_for_run(values["feeds"]), specs)
        # the generation workload's prompts are its sequence axis
        axis = "prompt_lens" if workload == "generate" else "seq_lens"
        if lens and not raw.get(axis):
            out[axis] = lens
    return out


def _runtimes(raw: Mapping[str, Any], quick: bool, workload: str) -> tuple[str, ...]:
    from harness.runtimes import get_runtime

    if raw.get("runtimes"):
        runtimes = names(raw["runtimes"], "runtimes")
        for r in runtimes:
            get_runtime(r)
        return runtimes
    if workload == "conform":
        return ()  # every runtime that runs an ONNX model here (harness.workloads.conform)
    return ("torch-cpu", "ort-cpu") if quick else available_runtimes()


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
