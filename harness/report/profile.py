"""--profile in the report: per model "where the time goes" (runtimes side by side per layer), the roofline chart
(cases under the measured ceilings) and the percent of peak per case."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd

from harness.profile.layers import TOP_LAYERS, layer_label
from harness.results.schema import CaseResult, RunResults
from harness.results.stored import CostRecord, RooflineRecord


def _or(v: Any, default: Any) -> Any:
    """A stored figure, or `default` where the record does not hold it (what `.get(key, default)` read)."""
    return default if v is None else v


def _profiled(runs: Sequence[RunResults], labels: Sequence[str]) -> list[tuple[str, CaseResult]]:
    return [(label, c) for run, label in zip(runs, labels) for c in run.cases
            if c.profile and c.measured and c.case.gen is None]


def _column(c: CaseResult, label: str, multi: bool, precisions: int) -> str:
    name = c.case.runtime_label + (f" {c.case.precision}" if precisions > 1 else "")
    return f"{name} @ {label}" if multi else name


def _drift(c: CaseResult) -> dict[str, float]:
    """node -> rel L2 of the nodes localisation found drifting in this case."""
    found = c.localization.first_bad if c.localization else []
    return {str(n.node): n.rel_l2 for n in found if n.rel_l2 is not None}


def layer_names(cases: Sequence[CaseResult]) -> dict[str, str]:
    """ONNX node -> the name a person knows it by (layers.layer_label): the module path any case recorded for it,
    else the module paths a profile mapped by the export's module scopes credited to it (results from before
    `module` was recorded), else the node's own name."""
    module: dict[str, str] = {}
    module_ops: dict[str, list[str]] = {}
    op_types: dict[str, str] = {}
    for c in cases:
        by_scope = "module scopes" in str(c.profile.method or "")
        for n in c.profile.nodes or ():
            name = str(n.node)
            op_types.setdefault(name, str(n.op_type or ""))
            if n.module:
                module.setdefault(name, str(n.module))
            if by_scope and n.ops:
                module_ops.setdefault(name, [str(o) for o in n.ops])
    return {n: layer_label(n, op_types.get(n, ""), module.get(n), module_ops.get(n, ())) for n in op_types}


def where_time_goes(runs: Sequence[RunResults], labels: Sequence[str], top: int = TOP_LAYERS) -> list[dict[str, Any]]:
    """One table per model and shape: a row per layer (the `top` layers by their largest time in any runtime,
    then "the rest", the ops not mapped onto a node, the profile's total, the measured p50 and the gap) and,
    per runtime, its time (ms), share of its profile and achieved GFLOP/s; the layer's drift (rel L2) where a
    case's localisation found it drifting. Runtimes that could not profile are listed with why."""
    cases = _profiled(runs, labels)
    multi = len(runs) > 1
    out = []
    groups: dict[tuple[Any, ...], list[tuple[str, CaseResult]]] = {}
    for label, c in cases:
        groups.setdefault((c.case.model, c.case.batch, c.case.seq), []).append((label, c))
    for (model, batch, seq), members in groups.items():
        precisions = len({c.case.precision for _, c in members})
        with_nodes = [(label, c) for label, c in members if c.profile.nodes]
        unsupported = [{"column": _column(c, label, multi, precisions),
                        "why": c.profile.unsupported or c.profile.error}
                       for label, c in members if not c.profile.nodes]
        columns = [_column(c, label, multi, precisions) for label, c in with_nodes]
        records = [{"node": n.node, "op_type": _or(n.op_type, ""), "column": col, "time_ms": n.time_ms,
                    "share": n.share, "gflops": n.gflops, "fusion": _or(n.fusion, "")}
                   for col, (_, c) in zip(columns, with_nodes) for n in c.profile.nodes]
        names = layer_names([c for _, c in with_nodes])
        if not records:
            out.append({"model": model, "batch": batch, "seq": seq, "columns": [], "rows": [],
                        "unsupported": unsupported})
            continue
        df = pd.DataFrame(records)
        rank = df.groupby("node")["time_ms"].max().sort_values(ascending=False)
        keep = list(rank.index[:top])
        rows = []
        for node in keep:
            mine = df[df["node"] == node]
            cells = {r.column: {"time_ms": r.time_ms, "share": r.share, "gflops": r.gflops, "fusion": r.fusion}
                     for r in mine.itertuples()}
            drift = {col: _drift(c).get(node) for col, (_, c) in zip(columns, with_nodes)}
            rows.append({"layer": names.get(node, node), "node": node, "op_type": mine["op_type"].iloc[0],
                         "cells": cells,
                         "drift": {k: v for k, v in drift.items() if v is not None}})
        rest = df[~df["node"].isin(keep)].groupby("column")
        rest_ms, rest_n = rest["time_ms"].sum().to_dict(), rest["node"].nunique().to_dict()
        summary = []
        for col, (_, c) in zip(columns, with_nodes):
            p = c.profile
            total = p.total_ms or 0.0
            unmapped = _or(p.unmapped_ms, 0.0)
            summary.append({"column": col, "rest_ms": rest_ms.get(col, 0.0), "rest_layers": rest_n.get(col, 0),
                            "rest_share": rest_ms.get(col, 0.0) / total if total else None,
                            "unmapped_ms": unmapped, "unmapped_share": unmapped / total if total else None,
                            "total_ms": total, "p50_ms": p.measured_p50_ms, "gap": p.gap_percent,
                            "adjacent_ms": p.adjacent_p50_ms, "adjacent_gap": p.adjacent_gap_percent,
                            "wall_ms": p.wall_ms, "runs": p.runs, "method": p.method})
        out.append({"model": model, "batch": batch, "seq": seq, "columns": columns, "rows": rows,
                    "summary": summary, "unsupported": unsupported})
    return out


def peak_rows(runs: Sequence[RunResults], labels: Sequence[str]) -> list[dict[str, Any]]:
    """Per profiled case: its FLOPs and bytes, achieved GFLOP/s and GB/s at the measured p50, arithmetic
    intensity, percent of the roof and of the peak, the bound, and the profile's gap to the p50."""
    out = []
    for label, c in _profiled(runs, labels):
        p = c.profile
        roof = p.roofline or RooflineRecord()
        cost = p.cost or CostRecord()
        out.append({"case": c.case.id, "model": c.case.model, "label": label, "p50_ms": c.latency and c.latency.p50_ms,
                    "gflop": cost.flops / 1e9 if cost.flops is not None else None,
                    "mb": cost.bytes_moved / 1e6 if cost.bytes_moved is not None else None,
                    "gflops": roof.achieved_gflops, "gbs": roof.achieved_gbs,
                    "intensity": roof.intensity, "percent_of_roof": roof.percent_of_roof,
                    "percent_of_peak": roof.percent_of_peak, "bound": roof.bound,
                    "over_roof": roof.over_roof, "roof_error": roof.error,
                    "peak_gflops": roof.peak_gflops, "bandwidth_gbs": roof.bandwidth_gbs,
                    "profile_total_ms": p.total_ms, "gap_percent": p.gap_percent,
                    "adjacent_p50_ms": p.adjacent_p50_ms, "adjacent_gap_percent": p.adjacent_gap_percent,
                    "profile_note": p.unsupported or p.error or ""})
    return out


def roofline_chart(rows: Sequence[dict[str, Any]]) -> str | None:
    """The cases as points (arithmetic intensity, achieved GFLOP/s) under the measured ceilings (one roof per
    distinct peak and bandwidth), log-log; None when no case has a roofline point."""
    from harness.report import charts

    points = [r for r in rows if r.get("gflops") and r.get("intensity")]
    if not points:
        return None
    roofs = sorted({(float(r["peak_gflops"]), float(r["bandwidth_gbs"])) for r in points})

    def draw(fig: Any, ax: Any, tips: dict[str, str]) -> None:
        xs = [float(r["intensity"]) for r in points]
        lo = 10.0 ** math.floor(math.log10(min(xs + [peak / bw for peak, bw in roofs])) - 0.5)  # floats: a
        hi = 10.0 ** math.ceil(math.log10(max(xs + [peak / bw for peak, bw in roofs])) + 0.5)  # big int is no axis
        for i, (peak, bw) in enumerate(roofs):
            ridge = peak / bw
            ax.plot([lo, ridge, hi], [lo * bw, peak, peak], color="#555", lw=1.2, ls="-" if i == 0 else "--",
                    label=f"roof {peak:.3g} GFLOP/s, {bw:.3g} GB/s")
        groups = list(dict.fromkeys(r["case"].split("-b")[0] for r in points))
        for gi, g in enumerate(groups):
            mine = [r for r in points if r["case"].split("-b")[0] == g]
            ax.scatter([float(r["intensity"]) for r in mine], [float(r["gflops"]) for r in mine],
                       color=charts.color(gi), s=26, zorder=3, label=g)
        for i, r in enumerate(points):  # each point labelled: runtime (variant), precision, shape
            ax.annotate(point_label(r), (float(r["intensity"]), float(r["gflops"])), xytext=(5, 4 - 10 * (i % 2)),
                        textcoords="offset points", fontsize=7, color="#333")
        for i, r in enumerate(points):
            gid = f"rf{i}"
            ax.plot([float(r["intensity"])], [float(r["gflops"])], "o", ms=8, alpha=0)[0].set_gid(gid)
            tips[gid] = (f"{r['case']}: {float(r['gflops']):.3g} GFLOP/s at {float(r['intensity']):.3g} FLOP/byte, "
                         f"{float(r['percent_of_roof']):.3g}% of the roof, {r['bound']}-bound")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        charts.nice_axis(ax, "x", log=True)
        charts.nice_axis(ax, "y", log=True)
        ax.set_xlabel("arithmetic intensity (FLOP/byte, unfused traffic)")
        ax.set_ylabel("achieved GFLOP/s (at p50)")
        fig.legend(*ax.get_legend_handles_labels(), loc="outside right upper")

    return charts.chart(draw, title="roofline: cases under the measured ceilings", width=640, height=320,
                        salt=repr([(r["case"], r["gflops"], r["intensity"]) for r in points]))


def point_label(r: dict[str, Any]) -> str:
    """A roofline point's label: the case id without its model (the legend names the model), e.g.
    "ort-cpu-fp32-b1~opt=basic"; "over the roof" where it lies above the ceilings."""
    case, model = str(r["case"]), str(r.get("model") or "")
    text = case[len(model) + 1:] if model and case.startswith(model + "-") else case
    return text + (" (over the roof)" if r.get("over_roof") else "")


def profile_markdown(runs: Sequence[RunResults], labels: Sequence[str], table: Any) -> list[str]:
    """summary.md's lines: the percent of peak per case, then each model's top layers per runtime."""
    rows = peak_rows(runs, labels)
    if not rows:
        return []

    def f(v: Any, d: int = 3) -> str:
        return "-" if v is None else f"{v:.{d}g}"

    peak = pd.DataFrame([{"case": r["case"], "p50 ms": f(r["p50_ms"]), "GFLOP/s": f(r["gflops"]),
                          "GB/s": f(r["gbs"]), "FLOP/byte": f(r["intensity"]),
                          "% of roof": f(r["percent_of_roof"]), "% of peak": f(r["percent_of_peak"]),
                          "bound": (r["bound"] or r["roof_error"] or "-")
                          + (" (over the roof: ceilings too low)" if r["over_roof"] else ""), "profile ms": f(r["profile_total_ms"]),
                          "gap %": f(r["gap_percent"], 2), "adjacent p50 ms": f(r["adjacent_p50_ms"]),
                          "gap to it %": f(r["adjacent_gap_percent"], 2), "note": r["profile_note"][:120]}
                         for r in rows])
    lines = ["### Where the time goes (--profile)", "", table(peak), ""]
    for t in where_time_goes(runs, labels):
        if not t["rows"]:
            continue
        shape = f"b{t['batch']}" + (f" s{t['seq']}" if t["seq"] is not None else "")
        view = pd.DataFrame([{"layer": r["layer"], "ONNX node": r["node"] if r["node"] != r["layer"] else "",
                              "op": r["op_type"],
                              **{c: (f"{r['cells'][c]['time_ms']:.3f} ({100 * r['cells'][c]['share']:.0f}%)"
                                     if c in r["cells"] else "-") for c in t["columns"]}} for r in t["rows"]]
                            + [{"layer": "the rest", "ONNX node": "",
                                **{s["column"]: f"{s['rest_ms']:.3f} ({s['rest_layers']} layers)"
                                   for s in t["summary"]}},
                               {"layer": "not mapped", "ONNX node": "",
                                **{s["column"]: f"{s['unmapped_ms']:.3f}" for s in t["summary"]}},
                               {"layer": "profile total / p50", "ONNX node": "",
                                **{s["column"]: f"{s['total_ms']:.3f} / {s['p50_ms']:.3f} ({s['gap']:+.1f}%)"
                                   for s in t["summary"]}},
                               {"layer": "adjacent p50 (gap)", "ONNX node": "",
                                **{s["column"]: f"{s['adjacent_ms']:.3f} ({s['adjacent_gap']:+.1f}%)"
                                   if s["adjacent_ms"] is not None and s["adjacent_gap"] is not None else "-"
                                   for s in t["summary"]}}])
        lines += [f"#### {t['model']} {shape} (ms per inference, share of the profile)", "", table(view), ""]
    return lines
