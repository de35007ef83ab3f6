"""The report's comparison sections (tables per model with conclusions and latency box plots, p50 over batch size,
speed-up vs drift, drift tables, the "All cases" rows), each from the ReportData's one case table."""

from __future__ import annotations

from typing import Any

import pandas as pd
from markupsafe import Markup, escape

from harness.report import charts
from harness.report.conclusions import Conclusion, conclusions
from harness.report.data import ReportData
from harness.report.tables import comparison_tables, drift_tables, interval_text, runtime_label, variant_tables
from harness.results.schema import RunResults
from harness.results.stats import LatencyStats, quoted, too_few_text


def found(data: ReportData) -> list[Conclusion]:
    """The comparison's conclusions over the forward cases (made once per report)."""
    return data.shared("conclusions", lambda: conclusions(data.forward, frame=data.forward_frame))


def tables(data: ReportData) -> list[dict[str, Any]]:
    """The comparison tables of the forward cases, each with its conclusion (one run) and its latency box plot
    (made once per report: the tables by model and the batch charts read them)."""
    def make() -> list[dict[str, Any]]:
        out = comparison_tables(data.forward, data.refs, frame=data.forward_frame)
        by_key = {(c.model, c.precision, c.batch, c.seq): c for c in found(data)}
        for t in out:
            t["conclusion"] = None if data.multi else by_key.get((t["model"], t["precision"], t["batch"], t["seq"]))
        _latency_charts(data.forward, data.labels, out)
        return out

    return data.shared("tables", make)


def tables_by_model(data: ReportData) -> dict[str, list[dict[str, Any]]]:
    by_model: dict[str, list[dict[str, Any]]] = {}
    for t in tables(data):
        by_model.setdefault(t["model"], []).append(t)
    return by_model


def batch_charts(data: ReportData) -> dict[str, list[dict[str, Any]]]:
    return _batch_charts(tables(data))


def tradeoff(data: ReportData) -> dict[str, Any]:
    return _tradeoff_charts(data.forward_frame, data.refs)


def drift(data: ReportData) -> dict[str, list[dict[str, Any]]]:
    return {m: _records(d) for m, d in drift_tables(data.forward, frame=data.forward_frame).items()}


def variants(data: ReportData) -> list[dict[str, Any]]:
    return variant_tables(data.forward, frame=data.forward_frame)


def rows(data: ReportData) -> list[dict[str, Any]]:
    """The "All cases" table: a row per case of every run (the case table's), with its intervals in words."""
    return data.shared("rows", lambda: [{**row, "id": c.case.id, **_interval_cells(c.latency)}
                                        for row, (_, c) in zip(_records(data.frame), data.all_cases)])


def unbounded(data: ReportData) -> bool:
    """Whether an interval of the "All cases" table is unbounded on a side (the note under it)."""
    return any("inf" in (r.get("p50_ci") or "") + (r.get("p99_ci") or "") for r in rows(data))


def _interval_cells(lat: LatencyStats | None) -> dict[str, str]:
    """The "All cases" table's extra latency text: the 95% intervals of the p50 and p99 ("" where the results
    predate them), and what stands instead of a p99 from too few samples ("n/a (n=12 < 100)")."""
    out = {"p50_ci": "", "p99_ci": "", "p99_na": ""}
    if lat is None:
        return out
    for q in (50, 99):
        interval = lat.interval(q)
        if not quoted(q, lat.iterations):
            out[f"p{q}_na"] = too_few_text(q, lat.iterations)
        elif interval is not None:
            out[f"p{q}_ci"] = interval_text(*interval)
    return out


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    rows = df.to_dict("records")
    for r in rows:
        for k, v in r.items():
            if v is pd.NA or (isinstance(v, float) and v != v):
                r[k] = None
    return rows


def _latency_charts(runs: list[RunResults], labels: list[str], tables: list[dict[str, Any]]) -> None:
    """Attach to each comparison table the distribution of its cases' raw samples (box plot)."""
    samples: dict[tuple[str, str], list[int]] = {}
    multi = len(runs) > 1
    for run, label in zip(runs, labels):
        for c in run.cases:
            if c.measured and c.samples_ns:
                col = f"{c.case.runtime_label} @ {label}" if multi else c.case.runtime_label
                key = (f"{c.case.model}|{c.case.precision}|{c.case.batch}|{c.case.seq}", col)
                samples.setdefault(key, list(c.samples_ns))
    for t in tables:
        key = f"{t['model']}|{t['precision']}|{t['batch']}|{t['seq']}"
        rows = [(col, [s / 1e6 for s in samples[(key, col)]]) for col in t["runtimes"] if (key, col) in samples]
        t["box"] = Markup(charts.box_chart(rows, title=f"latency distribution {t['model']}",
                                           x_label="latency per call (ms): whiskers p1-p99, box p25-p75, "
                                                   "mark p50")) if rows else None


def _batch_charts(tables: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Per model: p50 latency over batch size, a line per runtime column, per (precision, seq)."""
    groups: dict[tuple[str, str, Any], dict[str, list[tuple[float, float]]]] = {}
    for t in tables:
        p50 = next((r for r in t["rows"] if r["metric"].key == "latency_p50_ms"), None)
        if p50 is None:
            continue
        series = groups.setdefault((t["model"], t["precision"], t["seq"]), {})
        for col, v in p50["values"].items():
            if v is not None:
                series.setdefault(col, []).append((float(t["batch"]), v))
    out: dict[str, list[dict[str, Any]]] = {}
    for (model, precision, seq), series in groups.items():
        if len({x for pts in series.values() for x, _ in pts}) < 2:
            continue
        what = f"{precision}" + (f", seq {seq}" if seq is not None else "")
        out.setdefault(model, []).append({"what": what, "svg": Markup(charts.line_chart(
            series, title=f"p50 latency vs batch size, {model} {what}", x_label="batch size",
            y_label="p50 latency (ms)"))})
    return out


def _tradeoff_charts(frame: pd.DataFrame, refs: dict[str, str]) -> dict[str, Any]:
    """Per model: speed-up over the reference runtime's FP32 case (same shape, same run) vs drift; `frame`: the
    forward cases' table."""
    df = frame
    df = df[df["status"].isin(["passed", "failed"])].copy()
    df["runtime"] = [runtime_label(row) for _, row in df.iterrows()]  # a variant is a point of its own
    out: dict[str, Any] = {}
    for model, g in df.groupby("model", sort=False):
        ref = refs.get(str(model))
        base = g[(g["runtime"] == ref) & (g["precision"] == "fp32")]
        base_p50 = {(r.batch, None if pd.isna(r.seq) else r.seq, r.source): r.latency_p50_ms
                    for r in base.itertuples()}
        points, exact = [], []
        for r in g.itertuples():
            b = base_p50.get((r.batch, None if pd.isna(r.seq) else r.seq, r.source))
            if b is None or not r.latency_p50_ms or r.rel_l2 is None or pd.isna(r.rel_l2):
                continue
            shape = f"b{r.batch}" + ("" if pd.isna(r.seq) else f" s{r.seq}")
            if float(r.rel_l2) <= 0:  # no drift at all (the reference itself): a log axis has no place for 0
                exact.append(f"{r.runtime} {r.precision} {shape} ({float(b) / float(r.latency_p50_ms):.2f}x)")
                continue
            points.append({"x": float(r.rel_l2), "y": float(b) / float(r.latency_p50_ms),
                           "label": f"{r.runtime} {shape}", "group": str(r.precision)})
        if len({p["group"] for p in points}) > 1 or len(points) > 2:
            note = (f'<p class="muted small">Not drawn: {len(exact)} case(s) with no drift at all (rel L2 exactly 0, '
                    f"which a log axis cannot place; never plotted at a floor as if measured): "
                    f"{escape(', '.join(exact))}.</p>") if exact else ""
            out[str(model)] = Markup(charts.scatter_chart(
                points, title=f"speed-up vs drift, {model}", x_label="drift: rel L2 vs FP32 reference",
                y_label=f"speed-up vs {ref} fp32") + note)
    return out

