"""The one reader for stored files (results, baselines, gate configs, specs): bounded parsing, declared schema."""

from __future__ import annotations

import copy
import functools
import json
import math
import re
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, ConfigDict, Field, Strict, TypeAdapter, ValidationError

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


# ---- constrained types of stored records ----------------------------------------------------------------------
# The records themselves are harness.results.schema's dataclasses: their fields carry these types, and the strict
# reader is a pydantic TypeAdapter over them (harness.results.schema.reader). Every scalar, list and dict is
# strict (no "4" for 4, no 1 for true, no tuple for a list); a record ignores keys it does not know (a newer
# harness may add some) and takes the dataclass's default for a key that is missing.

Text = Annotated[str, Strict()]
Name = Annotated[str, Strict(), Field(min_length=1)]
Flag = Annotated[bool, Strict()]
Finite = Annotated[float, Strict(), Field(allow_inf_nan=False)]
NonNegative = Annotated[float, Strict(), Field(allow_inf_nan=False, ge=0)]
Count = Annotated[int, Strict(), Field(ge=0, le=10**12)]
Shape = Annotated[int, Strict(), Field(ge=1, le=MAX_SHAPE)]
Sample = Annotated[int, Strict(), Field(le=MAX_SAMPLE_NS)]
Samples = Annotated[list[Sample], Strict()]
Texts = Annotated[list[Text], Strict()]
Object = Annotated[dict[Text, Any], Strict()]
Flags = Annotated[dict[Text, Flag], Strict()]
Figures = Annotated[dict[Text, NonNegative], Strict()]

@functools.cache
def adapter(record: type) -> TypeAdapter[Any]:
    """The strict reader of one record type (a pydantic TypeAdapter over its declared field types, nested records
    included), built on first use."""
    return TypeAdapter(record.schema_type() if issubclass(record, Record) else record)


class Record:
    """Mixin of a stored record (a dataclass whose field types are the constrained types above). Every record is
    read by one reader: `from_dict` goes through its TypeAdapter, the same that reads a results file, so a dict
    the harness passes between processes is read exactly as a stored one (strict, keys it does not declare
    ignored, or kept where its config allows them: RECORD_DICT; a missing key its default); ResultsError naming
    `source` and the place otherwise. Every record is written by `as_dict`."""

    @classmethod
    def schema_type(cls) -> Any:
        """What the reader reads this record as."""
        return cls

    @classmethod
    def from_dict(cls, d: dict[str, Any], source: str = "<record>") -> Any:
        return validate(adapter(cls), d, source)

    def as_dict(self) -> dict[str, Any]:
        """The stored dict: the fields in declared order (a nested record as its own `as_dict`), a field declared
        `when_set()` only where it holds a value; then, for a record that keeps them (RECORD_DICT), the keys it
        was read with that it does not declare."""
        out: dict[str, Any] = {}
        for f in fields(self):  # type: ignore[arg-type]
            v = getattr(self, f.name)
            if v is None and "when_set" in f.metadata and all(getattr(self, k) is None for k in
                                                                f.metadata["when_set"]):
                continue
            out[f.name] = stored(v)
        if getattr(self, "__pydantic_config__", {}).get("extra") == "allow":  # pydantic keeps them as attributes
            names = {f.name for f in fields(self)}  # type: ignore[arg-type]
            out.update((k, copy.deepcopy(v)) for k, v in vars(self).items() if k not in names)
        return out


def when_set(along: tuple[str, ...] = ()) -> Any:
    """A field of a record written only where it, or a field named in `along` (its group), holds a value (else
    its key is left out; read back, None): for what a producer gives only where it has it (a CPU case's memory
    has no GPU keys; a GPU case's, all of them, None as null)."""
    return field(default=None, metadata={"when_set": along})


def stored(v: Any) -> Any:
    """A value as a record writes it: a record as its `as_dict`, a plain dataclass as `asdict`, lists and dicts
    of them likewise, anything else a copy."""
    if isinstance(v, Record):
        return v.as_dict()
    if is_dataclass(v) and not isinstance(v, type):
        return asdict(v)
    if isinstance(v, list):
        return [stored(x) for x in v]
    if isinstance(v, tuple):
        return tuple(stored(x) for x in v)
    if isinstance(v, dict):
        return {k: stored(x) for k, x in v.items()}
    return copy.deepcopy(v)


# How a record reads: unknown keys ignored (forward compatibility), strictness on each field's type above (a
# dataclass record cannot be strict as a whole: pydantic would then want an instance, not a dict).
RECORD_CONFIG = ConfigDict(extra="ignore")


@dataclass(kw_only=True)
class BundleDoc(Record):
    """A baseline bundle (harness.gating.baseline): its runs, each a results document read by the results reader."""

    __pydantic_config__ = RECORD_CONFIG

    baseline_schema: Annotated[int, Strict()]
    name: Text = ""
    runs: Annotated[list[Object], Strict(), Field(min_length=1)]
    replay: Object | None = None  # baseline_schema 2: what side A of `harness gate` re-runs (ReplayDoc)


_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_DIST = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,98}[A-Za-z0-9])?$")  # PEP 508's distribution name


def _digest(v: str) -> str:
    """A stored reference into the blob store: a sha256 as 64 lower-case hex digits, nothing else (no path)."""
    if not _SHA256.match(v):
        raise ValueError(f"{_short(v)} is not a sha256 digest (64 lower-case hex digits)")
    return v


def _distribution(v: str) -> str:
    if not _DIST.match(v):
        raise ValueError(f"{_short(v)} is not a distribution name (letters, digits, '.', '_', '-')")
    return v


def _module(v: str) -> str:
    if not (v.isidentifier() and len(v) <= 100):
        raise ValueError(f"{_short(v)} is not a module name")
    return v


def _version(v: str | None) -> str | None:
    """A release as pip names one (PEP 440): never a string pip would read as options or a URL."""
    from packaging.version import InvalidVersion, Version

    if v is None:
        return v
    try:
        Version(v)
    except InvalidVersion:
        raise ValueError(f"{_short(v)} is not a valid version (PEP 440, e.g. 1.30.0)") from None
    if len(v) > 64 or not re.match(r"^[0-9A-Za-z.+!_-]+$", v):
        raise ValueError(f"{_short(v)} is not a plain version")
    return v


def _short(v: str, n: int = 60) -> str:
    return repr(v if len(v) <= n else v[:n] + "...")


Digest = Annotated[Text, AfterValidator(_digest)]
Distribution = Annotated[Text, AfterValidator(_distribution)]
Release = Annotated[Text | None, AfterValidator(_version)]


@dataclass
class ReleaseDoc(Record):
    """The distribution that provided a runtime's module when the case ran, and its release (onnxruntime-gpu
    1.30.0 on the default install, onnxruntime 1.29.0 in an `ort-cpu@1.29.0` environment)."""

    __pydantic_config__ = RECORD_CONFIG

    distribution: Distribution
    version: Annotated[Text, AfterValidator(_version)]


@dataclass
class ReplayCaseDoc(Record):
    """What makes one case of a baseline reproducible (harness.gating.baseline.ReplayCase)."""

    __pydantic_config__ = RECORD_CONFIG

    artifact_sha256: Digest | None = None
    artifact_bytes: Annotated[int, Strict(), Field(ge=0)] | None = None
    not_kept: Text = ""  # why no artifact is stored ("" when one is)
    packages: Annotated[dict[Distribution, Release], Strict()] = field(default_factory=dict)
    # runtime module -> the distribution that provided it and its release, as the case ran (empty: saved before)
    providers: Annotated[dict[Annotated[Text, AfterValidator(_module)], ReleaseDoc], Strict()] = field(
        default_factory=dict)
    environment_key: Text | None = None
    feed_sha256: Text | None = None
    model_fingerprint: Text | None = None
    precision_recipe: Text | None = None
    timing_scope: Text | None = None
    # a case of a runtime that runs the torch module itself: what builds the module (ModelSpec.definition())
    model_definition: Object | None = None


@dataclass
class ReplayDoc(Record):
    """What a baseline stores to re-run its newest run (harness.gating.baseline.Replay)."""

    __pydantic_config__ = RECORD_CONFIG

    run_id: Text
    config: Object = field(default_factory=dict)
    cases: Annotated[dict[Text, ReplayCaseDoc], Strict()] = field(default_factory=dict)


def place(loc: tuple[Any, ...] | list[Any], prefix: str = "") -> str:
    """A pydantic location as a path into the document: ('cases', 3, 'samples_ns', 0) -> cases[3].samples_ns[0]."""
    out = prefix
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "the document"


def validate(model: TypeAdapter[Any], doc: dict[str, Any], source: str, prefix: str = "") -> Any:
    """`doc` checked against `model` (the TypeAdapter of a record: `adapter`); ResultsError naming `source`, the
    place and the first problem."""
    try:
        return model.validate_python(doc)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        e = errors[0]
        if e["loc"] and e["loc"][-1] in ("int", "float") and e["type"] in ("int_type", "float_type"):
            # a number field (an int or a float, both strict): one problem, said once, at the field itself
            e = {**e, "loc": e["loc"][:-1], "msg": "Input should be a number (an integer or a float)"}
            errors = [x for x in errors if x["loc"][:-1] != e["loc"]] + [e]
        if e["type"] == "dataclass_type":  # a record found as something else: said as for any object, no class name
            e = {**e, "msg": "Input should be a valid dictionary"}
        more = f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})" if len(errors) > 1 else ""
        got = "" if e["type"] == "missing" else f"; found {short(e.get('input'))}"
        raise ResultsError(f"{source}: {place(e['loc'], prefix)}: {e['msg'].lower()}{got}{more}") from None


def short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


# ---- the newer records: profile, A/B, contention, a runtime's own environment ---------------------------------
# Their dicts are written as they are built (harness.profile, harness.measure.contention, harness.envs,
# harness.gating.ab) and read back through these declarations: every number a number of a sane size (a report
# multiplies and divides them: 1e308 overflows, a zero peak divides), every text a text, and what one record says
# twice said alike (an interval holding its estimate, a verdict its interval allows). Keys they do not declare
# are kept (a newer harness may add some).
MAX_FIGURE = 1e18  # FLOPs, bytes, milliseconds, GFLOP/s: far above anything measured, far below an overflow


# a number as written: an int or a float, each strict (no "12", no true), finite, within +-MAX_FIGURE
_Num = Annotated[Annotated[int, Strict()] | Annotated[float, Strict(), Field(allow_inf_nan=False)],
                 Field(ge=-MAX_FIGURE, le=MAX_FIGURE)]
Amount = Annotated[_Num, Field(ge=0)]  # a time, a count of FLOPs or bytes, a rate: never negative
Positive = Annotated[_Num, Field(gt=0)]  # a latency something is divided by
Rate = Annotated[_Num, Field(ge=1e-9)]  # a peak (GFLOP/s) or a bandwidth (GB/s): a roof is drawn from it
Share = Annotated[_Num, Field(ge=0, le=1.0 + 1e-9)]  # a fraction of a whole
Percent = _Num  # a signed percentage (a gap; over the roof is over 100)
Number = _Num
RECORD_DICT = ConfigDict(extra="allow")


# a profile's records (harness.profile.layers.profile_record, harness.workloads.forward.profiling): a key a producer
# gives only where it has it is `when_set` (a profile that failed has no node table; a roofline that could not be
# placed only its `error`); a figure written null where unknown (a node's FLOPs) is written always
@dataclass
class ProfileNodeRecord(Record):
    """One ONNX node's time in the profiled runs, its share of the profile, the fused kernel it ran in, the
    profiler's ops mapped onto it, its FLOPs and bytes (None: not counted) and the rates achieved; `module`: the
    module path the torch exporter recorded for it."""

    __pydantic_config__ = RECORD_DICT

    node: Text = when_set()
    op_type: Text = when_set()
    time_ms: Amount = when_set()
    time_us: Amount = when_set()
    share: Share = when_set()
    fusion: Text = when_set()
    ops: Texts = when_set()
    flops: Amount | None = when_set(("node",))
    bytes_moved: Amount | None = when_set(("node",))
    gflops: Amount | None = when_set(("node",))
    gbs: Amount | None = when_set(("node",))
    module: Text = when_set()


@dataclass
class ProfileUnmappedRecord(Record):
    """A profiled op the profile could not map onto a graph node."""

    __pydantic_config__ = RECORD_DICT

    name: Text = when_set()
    op_type: Text = when_set()
    time_ms: Amount = when_set()
    time_us: Amount = when_set()


# a placed roofline point's keys: where one was placed, its method keys are written too (None as null)
_POINT = ("bound",)


@dataclass
class RooflineRecord(Record):
    """A case on the measured roofline (harness.profile.roofline.RooflinePoint.to_dict, with the precision, threads
    and the ceilings' methods), or why it could not be placed (`error`)."""

    __pydantic_config__ = RECORD_DICT

    flops: Amount = when_set()
    bytes_moved: Amount = when_set()
    latency_s: Positive = when_set()
    achieved_gflops: Amount = when_set()
    achieved_gbs: Amount = when_set()
    intensity: Amount | None = when_set()
    peak_gflops: Rate = when_set()
    bandwidth_gbs: Rate = when_set()
    ridge_intensity: Amount = when_set()
    roof_gflops: Amount = when_set()
    percent_of_roof: Amount = when_set()
    percent_of_peak: Amount = when_set()
    bound: Literal["memory", "compute"] = when_set()
    over_roof: Flag = when_set()
    precision: Text = when_set()
    threads: Annotated[int, Strict(), Field(ge=1, le=1 << 20)] = when_set()
    peak_method: Text | None = when_set(_POINT)
    bandwidth_method: Text | None = when_set(_POINT)
    ceilings_warning: Text | None = when_set(_POINT)
    error: Text = when_set()


@dataclass
class CostRecord(Record):
    """The graph's FLOPs and bytes at the case's sizes (harness.profile.flops.GraphCost.summary, and the graph it
    was read from), or why not (`error`)."""

    __pydantic_config__ = RECORD_DICT

    dims: Annotated[dict[Text, Annotated[int, Strict(), Field(ge=0, le=MAX_SHAPE)]], Strict()] = when_set()
    nodes: Annotated[int, Strict(), Field(ge=0, le=10**9)] = when_set()
    flops: Amount = when_set()
    bytes_moved: Amount = when_set()
    graph: Text = when_set()
    error: Text = when_set()


def _check_profile(p: ProfileRecord) -> ProfileRecord:
    parts = [p.mapped_ms, p.unmapped_ms, p.total_ms]
    if all(isinstance(x, (int, float)) for x in parts) and abs(parts[0] + parts[1] - parts[2]) > 1e-6 * max(
            1.0, abs(parts[2])):
        raise ValueError(f"mapped_ms {parts[0]:g} + unmapped_ms {parts[1]:g} is not total_ms {parts[2]:g}")
    return p


# a profile's table: where the profiled runs mapped (`method` set), its keys are written together (None as null)
_TABLE = ("method",)


@dataclass
class ProfileRecord(Record):
    """--profile of a case (harness.workloads.forward.profiling.CaseProfiler.profile): the profiled runs' time per
    node and not mapped, their total against the measured p50 (and against the p50 of as many unprofiled runs
    beside them: `adjacent_*`), the roofline point and the graph's cost; or why there is no table
    (`unsupported`: the runtime has no profiler; `error`)."""

    __pydantic_config__ = RECORD_DICT

    method: Text = when_set()
    runs: Annotated[int, Strict(), Field(ge=1, le=10**9)] = when_set()
    graph: Text | None = when_set(_TABLE)
    notes: Texts = when_set()
    nodes: Annotated[list[ProfileNodeRecord], Strict()] = when_set()
    unmapped: Annotated[list[ProfileUnmappedRecord], Strict()] = when_set()
    mapped_ms: Amount = when_set()
    unmapped_ms: Amount = when_set()
    total_ms: Amount = when_set()
    wall_ms: Amount = when_set()
    measured_p50_ms: Amount = when_set()
    adjacent_p50_ms: Amount | None = when_set(("adjacent_gap_percent",))
    gap_percent: Percent | None = when_set(_TABLE)
    adjacent_gap_percent: Percent | None = when_set(("adjacent_p50_ms",))
    roofline: RooflineRecord | None = when_set(("measured_p50_ms",))
    cost: CostRecord | None = when_set()
    unsupported: Text = when_set()
    error: Text = when_set()


Profile = Annotated[ProfileRecord, AfterValidator(_check_profile)]


@dataclass(frozen=True)
class BlockContention(Record):
    """What the kernel said about one timed block (harness.measure.contention.ContentionProbe): the figures it
    could read (a kernel without schedstat, PSI or a steal column gives none of those: their keys are left out),
    the `contended` verdict and its `cause`; `own_wait` where a replay's verdict was taken back (its own threads
    waited, nobody else used the machine: harness.measure.contention.own_wait)."""

    __pydantic_config__ = RECORD_DICT

    wall_s: Amount = when_set()
    threads: Annotated[int, Strict(), Field(ge=1, le=1 << 20)] = when_set()
    cpu_cores: Amount = when_set()
    run_s: Amount = when_set()
    runqueue_wait_s: Amount = when_set()
    wait_fraction: Share = when_set()
    involuntary_switches: Annotated[int, Strict(), Field(ge=0, le=10**12)] = when_set()
    others_cores: Amount = when_set()
    cores_free: Amount = when_set()
    psi_some: Share = when_set()
    steal_s: Amount = when_set()
    steal_fraction: Share = when_set()
    contended: Flag = when_set()
    cause: Text = when_set()  # only where contended
    own_wait: Text = when_set()  # the cause of a verdict taken back (own_wait)


def _check_case_contention(c: CaseContentionRecord) -> CaseContentionRecord:
    blocks, busy = c.blocks, c.contended_blocks
    if isinstance(blocks, int) and isinstance(busy, int) and busy > blocks:
        raise ValueError(f"contended_blocks {busy} of {blocks} blocks: more than there are")
    if isinstance(busy, int) and isinstance(c.contended, bool) and c.contended != (busy > 0):
        raise ValueError(f"contended is {c.contended} with {busy} contended block(s): contradictory")
    return c


@dataclass(frozen=True)
class CaseContentionRecord(Record):
    """A case's blocks summed up (harness.measure.contention.case_contention): how many were contended, the
    verdict (any block contended), the worst figures and the worst contended block's cause."""

    __pydantic_config__ = RECORD_DICT

    blocks: Annotated[int, Strict(), Field(ge=0, le=10**9)] = when_set()
    contended_blocks: Annotated[int, Strict(), Field(ge=0, le=10**9)] = when_set()
    contended: Flag = when_set()
    wait_fraction_max: Share | None = None
    psi_some_max: Share | None = None
    steal_fraction_max: Share | None = when_set()  # written where a block read the steal time
    cause: Text = when_set()  # only where contended


CaseContention = Annotated[CaseContentionRecord, AfterValidator(_check_case_contention)]


@dataclass(frozen=True)
class EnvironmentRecord(Record):
    """A runtime's own environment a case ran in (harness.envs.RuntimeEnv.record): its key, what it was asked to
    install, its Python, the exact version of every package installed there, and which distribution provided each
    runtime module it provides (`providers`: module -> distribution, version)."""

    __pydantic_config__ = RECORD_DICT

    key: Name = when_set()
    requirements: Texts = when_set()
    python: Text = when_set()
    packages: Annotated[dict[Text, Text], Strict()] = when_set()
    providers: Object = when_set()  # from before it was declared: kept as it was written


AB_VERDICTS = ("pass", "improved", "regressed", "noise", "inconclusive")  # harness.gating.ab's


def check_ab(ab: Any) -> Any:
    """What an A/B record says twice, said alike: the interval holds B/A, a verdict of a change has the interval
    that decides it (regressed: all of it above 1; improved: below), the pairs used are pairs that were
    measured, and each block belongs to one of them."""
    if ab is None:
        return ab
    lo, ratio, hi = ab.ci_low, ab.ratio, ab.ci_high
    for name, v in (("ratio", ratio), ("ci_low", lo), ("ci_high", hi)):
        if v is not None and not 0 < v <= 1e6:
            raise ValueError(f"{name} {v:g}: a ratio of two latencies is positive (and not absurd)")
    if lo is not None and hi is not None and lo > hi:
        raise ValueError(f"ci_low {lo:g} is above ci_high {hi:g}: an impossible interval")
    if ratio is not None and lo is not None and hi is not None and not lo <= ratio <= hi:
        raise ValueError(f"ratio {ratio:g} is outside its interval [{lo:g}, {hi:g}]")
    if ab.verdict and ab.verdict not in AB_VERDICTS:
        raise ValueError(f"verdict {ab.verdict!r}: not one of {', '.join(AB_VERDICTS)}")
    if ab.verdict in ("regressed", "improved"):
        if ratio is None or lo is None or hi is None:
            raise ValueError(f"verdict {ab.verdict!r} without the ratio and interval that decide it")
        if (ab.verdict == "regressed") != (lo > 1.0) or (ab.verdict == "improved") != (hi < 1.0):
            raise ValueError(f"verdict {ab.verdict!r} contradicts its interval [{lo:g}, {hi:g}] of B/A")
    if ab.verdict == "pass" and None not in (lo, hi, ab.min_effect):
        band = 1.0 + 2 * ab.min_effect
        if not 1.0 / band < lo and hi < band:
            raise ValueError(f"verdict 'pass' contradicts its interval [{lo:g}, {hi:g}] of B/A: a pass needs it "
                             f"within [{1 / band:.4g}, {band:.4g}]")
    pairs = len(ab.order)
    if pairs and ab.pairs_used > pairs:
        raise ValueError(f"pairs_used {ab.pairs_used} of {pairs} pairs: more than were measured")
    for i, b in enumerate(ab.blocks):
        if pairs and b.pair >= pairs:
            raise ValueError(f"blocks[{i}].pair {b.pair}: there are {pairs} pairs")
    return ab


# a full snapshot's keys (harness.results.environment.snapshot): written together, null where unknown
_SNAPSHOT = ("hostname",)


@dataclass
class RunEnvironmentRecord(Record):
    """A run's environment snapshot (harness.results.environment.snapshot): the keys renderers and judges read,
    declared with their types (a string where a table of libraries goes would end a report in a traceback); the
    facts only printed or carried (`os`, `python_implementation`, `providers`, `cpu_affinity`, `gpu_clock_drop`,
    `ray_node`, `niceness`, what a newer harness adds) kept as open keys, written after the fields. A full
    snapshot writes its fields together (`hostname` set: null where unknown); a partial one (an old results file)
    only the keys it has (a field written null reads back as None). Mutable: the run adds to it while it goes (`gpu_end`, `harness_overhead`,
    `cpu_busy_others_percent`, `ray_nodes` as fields; open keys through `add`)."""

    __pydantic_config__ = RECORD_DICT

    hostname: Text = when_set(_SNAPSHOT)
    machine: Text | None = when_set(_SNAPSHOT)
    machine_fingerprint: Text | None = when_set(_SNAPSHOT)
    cpu_model: Text | None = when_set(_SNAPSHOT)
    cpu_cores_logical: Annotated[int, Strict(), Field(ge=1, le=1 << 20)] | None = when_set(_SNAPSHOT)
    cpu_cores_physical: Annotated[int, Strict(), Field(ge=1, le=1 << 20)] | None = when_set(_SNAPSHOT)
    memory_total_gb: Amount | None = when_set(_SNAPSHOT)
    python: Text | None = when_set(_SNAPSHOT)
    libraries: Annotated[dict[Text, Text | None], Strict()] | None = when_set(_SNAPSHOT)
    git: Object | None = when_set(_SNAPSHOT)
    threads: Object | None = when_set(_SNAPSHOT)
    gpu: Object | None = when_set(_SNAPSHOT)
    gpu_end: Object | None = when_set()  # added at the end of a run (harness.results.environment.gpu_end_snapshot)
    harness_overhead: Object | None = when_set()  # added by the session and `harness snapshot`
    cpu_busy_percent_at_start: Amount | None = when_set()  # the three: where the snapshot probed the CPU
    cpu_cores_free_at_start: Amount | None = when_set()
    cpu_quiet_at_start: Flag | None = when_set()
    cpu_busy_others_percent: Amount | None = when_set(("gpu_end",))  # at the run's end, beside gpu_end
    ray_nodes: Object | None = when_set()  # a merged Ray run: every node's snapshot

    def add(self, **keys: Any) -> RunEnvironmentRecord:
        """Open keys (or fields) added while the run goes, written after the fields in the order added; self."""
        for k, v in keys.items():
            setattr(self, k, v)
        return self

    def extra(self, key: str) -> Any:
        """An open key's value (None where the snapshot has none)."""
        names = {f.name for f in fields(self)}
        return None if key in names else vars(self).get(key)
