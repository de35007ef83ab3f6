"""Every rendering: tables (pandas), HTML (one Jinja2 environment, autoescape), Markdown, verdict tables,
certificates, the gate-check page, the terminal table and pytest-benchmark JSON."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.report import render
from harness.report.render import Runs


def write_outputs(runs: Runs, out_dir: str | Path, verdicts: Sequence[dict[str, Any]] | None = None,
                  baseline_label: str | None = None, gate_note: str | None = None,
                  trends: Sequence[dict[str, Any]] | None = None) -> dict[str, Path]:
    """render.write_outputs for a caller that cannot ask the run's workload (report/ does not import
    workloads/): `harness report` in cli.py until it calls harness.workloads.render_report. A run holding
    conformance cases gets the conform workload's page, as that workload would write it."""
    from harness.report.conformance import conformance_pages

    return render.write_outputs(runs, out_dir, verdicts, baseline_label, gate_note, trends, pages=conformance_pages)


__all__ = ["write_outputs"]
