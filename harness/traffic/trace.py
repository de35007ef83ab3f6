"""Recorded traces (JSONL, CSV, AIPerf's mooncake_trace and single_turn): a timestamp and shapes per request
(formats: docs/traffic.md)."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import UsageError

FORMATS = ("auto", "jsonl", "csv", "mooncake", "aiperf-single-turn")
UNITS = {"s": 1e9, "ms": 1e6, "us": 1e3, "ns": 1.0}
TIME_KEYS = ("timestamp", "time", "t")
# Bounds on what a trace may hold, as `harness run` bounds its own inputs: a record costs a few hundred bytes in
# memory, so 2e6 of them stay under 1 GB; a dimension is at most the matrix's largest (MAX_DIM); a timestamp at
# most 30 days after the first (a replay longer than that is not a benchmark).
MAX_TRACE_BYTES = 256 * 2**20
MAX_TRACE_RECORDS = 2_000_000
MAX_DIM = 1 << 20
MAX_SPAN_S = 30 * 24 * 3600.0


def check_readable(p: Path, what: str, max_bytes: int) -> None:
    """Refuse, by stat alone (nothing opened: a FIFO cannot block, /dev/zero is never read), what is not a regular
    file of at most `max_bytes`; a UsageError naming the file and the problem."""
    import os
    import stat

    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise UsageError(f"{what}: no such file") from None
    except OSError as exc:
        raise UsageError(f"{what}: cannot stat: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "a FIFO (named pipe)" if stat.S_ISFIFO(st.st_mode) \
            else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "not a regular file"
        raise UsageError(f"{what}: is {kind}, not a regular file; refused")
    if st.st_size > max_bytes:
        raise UsageError(f"{what}: {st.st_size / 2**20:.1f} MiB is over the {max_bytes / 2**20:.0f} MiB a traffic "
                         "file may hold; refused")


def read_text(p: Path, what: str, max_bytes: int) -> str:
    """The file's text after check_readable: UTF-8, a byte-order mark dropped; a file that is not UTF-8 is a
    UsageError naming the file and the byte."""
    check_readable(p, what, max_bytes)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise UsageError(f"{what}: cannot read: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{what}: not UTF-8 text (byte {exc.start}: {data[exc.start:exc.start + 1]!r})") from None


@dataclass(frozen=True)
class TraceRecord:
    offset_ns: int  # intended send time, relative to the trace's first request
    dims: Mapping[str, int]


def read_trace(path: str | Path, fmt: str = "auto", time_unit: str = "ms") -> tuple[TraceRecord, ...]:
    """The trace's requests in time order; a bad file is a UsageError naming the file and the line."""
    p = Path(path)
    if fmt not in FORMATS:
        raise UsageError(f"{p}: trace format {fmt!r} is not one of {', '.join(FORMATS)}")
    if time_unit not in UNITS:
        raise UsageError(f"{p}: time_unit {time_unit!r} is not one of {', '.join(UNITS)}")
    text = read_text(p, f"{p}: the trace", MAX_TRACE_BYTES)
    if fmt == "auto":
        fmt = "csv" if p.suffix.lower() == ".csv" else "json"
    raw = _csv_records(text) if fmt == "csv" else _json_records(text, p)
    if len(raw) > MAX_TRACE_RECORDS:
        raise UsageError(f"{p}: over {MAX_TRACE_RECORDS:,} requests; a trace is replayed whole, so it is refused "
                         "(cut it, or describe its rate and shapes in a TOML traffic file)")
    if not raw:
        raise UsageError(f"{p}: the trace has no requests")
    if len(raw) < 2:
        raise UsageError(f"{p}: the trace has one request: a rate needs at least two (their gap)")
    if fmt == "json":
        keys = set(raw[0][1])
        fmt = "mooncake" if "input_length" in keys or "hash_ids" in keys else \
            "aiperf-single-turn" if keys & {"text", "texts", "delay"} else "jsonl"
    out = _send_times(raw, fmt, p, UNITS[time_unit])
    t0 = out[0][0]
    span_s = (out[-1][0] - t0) / 1e9
    if span_s > MAX_SPAN_S:
        raise UsageError(f"{p}: the timestamps span {span_s:.3g} s (over {MAX_SPAN_S / 86400:g} days; the unit is "
                         f"{time_unit!r}: a wrong [trace] time_unit?); refused")
    return tuple(TraceRecord(round(t - t0), d) for t, d in out)


def _csv_records(text: str) -> list[tuple[int, dict[str, Any]]]:
    """(line number, row) of a CSV trace, up to one past MAX_TRACE_RECORDS (the caller refuses that many)."""
    raw: list[tuple[int, dict[str, Any]]] = []
    for n, row in enumerate(csv.DictReader(text.splitlines()), start=2):
        raw.append((n, {k.strip(): v for k, v in row.items() if k is not None}))
        if len(raw) > MAX_TRACE_RECORDS:
            break
    return raw


def _json_records(text: str, p: Path) -> list[tuple[int, dict[str, Any]]]:
    """(line number, object) of a JSON-lines trace, blank lines skipped, up to one past MAX_TRACE_RECORDS; a line
    that is not a JSON object is a UsageError naming it."""
    raw: list[tuple[int, dict[str, Any]]] = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{p}:{n}: not JSON: {exc.msg}") from None
        if not isinstance(rec, dict):
            raise UsageError(f"{p}:{n}: a record must be a JSON object")
        raw.append((n, rec))
        if len(raw) > MAX_TRACE_RECORDS:
            break
    return raw


def _send_times(raw: list[tuple[int, dict[str, Any]]], fmt: str, p: Path,
                scale: float) -> list[tuple[float, dict[str, int]]]:
    """(send time in ns, dims) of every record, in time order: its timestamp, or (aiperf single-turn) the running
    sum of the delays since the last timestamp; `scale`: ns per unit of the trace's times."""
    out: list[tuple[float, dict[str, int]]] = []
    clock = 0.0
    for n, rec in raw:
        where = f"{p}:{n}"
        if fmt == "aiperf-single-turn" and "delay" in rec and rec.get("timestamp") is None:
            clock += _number(rec["delay"], where, "delay")
            t = clock
        else:
            t = _time(rec, where)
            clock = t
        out.append((t * scale, _dims(rec, fmt, where)))
    out.sort(key=lambda r: r[0])
    return out


def _number(value: Any, where: str, key: str) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise UsageError(f"{where}: {key} {value!r} is not a number") from None
    if not math.isfinite(x) or x < 0:
        raise UsageError(f"{where}: {key} {value!r} must be a finite number >= 0")
    if x > 1e15:  # any unit: past 30 years of nanoseconds
        raise UsageError(f"{where}: {key} {value!r} is not a timestamp this replay can hold")
    return x


def _time(rec: Mapping[str, Any], where: str) -> float:
    for k in TIME_KEYS:
        if k in rec and rec[k] not in (None, ""):
            return _number(rec[k], where, k)
    raise UsageError(f"{where}: a record needs a timestamp ({' or '.join(TIME_KEYS)})")


def _int(value: Any, where: str, key: str) -> int:
    try:
        x = int(str(value).strip())
    except ValueError:
        raise UsageError(f"{where}: {key} {value!r} is not a whole number") from None
    if x < 1:
        raise UsageError(f"{where}: {key} {value!r} must be at least 1")
    if x > MAX_DIM:
        raise UsageError(f"{where}: {key} {value!r} is above the maximum {MAX_DIM} (a feed that size would not fit)")
    return x


def _dims(rec: Mapping[str, Any], fmt: str, where: str) -> dict[str, int]:
    if fmt == "mooncake":
        if "input_length" not in rec:
            raise UsageError(f"{where}: a mooncake record needs input_length (text_input and payload records "
                             f"carry no length without a tokenizer)")
        return {"seq": _int(rec["input_length"], where, "input_length")}
    if fmt == "aiperf-single-turn":
        if "input_length" in rec:
            return {"seq": _int(rec["input_length"], where, "input_length")}
        texts = rec.get("texts") or ([rec["text"]] if rec.get("text") else [])
        words = sum(len(str(t.get("contents", t) if isinstance(t, dict) else t).split()) for t in texts)
        if words < 1:
            raise UsageError(f"{where}: a single_turn record needs text (its words are the sequence length)")
        return {"seq": words}
    return {k: _int(v, where, k) for k, v in rec.items() if k not in TIME_KEYS and v not in (None, "")}
