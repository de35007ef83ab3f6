"""The report's conclusion per model, precision and shape: the fastest configuration within its drift tolerance, by
how much, or why the figures do not rank the configurations (contended figures, overlapping intervals)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from harness.report.tables import as_runs, cases_frame, runtime_label
from harness.results.schema import RunResults


@dataclass(frozen=True)
class Conclusion:
    """One comparison's conclusion. `ranked`: the figures order the fastest configuration before the next one
    (its p50 interval entirely below the next one's, and the next one's figure not inflated by contention);
    `text` says it in a sentence."""

    model: str
    precision: str
    batch: int
    seq: int | None
    source: str
    ranked: bool
    best: str | None
    runner_up: str | None
    factor: float | None  # runner-up's p50 / best's p50 (> 1)
    text: str

    @property
    def shape(self) -> str:
        return f"b{self.batch}" + (f" s{self.seq}" if self.seq is not None else "")


def _num(v: Any) -> float | None:
    if v is None or v is pd.NA or (isinstance(v, float) and pd.isna(v)):
        return None
    return float(v)


def _interval(row: Any) -> str:
    lo, hi = _num(row["latency_p50_ci_low_ms"]), _num(row["latency_p50_ci_high_ms"])
    if lo is None and hi is None:
        return ""
    return f" [{'-inf' if lo is None else f'{lo:.4g}'}, {'inf' if hi is None else f'{hi:.4g}'}]"


def conclusions(runs: RunResults | Sequence[RunResults], frame: pd.DataFrame | None = None) -> list[Conclusion]:
    """Per (source, model, precision, batch, seq) of the measured forward cases: the fastest configuration (a
    runtime, with its variant) whose drift is within the model's tolerance (status passed), against the next
    fastest. A contended figure only overstates latency, so the fastest may be contended (quiet it could only be
    faster) but the next one may not (quiet it might be the faster); intervals that overlap do not rank."""
    runs = as_runs(runs)
    df = cases_frame(runs) if frame is None else frame  # `frame`: cases_frame(runs), already built by the caller
    df = df[df["status"].isin(["passed", "failed"]) & df["gen"].isna()]
    out: list[Conclusion] = []
    for key, g in df.groupby(["source", "model", "precision", "batch", "seq"], dropna=False, sort=False):
        source, model, precision, batch, seq = key
        seq = None if pd.isna(seq) else int(seq)
        within = g[(g["status"] == "passed") & g["latency_p50_ms"].notna()]
        over = [runtime_label(r) for _, r in g.iterrows() if r["status"] == "failed"]
        left_out = f" ({', '.join(over)} left out: drift over tolerance)" if over else ""
        base = dict(model=str(model), precision=str(precision), batch=int(batch), seq=seq, source=str(source))
        if within.empty:
            out.append(Conclusion(**base, ranked=False, best=None, runner_up=None, factor=None,
                                  text=f"not ranked: no configuration within its drift tolerance{left_out}"))
            continue
        within = within.sort_values("latency_p50_ms")
        rows = [r for _, r in within.iterrows()]
        best = rows[0]
        name = runtime_label(best)
        if len(rows) == 1:
            out.append(Conclusion(**base, ranked=False, best=name, runner_up=None, factor=None,
                                  text=f"only {name} measured within its drift tolerance{left_out}"))
            continue
        second = rows[1]
        other = runtime_label(second)
        factor = float(second["latency_p50_ms"]) / float(best["latency_p50_ms"])
        contended = [runtime_label(r) for r in rows if r.get("contended") in (True, 1)]
        if len(contended) == len(rows):
            why = "every configuration's figure was contended (the machine, not the runtimes, set them)"
        elif second.get("contended") in (True, 1):
            why = (f"{other}'s figure was contended: quiet it could be faster than {name}'s "
                   f"({float(second['latency_p50_ms']):.4g} vs {float(best['latency_p50_ms']):.4g} ms)")
        else:
            hi = _num(best["latency_p50_ci_high_ms"])
            lo = _num(second["latency_p50_ci_low_ms"])
            hi = float(best["latency_p50_ms"]) if hi is None and best["latency_p50_ci_low_ms"] is None else hi
            lo = float(second["latency_p50_ms"]) if lo is None and second["latency_p50_ci_high_ms"] is None else lo
            why = "" if hi is not None and lo is not None and hi < lo else (
                f"the p50 intervals of {name}{_interval(best)} and {other}{_interval(second)} overlap")
        if why:
            out.append(Conclusion(**base, ranked=False, best=name, runner_up=other, factor=factor,
                                  text=f"not ranked: {why}; {name} measured {factor:.2f}x {other}'s speed"
                                       f"{left_out}"))
            continue
        note = " (its own figure contended: quiet it can only be faster)" if best.get("contended") in (True, 1) else ""
        out.append(Conclusion(**base, ranked=True, best=name, runner_up=other, factor=factor,
                              text=f"fastest within drift tolerance: {name}, {factor:.1f}x {other}{note}{left_out}"))
    return out


def conclusion_lines(found: Sequence[Conclusion], multi: bool = False) -> list[str]:
    """One line per model and precision (and machine, with several): each shape's conclusion, e.g.
    "resnet18 fp32: b1 fastest within drift tolerance: openvino-cpu, 1.3x ort-cpu; b4 not ranked: ..."."""
    groups: dict[tuple[str, str, str], list[Conclusion]] = {}
    for c in found:
        groups.setdefault((c.model, c.precision, c.source), []).append(c)
    lines = []
    for (model, precision, source), items in groups.items():
        where = f" @ {source}" if multi else ""
        parts = [f"{c.shape}: {c.text}" for c in items]
        lines.append(f"{model} {precision}{where}: " + "; ".join(parts))
    return lines
