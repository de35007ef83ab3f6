"""The conformance page (conformance.html) and its terminal / Markdown summary, from stored conformance cases."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from harness.gating.conformance import conformance_info, conformance_status
from harness.results.schema import CaseResult, RunResults

# Worst first: the status a matrix cell is coloured by when its cases differ.
ORDER = ("crashed", "timeout", "oom", "error", "failed", "unsupported", "passed", "skipped")


def conformance_cases(run: RunResults) -> list[CaseResult]:
    return [c for c in run.cases if conformance_info(c) is not None]


def _column(c: CaseResult) -> str:
    return f"{c.case.runtime} {c.case.precision}"


def summary_rows(run: RunResults) -> list[dict[str, Any]]:
    """Per runtime and precision: counts per status, cases counted (all but skipped), pass rate, wall time."""
    groups: dict[str, Counter[str]] = defaultdict(Counter)
    for c in conformance_cases(run):
        groups[_column(c)][conformance_status(c) or c.status] += 1
    wall = run.config.get("wall_s") or {}
    rows = []
    for col, counts in groups.items():
        counted = sum(n for s, n in counts.items() if s != "skipped")
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
        counts = ", ".join(f"{r['counts'].get(s, 0)} {s}" for s in ORDER if r["counts"].get(s))
        rate = "n/a" if r["pass_rate"] is None else f"{r['pass_rate']:.1%}"
        wall = f", {r['wall_s']:.0f} s" if r["wall_s"] is not None else ""
        lines.append(f"{r['column']}: {r['passed']}/{r['counted']} passed ({rate}): {counts}{wall}")
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
            worst = next((s for s in ORDER if counts.get(s)), "none")
            total = sum(n for s, n in counts.items() if s != "skipped")
            title = ", ".join(f"{s} {counts[s]}" for s in ORDER if counts.get(s)) or "no cases"
            out.append({"status": worst, "text": f"{counts.get('passed', 0)}/{total}" if total else "–",
                        "title": title})
        rows.append({"op": op, "cells": out})
    return columns, rows


def failures(run: RunResults) -> list[dict[str, Any]]:
    """Every case that did not pass (skipped FP16 no-ops left out), worst status first."""
    out = []
    for c in conformance_cases(run):
        status = conformance_status(c) or c.status
        if status in ("passed", "skipped"):
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
                           rows=rows, failures=failures(run), order=ORDER,
                           machine=run.environment.get("machine") or run.environment.get("hostname") or "")
