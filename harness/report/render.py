"""Write a run's derived outputs: results.csv, report.html, summary.md, benchmark.json (pytest-benchmark); the
sections come from the registry (harness.report.sections), built from one ReportData per report."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from markupsafe import Markup

from harness.display import csv_cell
from harness.gating.unjudged import gate_headline, verdict_rows
from harness.report.data import ReportData
from harness.report.formats import fmt
from harness.report.sections import HTML_SECTIONS, MARKDOWN_SECTIONS
from harness.report.tables import as_runs, drift_cell
from harness.report.templating import environment, render_template
from harness.results.schema import RunResults
from harness.results.store import atomic_write_text

Runs = RunResults | Sequence[RunResults]


def render_html(runs: Runs, verdicts: Sequence[dict[str, Any]] | None = None,
                baseline_label: str | None = None, gate_note: str | None = None,
                trends: Sequence[dict[str, Any]] | None = None, conformance_page: str | None = None,
                data: ReportData | None = None) -> str:
    """The self-contained HTML report of one run or several (side by side, labelled by machine).

    `verdicts`: optional gating records against a baseline (dicts with case, metric, verdict, baseline,
    current, ratio, reason), shown in the summary; `gate_note`: what gate-check measured of the gate
    (`GateConfig.measured_line()`), shown above them; `trends`: the recorded history of the run's cases
    (harness.history.record.trend_rows), drawn in the trend section; `conformance_page`: the relative address
    of the operator conformance page beside it (linked under the title). `data`: the report's data when the
    caller has it (write_outputs: one per report), else built here from the arguments.
    """
    d = data or ReportData.build(runs, verdicts, baseline_label, gate_note, trends, conformance_page)
    sections = {name: s.build(d) for name, s in HTML_SECTIONS.items()}
    own = [Markup(environment(False).from_string(s.template).render(section=sections[name], fmt=fmt,
                                                                      multi=d.multi))
           for name, s in HTML_SECTIONS.items() if s.template is not None and sections[name]]
    vcounts: dict[str, int] = {}
    for v in d.verdicts:
        vcounts[v["verdict"]] = vcounts.get(v["verdict"], 0) + 1
    return render_template(
        "report.html.j2", strict=False,
        runs=d.runs, multi=d.multi, labels=d.labels, run=d.runs[0], config=d.runs[0].config, refs=d.refs,
        fmt=fmt, dfmt=lambda r, v, digits=3: drift_cell(v, r.get("drift_note"), lambda x: fmt(x, digits)),
        verdicts=d.verdicts, verdict_counts=vcounts, baseline_label=d.baseline_label, gate_note=d.gate_note,
        gate_line=gate_headline(verdict_rows(d.verdicts)) if d.verdicts else "",
        conformance_page=d.conformance_page, own_sections=own,
        **{name: value for name, value in sections.items() if HTML_SECTIONS[name].template is None},
    )


def render_markdown(runs: Runs, verdicts: Sequence[dict[str, Any]] | None = None, max_rows: int = 40,
                    data: ReportData | None = None) -> str:
    """summary.md: a short Markdown summary for a CI job summary or a PR comment (tables via pandas), its
    sections from the registry (harness.report.sections.MARKDOWN_SECTIONS)."""
    d = data or ReportData.build(runs, verdicts)
    return "\n".join(line for section in MARKDOWN_SECTIONS.values() for line in section(d, max_rows))


def benchmark_json(run: RunResults) -> dict[str, Any]:
    """Our raw samples in pytest-benchmark's JSON format, so `pytest-benchmark compare` works on our runs.

    Statistics are computed by pytest-benchmark's own Stats class from the raw samples (seconds).
    """
    from pytest_benchmark.stats import Stats

    try:
        from importlib.metadata import version

        pb_version = version("pytest-benchmark")
    except Exception:  # noqa: BLE001
        pb_version = "unknown"
    benches = []
    for c in run.cases:
        if not c.measured or not c.samples_ns:
            continue
        stats = Stats()
        for s in c.samples_ns:
            stats.update(s / 1e9)
        d = stats.as_dict()
        d["data"] = [s / 1e9 for s in c.samples_ns]
        d["iterations"] = 1
        benches.append({
            "group": f"{c.case.model}-{c.case.precision}-b{c.case.batch}"
                     + (f"-s{c.case.seq}" if c.case.seq is not None else ""),
            "name": f"test_case[{c.case.id}]",
            "fullname": f"harness_suites/matrix/test_matrix.py::test_case[{c.case.id}]",
            "params": {"harness_case": c.case.id}, "param": c.case.id,
            "extra_info": {"runtime": c.case.runtime, "status": c.status, "timing_scope": c.timing_scope,
                           "throughput_sps": c.throughput_sps, "warmup_iters": c.warmup_iters},
            "options": {"disable_gc": False, "timer": "perf_counter_ns", "min_rounds": run.config.get(
                "timing", {}).get("min_iters"), "max_time": None, "warmup": True},
            "stats": d,
        })
    env = run.environment
    return {
        "machine_info": {"node": env.hostname, "processor": env.cpu_model, "machine": env.machine,
                         "python_version": env.python,
                         "cpu": {"brand_raw": env.cpu_model, "count": env.cpu_cores_logical}},
        "commit_info": {"id": (env.git or {}).get("commit"), "dirty": (env.git or {}).get("dirty")},
        "benchmarks": benches, "datetime": run.started_at, "version": pb_version,
    }


def csv_text(df: pd.DataFrame) -> str:
    """results.csv: every text cell through `csv_cell` (control characters visible, formulas defused)."""
    return df.astype(object).map(csv_cell).to_csv(index=False)



# A workload's own pages of a run (Workload.report_pages): (run, folder, report.html's name) -> {name: path}
RunPages = Callable[[RunResults, Path, "str | None"], dict[str, Path]]


def write_outputs(runs: Runs, out_dir: str | Path, verdicts: Sequence[dict[str, Any]] | None = None,
                  baseline_label: str | None = None, gate_note: str | None = None,
                  trends: Sequence[dict[str, Any]] | None = None, pages: RunPages | None = None) -> dict[str, Path]:
    """results.csv, report.html, summary.md and (one run) benchmark.json in `out_dir`, and (one run) the pages
    its workload renders of its own (`pages`: harness.workloads.render_report asks the run's workload).

    results.json is written by the caller (a run) or is the input (a report of stored runs).
    """
    runs = as_runs(runs)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"csv": out / "results.csv", "html": out / "report.html", "markdown": out / "summary.md"}
    conformance = out / "conformance.html"
    data = ReportData.build(runs, verdicts, baseline_label, gate_note, trends)  # the case table, built once
    atomic_write_text(paths["csv"], csv_text(data.frame))
    if len(runs) == 1:
        paths["benchmark"] = out / "benchmark.json"
        atomic_write_text(paths["benchmark"], json.dumps(benchmark_json(runs[0]), indent=1))
        if pages is not None:
            paths.update(pages(runs[0], out, paths["html"].name))
    # this run's page, or one already in the folder
    data.conformance_page = conformance.name if conformance.is_file() else None
    atomic_write_text(paths["html"], render_html(runs, data=data))
    atomic_write_text(paths["markdown"], render_markdown(runs, data=data))
    return paths

