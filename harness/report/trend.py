"""The report's trend section: per case, p50 and p99 over the recorded runs with the change points marked."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harness.report.charts import FONT_SIZE, chart, color, nice_axis


def trend_chart(row: dict[str, Any], width: int = 420, height: int = 210) -> str:
    """A small SVG: p50 and p99 (ms) by run (oldest left); a dashed line before each change point, labelled
    with its size, and a dotted one labelled "model changed" before each run whose model fingerprint differs from
    the run before. `row`: harness.history.record.trend_rows."""
    runs: Sequence[str] = row["runs"]
    lines = {"p50": row["p50"], "p99": row["p99"]}

    def draw(fig: Any, ax: Any, tips: dict[str, str]) -> None:
        for i, (name, vals) in enumerate(lines.items()):
            pts = [(j, v) for j, v in enumerate(vals) if v is not None]
            if not pts:
                continue
            ax.plot([j for j, _ in pts], [v for _, v in pts], color=color(i), lw=1.5, marker="o", ms=3,
                    label=name)
            for j, v in pts:
                gid = f"{name}-{j}"
                ax.plot([j], [v], "o", ms=6, alpha=0)[0].set_gid(gid)
                tips[gid] = f"{runs[j]}: {name} {v:.4g} ms"
        for n, (index, pct) in enumerate(row.get("changes", ())):
            x = index - 0.5
            gid = f"change-{n}"
            ax.axvline(x, color="#c00", ls="--", lw=1).set_gid(gid)
            tips[gid] = f"change point: {pct:+.1f}% p50 from run {runs[index]}"
            ax.annotate(f"{pct:+.1f}%", (x, 1.0), xycoords=("data", "axes fraction"), xytext=(3, 2),
                        textcoords="offset points", color="#c00", fontsize=FONT_SIZE, va="bottom")
        for n, (index, before, after) in enumerate(row.get("model_changes", ())):
            # the run where the model's fingerprint changed: a step there is the new model's, not a regression
            x = index - 0.5
            gid = f"model-{n}"
            ax.axvline(x, color="#555", ls=":", lw=1.5).set_gid(gid)
            tips[gid] = f"model changed at run {runs[index]}: fingerprint {before} -> {after}"
            ax.annotate("model changed", (x, 0.0), xycoords=("data", "axes fraction"), xytext=(3, 2),
                        textcoords="offset points", color="#555", fontsize=FONT_SIZE, va="bottom")
        ax.set_xlim(-0.5, max(1, len(runs) - 1) + 0.5)
        nice_axis(ax, "x")
        nice_axis(ax, "y")
        ax.xaxis.get_major_locator().set_params(integer=True)
        step = row.get("detectable")  # the smallest p50 step this history shows after 5 more runs
        shows = f"; shows a {100 * step:.1f}% p50 step after 5 more" if step is not None else ""
        ax.set_xlabel(f"recorded runs ({len(runs)}, oldest left){shows}")
        ax.set_ylabel("ms")
        fig.legend(*ax.get_legend_handles_labels(), loc="outside right upper")

    return chart(draw, title=f"{row['case']}: p50 and p99 over {len(runs)} recorded runs", width=width,
                 height=height, salt=repr(row))
