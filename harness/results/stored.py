"""The one reader for stored files (results, baselines, gate configs, specs): bounded parsing, declared schema."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, Strict, TypeAdapter, ValidationError

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

# How a record reads: unknown keys ignored (forward compatibility), strictness on each field's type above (a
# dataclass record cannot be strict as a whole: pydantic would then want an instance, not a dict).
RECORD_CONFIG = ConfigDict(extra="ignore")


class _Doc(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")


class BundleDoc(_Doc):
    baseline_schema: int
    name: Text = ""
    runs: Annotated[list[dict[str, Any]], Field(min_length=1)]
    replay: dict[str, Any] | None = None  # baseline_schema 2: what side A of `harness gate` re-runs (ReplayDoc)


class ReplayCaseDoc(_Doc):
    """What makes one case of a baseline reproducible (harness.gating.baseline.ReplayCase)."""

    artifact_sha256: Text | None = None
    artifact_bytes: Annotated[int, Field(ge=0)] | None = None
    not_kept: Text = ""  # why no artifact is stored ("" when one is)
    packages: dict[Text, Text | None] = Field(default_factory=dict)
    environment_key: Text | None = None
    feed_sha256: Text | None = None
    model_fingerprint: Text | None = None
    precision_recipe: Text | None = None
    timing_scope: Text | None = None


class ReplayDoc(_Doc):
    run_id: Text
    config: dict[str, Any] = Field(default_factory=dict)
    cases: dict[Text, ReplayCaseDoc] = Field(default_factory=dict)


def place(loc: tuple[Any, ...] | list[Any], prefix: str = "") -> str:
    """A pydantic location as a path into the document: ('cases', 3, 'samples_ns', 0) -> cases[3].samples_ns[0]."""
    out = prefix
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "the document"


def validate(model: type[BaseModel] | TypeAdapter[Any], doc: dict[str, Any], source: str, prefix: str = "") -> Any:
    """`doc` checked against `model` (a pydantic model, or a TypeAdapter over a record); ResultsError naming
    `source`, the place and the first problem."""
    try:
        if isinstance(model, TypeAdapter):
            return model.validate_python(doc)
        return model.model_validate(doc)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        e = errors[0]
        more = f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})" if len(errors) > 1 else ""
        got = "" if e["type"] == "missing" else f"; found {short(e.get('input'))}"
        raise ResultsError(f"{source}: {place(e['loc'], prefix)}: {e['msg'].lower()}{got}{more}") from None


def short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."
