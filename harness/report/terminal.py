"""The terminal table printed at the end of a run."""

from __future__ import annotations

import pandas as pd

from harness.display import visible
from harness.report.tables import cases_frame, drift_cell
from harness.results.schema import RunResults


def terminal_table(run: RunResults, width: int = 160) -> str:
    df = cases_frame(run)
    if df.empty:
        return "(no cases)"
    df.insert(0, "case", [c.case.id for c in run.cases])
    cols = ["case", "status", "latency_p50_ms", "latency_p99_ms", "cv", "throughput_sps", "rel_l2",
            "top1_agreement", "reason"]
    view = df[cols].rename(columns={"latency_p50_ms": "p50_ms", "latency_p99_ms": "p99_ms",
                                    "throughput_sps": "samples/s", "top1_agreement": "top1"})
    view = view.assign(case=view["case"].map(visible), reason=view["reason"].fillna("").map(visible).str.slice(0, 70))
    numeric = ["p50_ms", "p99_ms", "cv", "samples/s", "top1"]
    view[numeric] = view[numeric].apply(pd.to_numeric, errors="coerce")  # None (not measured) -> NaN -> "-"
    view["rel_l2"] = [drift_cell(v, note) for v, note in zip(df["rel_l2"], df["drift_note"])]
    return view.to_string(index=False, na_rep="-", float_format=lambda v: f"{v:.4g}", max_colwidth=72)
