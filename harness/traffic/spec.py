"""A traffic description (`--traffic FILE`: TOML, JSON or a trace) and the seeded schedule of requests it gives
at a rate; the same (spec, seed, rate) gives the same requests at the same intended times (docs/traffic.md)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import tomllib

from harness.errors import UsageError
from harness.traffic.trace import FORMATS, MAX_DIM, UNITS, TraceRecord, read_text, read_trace

PROCESSES = ("poisson", "gamma", "onoff", "fixed", "trace")
# Bounds on a traffic description, as `harness run` bounds its own options (each a UsageError naming the file):
MAX_SPEC_BYTES = 1 * 2**20  # a TOML/JSON description is a few lines
MAX_REQUESTS = 10_000_000  # a schedule is held in memory (16 bytes a request and its shapes)
MAX_RATE = 1e7  # requests/s: faster than a replay loop can send
CV_RANGE = (1e-3, 1e3)  # a gamma process's coefficient of variation: outside it, all gaps are 0 or one is all
MIN_PHASE_S = 1e-6  # an on/off phase shorter than a microsecond is no phase
TRACE_SUFFIXES = (".jsonl", ".csv")


@dataclass(frozen=True)
class Request:
    index: int
    intended_ns: int  # intended send time, from the replay's start
    dims: Mapping[str, int]  # the request's shape: symbolic dimension -> size (batch: rows it carries)


@dataclass(frozen=True)
class TrafficSpec:
    process: str = "poisson"
    rate: float = 100.0
    cv: float = 1.0
    on_s: float = 0.05
    off_s: float = 0.15
    shapes: Mapping[str, tuple[tuple[int, float], ...]] = field(default_factory=dict)
    requests: int = 2000
    seed: int = 0
    trace: tuple[TraceRecord, ...] = ()
    source: str = "<inline>"

    def describe(self) -> str:
        mix = "; ".join(f"{d} " + ", ".join(f"{v}:{w:g}" for v, w in h) for d, h in sorted(self.shapes.items()))
        if self.process == "trace":
            span = self.trace[-1].offset_ns / 1e9 if self.trace else 0.0
            return f"trace {self.source} ({len(self.trace)} requests over {span:g} s)"
        arr = {"poisson": "Poisson", "fixed": "fixed rate", "gamma": f"gamma cv {self.cv:g}",
               "onoff": f"on/off {self.on_s:g} s on, {self.off_s:g} s off"}[self.process]
        return f"{arr}, {self.requests} requests, seed {self.seed}" + (f"; {mix}" if mix else "")

    @property
    def dims(self) -> frozenset[str]:
        if self.process == "trace":
            return frozenset(k for r in self.trace for k in r.dims)
        return frozenset(self.shapes)

    @property
    def natural_rate(self) -> float:
        """The rate the spec states (a trace: its recorded mean rate)."""
        if self.process == "trace":
            span = self.trace[-1].offset_ns / 1e9 if len(self.trace) > 1 else 0.0
            return (len(self.trace) - 1) / span if span > 0 else float("inf")
        return self.rate

    def with_(self, **changes: Any) -> TrafficSpec:
        import dataclasses

        return dataclasses.replace(self, **changes)

    def schedule(self, rate: float | None = None, requests: int | None = None, seed: int | None = None,
                 ) -> tuple[Request, ...]:
        """The requests at mean `rate` requests/s (default: the spec's); `rate` = inf sends all at time 0
        (the saturation probe). A trace is sped up by rate / its recorded rate and repeated end to end when
        more requests are asked than it has."""
        rate = self.natural_rate if rate is None else float(rate)
        n = self.requests if requests is None else int(requests)
        seed = self.seed if seed is None else int(seed)
        if n < 1:
            raise UsageError(f"{self.source}: requests must be at least 1")
        if not rate > 0:
            raise UsageError(f"{self.source}: the request rate must be > 0 (got {rate})")
        if self.process == "trace":
            return self._trace_schedule(rate, n)
        times, shapes = self.arrays(rate, n, seed)
        keys = sorted(shapes)
        cols = [shapes[k].tolist() for k in keys]
        return tuple(Request(i, t, dict(zip(keys, row, strict=True)))
                     for i, (t, *row) in enumerate(zip(times.tolist(), *cols, strict=True)))

    def arrays(self, rate: float, n: int, seed: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The schedule as arrays: intended times (ns, int64) and each dimension's sizes (not for a trace)."""
        gaps = unit_gaps(self.process, n, seed, self.cv, self.on_s * self.rate, self.off_s * self.rate)
        times = np.zeros(n) if math.isinf(rate) else np.concatenate(([0.0], np.cumsum(gaps[1:]))) / rate
        return np.round(times * 1e9).astype(np.int64), draw_shapes(self.shapes, n, seed)

    def _trace_schedule(self, rate: float, n: int) -> tuple[Request, ...]:
        recs = self.trace
        natural = self.natural_rate
        speed = rate / natural if math.isfinite(rate) and math.isfinite(natural) else math.inf
        period = recs[-1].offset_ns + (recs[-1].offset_ns / max(1, len(recs) - 1))
        out = []
        for i in range(n):
            r = recs[i % len(recs)]
            t = 0 if math.isinf(speed) else round((r.offset_ns + (i // len(recs)) * period) / speed)
            out.append(Request(i, int(t), dict(r.dims)))
        return tuple(out)


def unit_gaps(process: str, n: int, seed: int, cv: float = 1.0, on: float = 0.0, off: float = 0.0) -> np.ndarray:
    """n inter-arrival gaps of mean 1 (gap 0 is unused: the first request goes at time 0). on/off are the
    on and off periods in units of the mean gap."""
    rng = np.random.default_rng([seed, 0x7A11])
    if process == "fixed":
        return np.ones(n)
    if process == "poisson":
        return rng.exponential(1.0, n)
    if process == "gamma":
        k = 1.0 / (cv * cv)
        return rng.gamma(k, 1.0 / k, n)
    if process == "onoff":  # Poisson at rate (on + off) / on while on; silences of `off` between bursts
        peak = (on + off) / on
        active = np.cumsum(rng.exponential(1.0 / peak, n))  # time spent in bursts
        real = active + np.floor(active / on) * off
        return np.diff(real, prepend=0.0)
    raise UsageError(f"arrival process {process!r} is not one of {', '.join(PROCESSES)}")


def draw_shapes(shapes: Mapping[str, tuple[tuple[int, float], ...]], n: int, seed: int) -> dict[str, np.ndarray]:
    """Each dimension's n sizes from its histogram, from a generator of its own (adding a dimension changes no
    other dimension's draws)."""
    out: dict[str, np.ndarray] = {}
    for dim in sorted(shapes):
        values = np.array([v for v, _ in shapes[dim]], dtype=np.int64)
        weights = np.array([w for _, w in shapes[dim]], dtype=float)
        rng = np.random.default_rng([seed, 0x5EA7, *dim.encode()])
        out[dim] = values[rng.choice(len(values), size=n, p=weights / weights.sum())]
    return out


def load_traffic(path: str | Path, seed: int | None = None) -> TrafficSpec:
    """A traffic spec from TOML or JSON, or a trace file (.jsonl, .csv) taken as `process = "trace"`; bad
    input is a UsageError naming the file."""
    p = Path(path)
    if p.suffix.lower() in TRACE_SUFFIXES:
        trace = read_trace(p)
        spec = TrafficSpec(process="trace", trace=trace, requests=len(trace), source=str(p))
        return spec if seed is None else spec.with_(seed=seed)
    text = read_text(p, f"--traffic {p}", MAX_SPEC_BYTES)
    try:
        data = json.loads(text) if p.suffix.lower() == ".json" else tomllib.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"--traffic {p}: not valid {'JSON' if p.suffix.lower() == '.json' else 'TOML'}: "
                         f"{exc}") from None
    spec = parse_traffic(data, p)
    return spec if seed is None else spec.with_(seed=seed)


def parse_traffic(data: Mapping[str, Any], path: Path) -> TrafficSpec:
    where = f"--traffic {path}"
    if not isinstance(data, Mapping):
        raise UsageError(f"{where}: the top level must be a table")
    unknown = set(data) - {"seed", "requests", "arrival", "shapes", "trace"}
    if unknown:
        raise UsageError(f"{where}: unknown key(s) {', '.join(sorted(unknown))} (seed, requests, arrival, shapes, "
                         f"trace)")
    arrival = data.get("arrival", {})
    if not isinstance(arrival, Mapping):
        raise UsageError(f"{where}: [arrival] must be a table")
    bad = set(arrival) - {"process", "rate", "cv", "on_s", "off_s"}
    if bad:
        raise UsageError(f"{where}: unknown [arrival] key(s) {', '.join(sorted(bad))}")
    process = str(arrival.get("process", "trace" if "trace" in data else "poisson"))
    if process not in PROCESSES:
        raise UsageError(f"{where}: arrival process {process!r} is not one of {', '.join(PROCESSES)}")

    def pos(key: str, default: float, lo: float = 0.0, hi: float = math.inf) -> float:
        return _positive(where, arrival, key, default, lo, hi)

    seed = data.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise UsageError(f"{where}: seed must be a whole number >= 0 (got {seed!r})")
    shapes = _shape_histograms(where, data.get("shapes", {}))
    trace = _trace_table(where, data.get("trace"), path) if process == "trace" else ()
    requests = data.get("requests", len(trace) if trace else 2000)
    if isinstance(requests, bool) or not isinstance(requests, int) or not 1 <= requests <= MAX_REQUESTS:
        raise UsageError(f"{where}: requests must be a whole number from 1 to {MAX_REQUESTS:,} (got {requests!r})")
    return TrafficSpec(process=process, rate=pos("rate", 100.0, hi=MAX_RATE),
                       cv=pos("cv", 1.0, *CV_RANGE), on_s=pos("on_s", 0.05, lo=MIN_PHASE_S),
                       off_s=pos("off_s", 0.15, lo=MIN_PHASE_S), shapes=shapes,
                       requests=requests, seed=seed, trace=trace, source=str(path))


def _positive(where: str, table: Mapping[str, Any], key: str, default: float, lo: float, hi: float) -> float:
    """`table[key]` (else `default`) as a number > 0 within [lo, hi]; UsageError otherwise."""
    v = table.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v <= 0:
        raise UsageError(f"{where}: {key} must be a number > 0 (got {v!r})")
    if not lo <= v <= hi:
        raise UsageError(f"{where}: {key} = {v!r} is outside [{lo:g}, {hi:g}]")
    return float(v)


def _shape_histograms(where: str, raw_shapes: Any) -> dict[str, tuple[tuple[int, float], ...]]:
    """The [shapes] table checked: dim -> its (size, weight) rows, sorted by size; UsageError for a bad one."""
    if not isinstance(raw_shapes, Mapping):
        raise UsageError(f"{where}: [shapes] must be a table of histograms")
    shapes: dict[str, tuple[tuple[int, float], ...]] = {}
    for dim, hist in raw_shapes.items():
        if not isinstance(hist, Mapping) or not hist:
            raise UsageError(f"{where}: shapes.{dim} must be a histogram (size = weight)")
        rows = []
        for k, w in hist.items():
            try:
                size = int(str(k))
            except ValueError:
                raise UsageError(f"{where}: shapes.{dim}: size {k!r} is not a whole number") from None
            if size < 1 or isinstance(w, bool) or not isinstance(w, int | float) or not math.isfinite(w) or w < 0:
                raise UsageError(f"{where}: shapes.{dim}: {k} = {w!r}: sizes >= 1, weights >= 0")
            if size > MAX_DIM:
                raise UsageError(f"{where}: shapes.{dim}: size {size} is above the maximum {MAX_DIM} (a feed that "
                                 "size would not fit in memory)")
            rows.append((size, float(w)))
        if sum(w for _, w in rows) <= 0:
            raise UsageError(f"{where}: shapes.{dim}: the weights sum to 0")
        shapes[str(dim)] = tuple(sorted(rows))
    return shapes


def _trace_table(where: str, t: Any, path: Path) -> tuple[TraceRecord, ...]:
    """The requests of the [trace] table's file (beside the traffic file `path`, never outside its folder)."""
    if not isinstance(t, Mapping) or "file" not in t:
        raise UsageError(f"{where}: process = \"trace\" needs [trace] file = \"...\"")
    fmt, unit = str(t.get("format", "auto")), str(t.get("time_unit", "ms"))
    if fmt not in FORMATS or unit not in UNITS:
        raise UsageError(f"{where}: [trace] format is one of {', '.join(FORMATS)}; time_unit one of "
                         f"{', '.join(UNITS)}")
    target = path.parent / str(t["file"])
    folder = path.absolute().parent.resolve()
    if folder not in target.absolute().resolve().parents:
        raise UsageError(f"{where}: [trace] file {str(t['file'])!r} is outside the traffic file's folder "
                         f"({folder}); refused (put the trace beside the traffic file)")
    return read_trace(target, fmt, unit)
