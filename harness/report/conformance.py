"""The conformance page (conformance.html) and its terminal / Markdown summary, from stored conformance cases."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from harness.gating.conformance import conformance_info, conformance_status
from harness.results.schema import CaseResult, RunResults

# Worst first: the status a matrix cell is coloured by when its cases differ.
ORDER = ("crashed", "timeout", "oom", "error", "failed", "unsupported", "conversion", "nondeterministic", "passed",
         "skipped")
# Whose answer each status is, and so which list of the page shows it. The runtime's: failures (a wrong answer,
# an exception, a dead worker) and unsupported (a refusal to load); the harness's: conversion (its own FP16
# conversion failed); nobody's: nondeterministic (the expected output is random) and skipped (FP16 no-op).
FAILURES = ("crashed", "timeout", "oom", "error", "failed")
# Not counted in a runtime's pass rate: they say nothing about the runtime.
NOT_COUNTED = ("skipped", "conversion", "nondeterministic")
EXPLAIN = {
    "failed": "ran, but the outputs are outside ONNX's tolerance",
    "error": "loaded, then inference raised",
    "crashed": "the worker process died", "timeout": "the case ran past its time limit",
    "oom": "the case ran past its memory limit",
    "unsupported": "the runtime refused to load or compile the model",
    "conversion": "the harness's own FP16 conversion failed: not charged to the runtime",
    "nondeterministic": "the expected output is random (e.g. training-mode Dropout): shapes and dtypes match, "
                        "values not judged",
    "passed": "outputs within ONNX's tolerance", "skipped": "FP16 left the model in FP32 (nothing to convert)",
}


def conformance_cases(run: RunResults) -> list[CaseResult]:
    return [c for c in run.cases if conformance_info(c) is not None]


def _column(c: CaseResult) -> str:
    return f"{c.case.runtime} {c.case.precision}"


def summary_rows(run: RunResults) -> list[dict[str, Any]]:
    """Per runtime and precision: counts per status, cases counted (all but NOT_COUNTED: skipped, the harness's
    conversion failures, nondeterministic cases), pass rate, wall time."""
    groups: dict[str, Counter[str]] = defaultdict(Counter)
    for c in conformance_cases(run):
        groups[_column(c)][conformance_status(c) or c.status] += 1
    wall = run.config.get("wall_s") or {}
    rows = []
    for col, counts in groups.items():
        counted = sum(n for s, n in counts.items() if s not in NOT_COUNTED)
        runtime, precision = col.split(" ")
        rows.append({"column": col, "runtime": runtime, "precision": precision, "counts": dict(counts),
                     "counted": counted, "passed": counts["passed"],
                     "pass_rate": counts["passed"] / counted if counted else None,
                     "wall_s": wall.get(f"{runtime}/{precision}") if isinstance(wall, dict) else None})
    return rows


def summary_text(run: RunResults) -> str:
    """One line per runtime and precision, for the terminal and the README."""
    lines = []
    for r in summary_rows(run):
        counts = ", ".join(f"{r['counts'].get(s, 0)} {s}" for s in ORDER if r["counts"].get(s)
                           and s not in NOT_COUNTED)
        apart = ", ".join(f"{r['counts'][s]} {s}" for s in NOT_COUNTED if r["counts"].get(s))
        rate = "n/a" if r["pass_rate"] is None else f"{r['pass_rate']:.1%}"
        wall = f", {r['wall_s']:.0f} s" if r["wall_s"] is not None else ""
        lines.append(f"{r['column']}: {r['passed']}/{r['counted']} passed ({rate}): {counts or 'none run'}{wall}"
                     + (f"; not counted: {apart}" if apart else ""))
    return "\n".join(lines)


def operator_matrix(run: RunResults) -> tuple[list[str], list[dict[str, Any]]]:
    """(columns, rows): one row per operator, one cell per runtime and precision with its status counts, the
    status it is coloured by (the worst present) and a hover title."""
    cells: dict[str, dict[str, Counter[str]]] = defaultdict(lambda: defaultdict(Counter))
    columns: list[str] = []
    for c in conformance_cases(run):
        col = _column(c)
        if col not in columns:
            columns.append(col)
        info = conformance_info(c) or {}
        cells[str(info.get("op", c.case.model))][col][conformance_status(c) or c.status] += 1
    rows = []
    for op in sorted(cells, key=lambda o: (o.startswith("model:"), o.lower())):
        out = []
        for col in columns:
            counts = cells[op].get(col, Counter())
            # coloured by the worst status that judges the runtime; by a not-counted one only when it is all
            worst = next((s for s in ORDER if counts.get(s) and s not in NOT_COUNTED), None) or \
                next((s for s in ORDER if counts.get(s)), "none")
            total = sum(n for s, n in counts.items() if s not in NOT_COUNTED)
            title = ", ".join(f"{s} {counts[s]}" for s in ORDER if counts.get(s)) or "no cases"
            out.append({"status": worst, "text": f"{counts.get('passed', 0)}/{total}" if total else "–",
                        "title": title})
        rows.append({"op": op, "cells": out})
    return columns, rows


def failures(run: RunResults, statuses: tuple[str, ...] = FAILURES) -> list[dict[str, Any]]:
    """The cases whose status is one of `statuses` (default: the runtime's failures, FAILURES), worst status
    first; the page lists unsupported, conversion and nondeterministic cases apart with the same rows."""
    out = []
    for c in conformance_cases(run):
        status = conformance_status(c) or c.status
        if status not in statuses:
            continue
        info = conformance_info(c) or {}
        out.append({"test": c.case.model, "op": info.get("op"), "opset": info.get("opset"),
                    "runtime": c.case.runtime, "precision": str(c.case.precision), "status": status,
                    "reason": (c.reason or "")[:600], "signal": c.signal, "max_abs": info.get("max_abs"),
                    "max_rel": info.get("max_rel"), "rtol": info.get("rtol"), "atol": info.get("atol"),
                    "reproduce": info.get("reproduce", "")})
    return sorted(out, key=lambda f: (ORDER.index(f["status"]) if f["status"] in ORDER else 9, f["op"] or "",
                                      f["test"]))


def conformance_html(run: RunResults, report_page: str | None = None) -> str:
    """conformance.html: pass rate per runtime, the operator x runtime matrix, the failures with commands;
    `report_page`: the relative address of the run's report.html beside it, linked under the title."""
    from harness.report.templating import render_template

    columns, rows = operator_matrix(run)
    cfg = run.config
    filters = cfg.get("filters") if isinstance(cfg.get("filters"), dict) else {}
    shown = "; ".join(f"{k} {', '.join(map(str, v)) if isinstance(v, list) else v}" for k, v in filters.items()
                      if v not in (None, [], True)) or "none"
    return render_template("conformance.html.j2", run=run, cfg=cfg, summary=summary_rows(run), columns=columns,
                           filters=shown, report_page=report_page,
                           rows=rows, failures=failures(run), unsupported=failures(run, ("unsupported",)),
                           conversion=failures(run, ("conversion",)),
                           nondeterministic=failures(run, ("nondeterministic",)), order=ORDER, explain=EXPLAIN,
                           not_counted=NOT_COUNTED,
                           machine=run.environment.machine or run.environment.hostname or "")


def conformance_pages(run: RunResults, out_dir: Path, report_page: str | None) -> dict[str, Path]:
    """conformance.html of a run holding conformance cases, in `out_dir` (linked to `report_page`); {} for any
    other run. The conform workload's pages (ConformWorkload.report_pages)."""
    from harness.results.store import atomic_write_text

    if not conformance_cases(run):
        return {}
    return {"conformance": atomic_write_text(out_dir / "conformance.html",
                                             conformance_html(run, report_page=report_page))}
