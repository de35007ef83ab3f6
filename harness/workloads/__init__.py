"""Workloads: one Workload per kind of work (forward matrix, generation, conformance), one registry line each."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.errors import UsageError
from harness.results.schema import RunResults
from harness.workloads.base import Workload, WorkerState

_WORKLOADS: dict[str, Workload] = {}


def register_workload(workload: Workload) -> Workload:
    _WORKLOADS[workload.name] = workload
    return workload


def get_workload(name: str) -> Workload:
    try:
        return _WORKLOADS[name]
    except KeyError:
        raise UsageError(f"unknown workload {name!r}; valid workloads: {', '.join(_WORKLOADS)}") from None


def workload_names() -> tuple[str, ...]:
    return tuple(_WORKLOADS)


def workload_of(run: RunResults) -> Workload | None:
    """The workload that made a stored run (its configuration names it; results from before the name:
    forward), or None where that workload is not installed here."""
    return _WORKLOADS.get(str(run.config.get("workload") or "forward"))


def render_report(runs: RunResults | Sequence[RunResults], out_dir: str | Path,
                  verdicts: Sequence[dict[str, Any]] | None = None, baseline_label: str | None = None,
                  gate_note: str | None = None, trends: Sequence[dict[str, Any]] | None = None) -> dict[str, Path]:
    """The report of stored runs (harness.report.render.write_outputs), one run's workload asked for the pages
    of its own beside it (Workload.report_pages); returns {name: path}."""
    from harness.report.render import write_outputs

    runs = [runs] if isinstance(runs, RunResults) else list(runs)
    workload = workload_of(runs[0]) if len(runs) == 1 else None
    return write_outputs(runs, out_dir, verdicts, baseline_label, gate_note, trends,
                         pages=workload.report_pages if workload is not None else None)


# ------------------------------------------------------------------ built-in workloads, one line each
from harness.workloads.forward.workload import FORWARD  # noqa: E402
from harness.workloads.generate.workload import GENERATE  # noqa: E402
from harness.workloads.conform.workload import CONFORM  # noqa: E402
from harness.workloads.ab.workload import AB  # noqa: E402
from harness.workloads.gate.workload import GATE  # noqa: E402

register_workload(FORWARD)
register_workload(GENERATE)
register_workload(CONFORM)
register_workload(AB)
register_workload(GATE)

__all__ = ["Workload", "WorkerState", "get_workload", "register_workload", "render_report", "workload_names",
           "workload_of"]
