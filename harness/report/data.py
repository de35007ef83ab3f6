"""What one report is made from, built once: the runs, their labels, the reference runtimes and the case table
(`cases_frame`, one build per report); every section of report.html and summary.md reads it (report.sections)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from harness.model import get_model
from harness.report.tables import as_runs, cases_frame, run_labels
from harness.results.schema import CaseResult, RunResults

Runs = RunResults | Sequence[RunResults]


def reference_runtimes(runs: Sequence[RunResults]) -> dict[str, str]:
    """Model -> the runtime improvements are measured against (recorded in results, else from the zoo)."""
    out: dict[str, str] = {}
    for run in runs:
        for c in run.cases:
            if c.reference_runtime:
                out.setdefault(c.case.model, c.reference_runtime)
    for run in runs:
        for c in run.cases:
            if c.case.model not in out:
                try:
                    out[c.case.model] = get_model(c.case.model).reference
                except Exception:  # noqa: BLE001 - a model not in this installation's zoo
                    pass
    return out


@dataclass
class ReportData:
    """One report's inputs and the tables every section shares.

    runs, labels (one per run), refs (model -> reference runtime), forward (the runs without their generation
    cases: the comparison's cases), frame (cases_frame(runs): one row per case of every run, in order) and
    forward_frame (frame's rows of the forward cases, renumbered: what cases_frame(forward) gives, not built
    again). The gate's verdicts, the history's trends and the conformance page are the report's other inputs.
    `shared(key, make)` keeps a value several sections use (the comparison tables), made once."""

    runs: list[RunResults]
    labels: list[str]
    refs: dict[str, str]
    forward: list[RunResults]
    frame: pd.DataFrame
    forward_frame: pd.DataFrame
    verdicts: list[dict[str, Any]] = field(default_factory=list)
    baseline_label: str | None = None
    gate_note: str | None = None
    trends: list[dict[str, Any]] = field(default_factory=list)
    conformance_page: str | None = None
    _shared: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def build(cls, runs: Runs, verdicts: Sequence[dict[str, Any]] | None = None, baseline_label: str | None = None,
              gate_note: str | None = None, trends: Sequence[dict[str, Any]] | None = None,
              conformance_page: str | None = None) -> ReportData:
        runs = as_runs(runs)
        frame = cases_frame(runs)
        forward = [dataclasses.replace(r, cases=[c for c in r.cases if c.case.gen is None]) for r in runs]
        keep = pd.Series([c.case.gen is None for r in runs for c in r.cases], index=frame.index, dtype=bool)
        return cls(runs=runs, labels=run_labels(runs), refs=reference_runtimes(runs), forward=forward, frame=frame,
                   forward_frame=frame[keep].reset_index(drop=True), verdicts=list(verdicts or []),
                   baseline_label=baseline_label, gate_note=gate_note, trends=list(trends or []),
                   conformance_page=conformance_page)

    @property
    def multi(self) -> bool:
        return len(self.runs) > 1

    @property
    def all_cases(self) -> list[tuple[str, CaseResult]]:
        """(run label, case) of every case of every run, in order (frame's rows)."""
        return [(label, c) for run, label in zip(self.runs, self.labels) for c in run.cases]

    def shared(self, key: str, make: Callable[[], Any]) -> Any:
        if key not in self._shared:
            self._shared[key] = make()
        return self._shared[key]
