"""The report's energy section (harness.measure.energy): joules per inference where a counter was read, and
why not where none could be."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def energy_section(all_cases: Sequence[tuple[str, Any]]) -> dict[str, Any] | None:
    """{"rows": measured or refused cases, "unavailable": the distinct reasons}; None when no case of the runs
    recorded energy (results from before it: the report stays as it was)."""
    rows, unavailable = [], {}
    for label, c in all_cases:
        e = c.energy
        if e is None:
            continue
        if e.status == "unavailable":
            unavailable[e.reason] = unavailable.get(e.reason, 0) + 1
            continue
        rows.append({"label": label, "case": c.case, "energy": e,
                     "sources": ", ".join(f"{s.name} {s.net_joules:.3g} J above {s.idle_w or 0:.3g} W idle"
                                          for s in e.sources)})
    if not rows and not unavailable:
        return None
    return {"rows": rows, "unavailable": unavailable}
