"""`harness run --history`: record the finished run, and the trend of its cases for the report."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness.errors import HarnessError
from harness.results.schema import RunResults


def record_run(run: RunResults, url: str, source: str, note: Callable[[str], None]) -> list[dict[str, Any]] | None:
    """Record `run` in the history at `url` and return its cases' trends on this machine (trend_rows); a
    database that fails costs the history and the trend section, never the run (one note says why)."""
    from sqlalchemy.exc import SQLAlchemyError

    from harness.history.store import masked, open_history

    if not run.complete:
        note(f"history: run {run.run_id} is incomplete: not recorded in {masked(url)}")
        return None
    try:
        history = open_history(url)
        try:
            n = history.add(run, source)
            note(f"history: recorded {n} cases in {masked(url)}")
            return trend_rows(history, run)
        finally:
            history.close()
    except (HarnessError, SQLAlchemyError, OSError) as exc:
        note(f"history: not recorded: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
        return None


def trend_rows(history: Any, run: RunResults) -> list[dict[str, Any]]:
    """Per measured case of `run`, on its machine: run ids, p50 and p99 (ms) over the recorded runs, oldest first,
    the p50 level change points (index of the first run after, change in percent) and `detectable`: the smallest
    p50 step (relative) its history can show after 5 more runs (None: too short)."""
    from harness.history.store import detectable
    fingerprint = str(run.environment.machine_fingerprint or run.environment.hostname or "unknown")
    keys = [c.case.id for c in run.cases if c.measured]
    if not keys:
        return []
    p99 = {(s.case, s.fingerprint): {p.run_id: p.value for p in s.points} for s in history.series(keys, "p99")}
    rows = []
    for s in history.series(keys, "p50"):
        if s.fingerprint != fingerprint:
            continue
        tail = p99.get((s.case, s.fingerprint), {})
        rows.append({"case": s.case, "machine": s.machine, "runs": [p.run_id for p in s.points],
                     "p50": [p.value for p in s.points], "p99": [tail.get(p.run_id) for p in s.points],
                     "changes": [(c.index, 100.0 * c.change) for c in s.changes if c.kind == "level"],
                     "model_changes": [(m.index, m.before[:12], m.after[:12]) for m in s.model_changes],
                     "detectable": detectable(s)[5]})
    return rows
