"""The one reader for stored files (results, baselines, gate configs, specs): bounded parsing, declared schema."""

from __future__ import annotations

import json
import math
import re
import statistics
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness.errors import HarnessError, ResultsError

# Bounds on what a stored file may hold. A real results.json of a large matrix is a few MB; a bundle of K runs K
# times that. Nanosecond samples need 19 digits; nothing we write nests deeper than about 8 levels.
MAX_JSON_BYTES = 512 * 1024 * 1024
MAX_TOML_BYTES = 1024 * 1024
MAX_DEPTH = 64
MAX_INT_DIGITS = 40  # TOML, and a JSON integer the parser refuses (over 4,300 digits); the schema bounds the rest
MAX_SAMPLE_NS = 10**14  # about 28 hours for one timed call
MAX_SHAPE = 10**9

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)


class _Refused(Exception):
    """Raised from inside a parse hook; turned into the caller's error with the file's name."""


class _Duplicated(dict):  # type: ignore[type-arg]
    """A JSON object that named a key twice (`key`): found after parsing, so the error can give its path."""

    key = ""


def _object_hook(duplicates: list[str]) -> Any:
    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        d = dict(pairs)
        if len(d) == len(pairs):
            return d
        out = _Duplicated(d)
        seen: set[str] = set()
        out.key = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        duplicates.append(out.key)
        return out
    return hook


def _find_duplicated(v: Any, where: str) -> tuple[str, str] | None:
    if isinstance(v, _Duplicated):
        return where, v.key
    items = v.items() if isinstance(v, dict) else enumerate(v) if isinstance(v, list) else ()
    for k, x in items:
        if isinstance(x, (dict, list)):
            found = _find_duplicated(x, f"{where}.{k}" if isinstance(k, str) else f"{where}[{k}]")
            if found:
                return found
    return None


def read_text(path: str | Path, what: str = "results file", error: type[HarnessError] = ResultsError,
              max_bytes: int | None = None) -> str:
    """A stored file as text: it exists, is no larger than `max_bytes` (default MAX_JSON_BYTES), is UTF-8 and
    holds no NUL bytes."""
    path = Path(path)
    max_bytes = MAX_JSON_BYTES if max_bytes is None else max_bytes
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise error(f"{path}: {size:,} bytes, over the {max_bytes:,} a {what} may have: not a {what}?")
        data = path.read_bytes()
    except FileNotFoundError:
        raise error(f"{path}: no such {what}") from None
    except IsADirectoryError:
        raise error(f"{path}: is a folder, not a {what}") from None
    except OSError as exc:
        raise error(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise error(f"{path}: byte {exc.start} (0x{data[exc.start]:02x}): not UTF-8 text: a binary file or "
                    f"another encoding, not a {what}") from None
    nul = text.find("\x00")
    if nul >= 0:
        raise error(f"{path}: {_line_col(text, nul)}: NUL character: a binary file, not a {what}")
    return text


def read_json_object(path: str | Path, what: str = "results file") -> dict[str, Any]:
    """A JSON file holding an object, parsed within bounds: nesting at most MAX_DEPTH, no integer the parser
    refuses (over 4,300 digits; the schema bounds the ones it reads), no NaN/Infinity tokens or floats that
    overflow, no key twice in one object. ResultsError naming the file and the place otherwise."""
    path = Path(path)
    text = read_text(path, what)
    problem = _prescan(text, digits=False)  # a long integer is found only when the parser refuses it (fast path)
    if problem:
        raise ResultsError(f"{path}: {problem}: not a {what}")
    duplicates: list[str] = []
    try:
        doc = json.loads(text, parse_float=_parse_float, parse_constant=_parse_constant,
                         object_pairs_hook=_object_hook(duplicates))
    except _Refused as exc:
        raise ResultsError(f"{path}: {_locate(text, str(exc))}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ResultsError(f"{path}: line {exc.lineno} column {exc.colno}: not valid JSON (truncated?): "
                           f"{exc.msg}") from None
    except ValueError:  # int() refuses over 4,300 digits (sys.get_int_max_str_digits)
        raise ResultsError(f"{path}: {_prescan(text) or 'somewhere'}: not a {what}") from None
    except RecursionError:  # bounded above; kept so no parse can escape as a traceback
        raise ResultsError(f"{path}: nested too deep: not a {what}") from None
    if not isinstance(doc, dict):
        raise ResultsError(f"{path}: expected a JSON object, found {type(doc).__name__}: not a {what}")
    duplicated = _find_duplicated({"": doc}, "") if duplicates else None
    if duplicated:
        where, key = duplicated
        raise ResultsError(f"{path}: {where.lstrip('.') or 'the document'}: key {key!r} appears twice: which one "
                           f"is meant?")
    return doc


def read_toml(path: str | Path, error: type[HarnessError] = ResultsError, what: str = "file") -> dict[str, Any]:
    """A TOML file as a dict, bounded like JSON (size, encoding, nesting, integer size); `error` names it."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    path = Path(path)
    text = read_text(path, what, error, MAX_TOML_BYTES)
    problem = _prescan(text)
    if problem:
        raise error(f"{path}: {problem}: not a {what}")
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{path}: not valid TOML: {exc}") from None
    except RecursionError:
        raise error(f"{path}: nested too deep: not a {what}") from None
    except ValueError as exc:  # e.g. an integer over Python's digit limit
        raise error(f"{path}: not valid TOML: {str(exc).splitlines()[0]}") from None
    where = _deep_value(doc, "", 0)
    if where is not None:
        raise error(f"{path}: {where}")
    return doc


def _prescan(text: str, digits: bool = True) -> str | None:
    """Before parsing (strings ignored): `line L column C: problem` for the first bracket nested deeper than
    MAX_DEPTH (Python's parsers recurse) or, with `digits`, number longer than MAX_INT_DIGITS digits (int()
    refuses over 4,300), else None."""
    stripped = _STRING.sub(lambda m: " " * len(m.group()), text)
    for long in re.finditer(rf"(?<![\d_])[\d_]{{{MAX_INT_DIGITS + 1},}}", stripped) if digits else ():
        n = len(long.group().replace("_", ""))
        if n > MAX_INT_DIGITS:
            return f"{_line_col(text, long.start())}: a number of {n:,} digits (at most {MAX_INT_DIGITS})"
    depth = 0
    for m in re.finditer(r"[\[\]{}]", stripped):
        depth += 1 if m.group() in "[{" else -1
        if depth > MAX_DEPTH:
            return f"{_line_col(text, m.start())}: nested more than {MAX_DEPTH} levels deep"
    return None


def _deep_value(v: Any, where: str, depth: int) -> str | None:
    if depth > MAX_DEPTH:
        return f"{where or 'the document'}: nested more than {MAX_DEPTH} levels deep"
    if isinstance(v, int) and not isinstance(v, bool) and len(str(abs(v))) > MAX_INT_DIGITS:
        return f"{where}: an integer of more than {MAX_INT_DIGITS} digits"
    items = v.items() if isinstance(v, dict) else enumerate(v) if isinstance(v, list) else ()
    for k, x in items:
        found = _deep_value(x, f"{where}.{k}" if isinstance(k, str) else f"{where}[{k}]", depth + 1)
        if found:
            return found.lstrip(".")
    return None


def _parse_float(s: str) -> float:
    v = float(s)
    if not math.isfinite(v):
        raise _Refused(f"{s[:20]} overflows to infinity (a latency or statistic must be finite)")
    return v


def _parse_constant(s: str) -> float:
    raise _Refused(f"{s} is not a JSON number (a latency or statistic must be finite)")


def _locate(text: str, message: str) -> str:
    """line/column of what a parse hook refused: an overflowing float, NaN/Infinity."""
    stripped = _STRING.sub(lambda s: " " * len(s.group()), text)
    if "overflows" in message:
        pattern = re.escape(message.split(" ", 1)[0])
    else:
        pattern = r"-?(?:NaN|Infinity)"
    m = re.search(pattern, stripped)
    return _line_col(text, m.start()) if m else "somewhere"


def _line_col(text: str, offset: int) -> str:
    line = text.count("\n", 0, offset) + 1
    return f"line {line} column {offset - (text.rfind(chr(10), 0, offset) + 1) + 1}"


# ---- the declared schema of a results document (schema_version 2) -------------------------------------------

Finite = Annotated[float, Field(strict=True, allow_inf_nan=False)]
Count = Annotated[int, Field(strict=True, ge=0, le=10**12)]
Sample = Annotated[int, Field(strict=True, le=MAX_SAMPLE_NS)]
Text = Annotated[str, Field(strict=True)]


class _Doc(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")


class CaseIdDoc(_Doc):
    model: Annotated[str, Field(min_length=1)]
    runtime: Annotated[str, Field(min_length=1)]
    precision: Literal["fp32", "fp16", "bf16", "int8"]
    batch: Annotated[int, Field(ge=1, le=MAX_SHAPE)]
    seq: Annotated[int, Field(ge=1, le=MAX_SHAPE)] | None = None
    gen: Annotated[int, Field(ge=1, le=MAX_SHAPE)] | None = None
    device: Annotated[str, Field(min_length=1)]


class BlockDoc(_Doc):
    samples: Count
    p50_ms: Finite | None = None
    kind: Literal["case", "round", "confirm"]
    reactivated: bool = False
    error: Text | None = None
    contention: dict[str, Any] | None = None


NonNegative = Annotated[float, Field(strict=True, allow_inf_nan=False, ge=0)]


class ScenarioDoc(_Doc):
    scenario: Literal["single-stream", "multi-stream", "server", "offline"]
    result: Literal["VALID", "INVALID", "error", "skipped"]
    reasons: list[Text] = []
    checks: dict[str, bool] = {}
    min_duration_s: NonNegative | None = None
    min_query_count: Count | None = None
    query_count: Count | None = None
    samples_per_query: Count | None = None
    samples_per_s: NonNegative | None = None
    latency_ms: dict[str, NonNegative] = {}
    query_latency_ms: dict[str, NonNegative] = {}
    early_stopping_ms: NonNegative | None = None
    target_qps: NonNegative | None = None
    target_latency_ms: NonNegative | None = None
    target_latency_basis: Text | None = None
    target_latency_percentile: NonNegative | None = None
    overlatency_queries: Count | None = None
    calls: Count | None = None
    call_p50_ms: NonNegative | None = None
    call_mean_ms: NonNegative | None = None
    search_step: Annotated[int, Field(strict=True, ge=1, le=10**6)] | None = None
    wall_s: NonNegative | None = None
    log_dir: Text | None = None
    error: Text | None = None


class CaseDoc(_Doc):
    case: CaseIdDoc
    status: Literal["passed", "failed", "skipped", "error", "crashed", "timeout", "oom"]
    reason: Text = ""
    phase: Text | None = None
    signal: Text | None = None
    stderr_tail: Text = ""
    samples_ns: list[Sample] = []
    warmup_iters: Count = 0
    timing_scope: Text | None = None
    scenario: Text | None = None
    latency: dict[str, Any] | None = None
    throughput_sps: Finite | None = None
    accuracy: dict[str, Any] | None = None
    reference_runtime: Text | None = None
    setup_s: Finite | None = None
    artifact: Text | None = None
    artifact_cache_hit: bool | None = None
    feed_sha256: Text | None = None
    model_fingerprint: Text | None = None
    details: dict[str, Any] = {}
    blocks: list[BlockDoc] = []
    blocks_pending: Count = 0
    duration_s: Finite | None = None
    host_peak_mb: Finite | None = None
    gpu_peak_mb: Finite | None = None
    memory: dict[str, Any] | None = None
    device_samples_ns: list[Sample] = []
    precision_recipe: Text | None = None
    localization: dict[str, Any] | None = None
    scenarios: list[ScenarioDoc] = []
    end_to_end: dict[str, Any] | None = None
    contention: dict[str, Any] | None = None
    generation: dict[str, Any] | None = None


class RunDoc(_Doc):
    schema_version: Annotated[int, Field(ge=0, le=10**6)]
    harness_version: Text = ""
    run_id: Text
    started_at: Text
    finished_at: Text | None = None
    complete: bool = False
    interrupted: bool = False
    environment: dict[str, Any] = {}
    config: dict[str, Any] = {}
    cases: list[CaseDoc]


class BundleDoc(_Doc):
    baseline_schema: int
    name: Text = ""
    runs: Annotated[list[dict[str, Any]], Field(min_length=1)]


def place(loc: tuple[Any, ...] | list[Any], prefix: str = "") -> str:
    """A pydantic location as a path into the document: ('cases', 3, 'samples_ns', 0) -> cases[3].samples_ns[0]."""
    out = prefix
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "the document"


def validate(model: type[BaseModel], doc: dict[str, Any], source: str, prefix: str = "") -> BaseModel:
    """`doc` checked against `model`; ResultsError naming `source`, the place and the first problem."""
    try:
        return model.model_validate(doc)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        e = errors[0]
        more = f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})" if len(errors) > 1 else ""
        got = "" if e["type"] == "missing" else f"; found {_short(e.get('input'))}"
        raise ResultsError(f"{source}: {place(e['loc'], prefix)}: {e['msg'].lower()}{got}{more}") from None


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def check_results_doc(doc: dict[str, Any], source: str, prefix: str = "") -> None:
    """A (migrated) results document checked against the schema and for numbers that cannot be true: every
    measured case has finite, positive samples, and its stored statistics agree with them; case ids are unique
    and the run holds at least one case. ResultsError naming `source` and the place otherwise."""
    run = validate(RunDoc, doc, source, prefix)
    assert isinstance(run, RunDoc)
    at = f"{prefix}." if prefix else ""
    if not run.cases:
        raise ResultsError(f"{source}: {at}cases: the run holds no cases: nothing to report or compare")
    seen: dict[str, int] = {}
    for i, c in enumerate(run.cases):
        where = f"{source}: {at}cases[{i}]"
        cid = _case_id(c.case)
        if cid in seen:
            raise ResultsError(f"{where}: duplicate case id {cid!r} (first at cases[{seen[cid]}])")
        seen[cid] = i
        for key in ("samples_ns", "device_samples_ns"):
            values = getattr(c, key)
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
        _check_latency(c.latency or {}, c.samples_ns, f"{where}.latency")
        if c.generation is not None:
            _check_generation(c.generation, c.samples_ns, f"{where}.generation")


def _check_generation(g: dict[str, Any], samples_ns: list[int], where: str) -> None:
    """A generation case's raw samples (harness.generation): positive integers, one TTFT and one list of
    decode steps per generation, each generation's end-to-end time their sum, and those times the case's
    samples_ns."""
    def ints(v: Any, at: str) -> list[int]:
        if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in v):
            raise ResultsError(f"{where}.{at}: {_short(v)}: expected a list of positive integer nanoseconds")
        return v

    ttft, e2e = ints(g.get("ttft_ns"), "ttft_ns"), ints(g.get("e2e_ns"), "e2e_ns")
    decode = g.get("decode_ns")
    if not isinstance(decode, list) or len(decode) != len(ttft) or len(e2e) != len(ttft):
        raise ResultsError(f"{where}: ttft_ns, decode_ns and e2e_ns must hold one entry per generation")
    for i, (t, steps, total) in enumerate(zip(ttft, decode, e2e)):
        if t + sum(ints(steps, f"decode_ns[{i}]")) != total:
            raise ResultsError(f"{where}.e2e_ns[{i}]: {total} ns but TTFT + decode steps give "
                               f"{t + sum(steps)} ns: samples that disagree")
    if e2e != samples_ns:
        raise ResultsError(f"{where}.e2e_ns: not the case's samples_ns (a generation's end-to-end times are its "
                           "latency samples)")


def _check_blocks(blocks: list[BlockDoc], samples_ns: list[int], where: str) -> None:
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
            raise ResultsError(f"{where}[{j}].error: a block with samples did not fail; found {_short(b.error)}")
        want = statistics.median(samples_ns[at:at + b.samples]) / 1e6
        if b.p50_ms is None or not math.isclose(b.p50_ms, want, rel_tol=1e-6, abs_tol=2e-6):
            got = "none" if b.p50_ms is None else f"{b.p50_ms:.6g} ms"
            raise ResultsError(f"{where}[{j}].p50_ms: {got} but its samples give {want:.6g} ms: statistics "
                               "that disagree with the raw samples")
        at += b.samples


def _case_id(c: CaseIdDoc) -> str:
    s = f"-s{c.seq}" if c.seq is not None else ""
    g = f"-g{c.gen}" if c.gen is not None else ""
    return f"{c.model}-{c.runtime}-{c.precision}-b{c.batch}{s}{g}@{c.device}"


def _check_latency(lat: dict[str, Any], samples_ns: list[int], where: str) -> None:
    """Stored statistics finite and, where they are derived from the samples, equal to them within rounding."""
    for key, v in lat.items():
        if key == "noisy":
            if not isinstance(v, bool):
                raise ResultsError(f"{where}.{key}: {_short(v)}: expected true or false")
        elif isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ResultsError(f"{where}.{key}: {_short(v)}: not a finite number")
        elif v < 0 or (v == 0 and key.endswith("_ms") and key not in ("std_ms", "iqr_ms")):
            raise ResultsError(f"{where}.{key}: {v}: a latency must be positive")
    if "iterations" in lat and lat["iterations"] != len(samples_ns):
        raise ResultsError(f"{where}.iterations: {lat['iterations']} but samples_ns holds {len(samples_ns)} samples")
    for key, want in _derived(samples_ns).items():
        if key in lat and not math.isclose(lat[key], want, rel_tol=1e-6, abs_tol=1e-6):
            unit = " ms" if key.endswith("_ms") else ""
            raise ResultsError(f"{where}.{key}: {lat[key]:.6g}{unit} but the samples (samples_ns) give "
                               f"{want:.6g}{unit}: statistics that disagree with the raw samples")


def _derived(samples_ns: list[int]) -> dict[str, float]:
    """What harness.results.stats.latency_stats gives for these samples (numpy's linear percentiles), in ms."""
    import numpy as np

    ms = np.asarray(samples_ns, dtype=np.float64) / 1e6
    p50, p90, p95, p99, q1, q3 = (float(v) for v in np.percentile(ms, [50, 90, 95, 99, 25, 75]))
    mean = float(ms.mean())
    std = float(ms.std(ddof=1)) if ms.size > 1 else 0.0
    return {"p50_ms": p50, "p90_ms": p90, "p95_ms": p95, "p99_ms": p99, "min_ms": float(ms.min()),
            "max_ms": float(ms.max()), "mean_ms": mean, "std_ms": std, "iqr_ms": q3 - q1,
            "cv": std / mean if mean > 0 else 0.0}
