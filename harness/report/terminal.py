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


def markdown_as_text(md: str) -> str:
    """Markdown written for a file (headings, **bold**, `code`, pipe tables) as plain terminal text: markers
    dropped, HTML entities decoded, a table's cells aligned in columns and its separator row left out."""
    import html
    import re

    def plain(s: str) -> str:
        s = re.sub(r"^#{1,6}\s+", "", s)
        s = s.replace("**", "").replace("`", "").replace("\\|", "|")
        return html.unescape(s)

    out: list[str] = []
    table: list[list[str]] = []

    def flush() -> None:
        if table:
            widths = [max(len(r[i]) if i < len(r) else 0 for r in table) for i in range(max(map(len, table)))]
            out.extend("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in table)
            table.clear()

    for line in md.splitlines():
        s = line.strip()
        if s.startswith("|") and s.endswith("|"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", s[1:-1])]
            if not all(re.fullmatch(r":?-{3,}:?", c) for c in cells):
                table.append([plain(c) for c in cells])
            continue
        flush()
        out.append(plain(line))
    flush()
    return "\n".join(out) + ("\n" if md.endswith("\n") else "")
