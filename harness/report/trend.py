"""The report's trend section: per case, p50 and p99 over the recorded runs with the change points marked."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harness.report.charts import FONT, Scale, _axes, _legend, _svg, color, escape


def trend_chart(row: dict[str, Any], width: int = 420, height: int = 200) -> str:
    """A small SVG: p50 and p99 (ms) by run (oldest left); a dashed line before each change point, labelled
    with its size. `row`: harness.history.record.trend_rows."""
    runs: Sequence[str] = row["runs"]
    lines = {"p50": row["p50"], "p99": row["p99"]}
    left, top, right, bottom = 56, 22, width - 60, height - 40
    xs = Scale(0.0, max(1.0, len(runs) - 1.0), left + 8, right - 8)
    ys = Scale.fit([v for vals in lines.values() for v in vals if v is not None], bottom, top, zero=False)
    body = _axes(None, ys, f"recorded runs ({len(runs)}, oldest left)", "ms", left, top, right, bottom)
    for index, pct in row.get("changes", ()):
        x = (xs(index - 1) + xs(index)) / 2
        body.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{bottom}" stroke="#c00" '
                    f'stroke-dasharray="4 3"><title>change point: {pct:+.1f}% p50 from run '
                    f'{escape(runs[index])}</title></line>'
                    f'<text x="{x + 3:.1f}" y="{top - 6}" fill="#c00" {FONT}>{pct:+.1f}%</text>')
    for i, (name, vals) in enumerate(lines.items()):
        pts = [(xs(j), ys(v), v, runs[j]) for j, v in enumerate(vals) if v is not None]
        if not pts:
            continue
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y, _, _ in pts)
        body.append(f'<polyline fill="none" stroke="{color(i)}" stroke-width="1.5" points="{path}"/>')
        for x, y, v, run in pts:
            body.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2" fill="{color(i)}"><title>{escape(run)}: '
                        f'{name} {v:.4g} ms</title></circle>')
    body += _legend(list(lines), right + 8, top + 10, [color(i) for i in range(len(lines))])
    return _svg(width, height, body, f"{row['case']}: p50 and p99 over {len(runs)} recorded runs")
