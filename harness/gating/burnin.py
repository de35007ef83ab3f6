"""A burn-in judged: per case, a trend test across the rounds of `harness qualify --burn-in` (Kendall's tau,
Theil-Sen change) on latency and memory (docs/qualification.md#burn-in)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.gating.qualify import RequirementResult
from harness.results.schema import RunResults

# A trend is named when Kendall's tau is significant at this level (per case and figure) and the Theil-Sen
# change from the first round to the last is over MIN_TREND_PCT (measured: tests/gating/test_burnin.py).
TREND_ALPHA = 0.01
MIN_TREND_PCT = 3.0
MIN_ROUNDS = 6  # Kendall's exact p for 6 rounds in perfect order is 0.0028; 5 rounds cannot reach 0.01 (0.017)


@dataclass
class Trend:
    what: str
    values: list[float]
    tau: float | None
    p: float | None
    change_pct: float | None
    found: bool
    text: str

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def trend(values: Sequence[float], what: str, higher_is_worse: bool = True) -> Trend:
    """Whether `values` (one per round, in order) move with the round beyond noise and beyond MIN_TREND_PCT."""
    from scipy.stats import kendalltau, theilslopes

    v = [float(x) for x in values if x is not None and np.isfinite(x)]
    if len(v) < MIN_ROUNDS:
        return Trend(what, v, None, None, None, False, f"{what}: {len(v)} rounds, at least {MIN_ROUNDS} needed")
    x = np.arange(len(v))
    tau, p = kendalltau(x, v)
    slope = theilslopes(v, x)[0]
    base = float(np.median(v))
    change = float(100.0 * slope * (len(v) - 1) / base) if base else 0.0
    worse = bool(change > 0 if higher_is_worse else change < 0)
    found = bool(p < TREND_ALPHA and abs(change) > MIN_TREND_PCT)
    direction = ("worse" if worse else "better") if found else ""
    text = (f"{what}: {change:+.1f}% from the first of {len(v)} rounds to the last (Theil-Sen), Kendall tau "
            f"{tau:+.2f}, p {p:.2g}" + (f": a trend, {direction} over the burn-in" if found else ": no trend"))
    return Trend(what, v, float(tau), float(p), change, bool(found and worse), text)


def burn_in_rows(rounds: Sequence[RunResults], case_ids: Sequence[str]) -> tuple[list[RequirementResult],
                                                                                  list[dict[str, Any]]]:
    """Per case, a requirement row `burn_in_stable` (FAIL when its p50 or its host memory peak grows over the
    rounds) and the trends behind it."""
    rows, trends = [], []
    for cid in case_ids:
        p50, mem = [], []
        for run in rounds:
            c = next((c for c in run.cases if c.case.id == cid), None)
            p50.append(c.latency.p50_ms if c is not None and c.latency else None)
            mem.append(c.host_peak_mb if c is not None else None)
        t = [trend(p50, "latency p50 (ms)"), trend(mem, "host memory peak (MB)")]
        trends.append({"case_id": cid, "trends": [x.as_dict() for x in t]})
        bad = [x for x in t if x.found]
        judged = any(x.tau is not None for x in t)
        reason = "; ".join(x.text for x in (bad or t))
        rows.append(RequirementResult(cid, "burn_in_stable", "no trend over the burn-in", True,
                                      not bad if judged else None, "", judged and not bad, None, None, reason,
                                      inconclusive=not judged, unjudged="" if judged else "too few rounds"))
    return rows, trends
