"""Inline SVG charts for the HTML report, drawn with matplotlib (Agg backend, SVG with text kept as text)."""

from __future__ import annotations

import hashlib
import io
import math
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from html import escape as _html_escape
from typing import Any


from harness.display import visible
from harness.results.stats import percentiles

# Why matplotlib: a well-kept plotting library whose SVG backend needs no browser or CDN (the chart is inlined in
# the self-contained HTML), keeps text as <text> (svg.fonttype "none": searchable, scales, tested here), gives
# nice tick values (MaxNLocator: steps of 1, 2, 2.5, 5 x 10^k) and fits tick labels and legends inside the
# figure (constrained layout). Plotly or Vega would need a JavaScript runtime on the page.

PALETTE = ("#3366cc", "#dc3912", "#ff9900", "#109618", "#990099", "#0099c6", "#dd4477", "#66aa00",
           "#b82e2e", "#316395", "#994499", "#22aa99")
FONT_SIZE = 9
NICE_STEPS = (1, 2, 2.5, 5, 10)
_RC = {"svg.fonttype": "none", "font.size": FONT_SIZE, "font.family": "sans-serif",
       "font.sans-serif": ["DejaVu Sans", "Arial", "Helvetica", "sans-serif"], "axes.titlesize": FONT_SIZE + 1,
       "axes.spines.top": False, "axes.spines.right": False, "axes.grid": True, "grid.color": "#e6e6e6",
       "axes.axisbelow": True, "axes.formatter.useoffset": False, "text.parse_math": False,
       "legend.frameon": False, "legend.fontsize": FONT_SIZE, "svg.image_inline": True}


def escape(text: str) -> str:
    """Text for SVG: control and bidi characters made visible, then HTML-escaped."""
    return _html_escape(visible(text))


def color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def fmt_tick(v: float) -> str:
    """A tick value as written on an axis: "0", "0.5", "250", "1.2e+04" (no trailing zeros)."""
    if v == 0:
        return "0"
    if abs(v) >= 1e5 or abs(v) < 1e-3:
        return f"{v:.2g}"
    return f"{v:.4g}"


def _log_tick(v: float, _pos: int | None = None) -> str:
    """A log axis's tick label: "0.5", "20", "1e-05", "2e+06" (every tick the locator placed is labelled)."""
    if v <= 0 or not math.isfinite(v):
        return ""
    e = math.floor(math.log10(v) + 1e-9)
    if -3 <= e <= 4:
        return f"{v:g}"
    m = v / 10.0 ** e
    return f"1e{e}" if math.isclose(m, 1.0, rel_tol=1e-6) else f"{m:g}e{e}"


LOG_SUBS = ((1.0,), (1.0, 2.0, 5.0), (1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0))


def log_ticks(lo: float, hi: float, min_ticks: int = 3, max_ticks: int = 8) -> list[float]:
    """Tick values of a log axis from `lo` to `hi` that a reader can read: the decades when the range holds at
    least `min_ticks` of them (every k-th decade beyond `max_ticks`), else 1-2-5 steps, else 1..9 steps: never a
    single labelled tick on a range of less than a few decades."""
    if not (lo > 0 and hi > 0 and math.isfinite(lo) and math.isfinite(hi)):
        return []
    lo, hi = min(lo, hi), max(lo, hi)
    e0, e1 = math.floor(math.log10(lo) + 1e-9), math.ceil(math.log10(hi) - 1e-9)
    ticks: list[float] = []
    for subs in LOG_SUBS:
        ticks = [m * 10.0 ** e for e in range(e0, e1 + 1) for m in subs
                 if lo * (1 - 1e-9) <= m * 10.0 ** e <= hi * (1 + 1e-9)]
        if len(ticks) >= min_ticks:
            break
    if len(ticks) > max_ticks and all(math.isclose(t / 10.0 ** round(math.log10(t)), 1.0) for t in ticks):
        step = math.ceil(len(ticks) / max_ticks)
        ticks = ticks[::step]
    return ticks


class _ReadableLogLocator:
    """matplotlib Locator placing log_ticks() over the axis's view interval, at draw time (after autoscale)."""

    def __new__(cls) -> Any:
        from matplotlib import ticker

        class Locator(ticker.Locator):
            def __call__(self) -> list[float]:
                vmin, vmax = self.axis.get_view_interval()
                return self.tick_values(vmin, vmax)

            def tick_values(self, vmin: float, vmax: float) -> list[float]:
                return log_ticks(vmin, vmax)

        return Locator()


def _text(s: Any) -> str:
    return visible(s)  # matplotlib escapes XML itself; text.parse_math is off, so "$" stays a dollar


@contextmanager
def _figure(width: int, height: int) -> Iterator[Any]:
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    with matplotlib.rc_context(_RC):  # a Figure on its own Agg canvas: no pyplot, no global backend state
        fig = Figure(figsize=(width / 72.0, height / 72.0), dpi=72, layout="constrained")
        FigureCanvasAgg(fig)
        yield fig


def nice_axis(ax: Any, axis: str = "y", log: bool = False) -> None:
    """Nice ticks on one axis: steps of 1, 2, 2.5 or 5 x 10^k (linear); on a log axis at least three labelled
    ticks (log_ticks: decades, else 1-2-5 or 1..9 steps within them)."""
    from matplotlib import ticker

    target = ax.yaxis if axis == "y" else ax.xaxis
    if log:  # several labelled ticks whatever the range (decades, else 1-2-5, else 1..9)
        target.set_major_locator(_ReadableLogLocator())
        target.set_major_formatter(ticker.FuncFormatter(_log_tick))
        target.set_minor_locator(ticker.LogLocator(base=10, subs="auto", numticks=12))
        target.set_minor_formatter(ticker.NullFormatter())
    else:
        target.set_major_locator(ticker.MaxNLocator(nbins=6, steps=list(NICE_STEPS)))
        target.set_major_formatter(ticker.FuncFormatter(lambda v, _p: fmt_tick(v)))


def _to_svg(fig: Any, title: str, tips: dict[str, str], salt: str) -> str:
    """The figure as one <svg> element: no XML prolog, ids prefixed per chart (several charts share a page),
    `tips` ({gid: text}) as <title> tooltips, the chart's title as its accessible name."""
    import matplotlib

    key = hashlib.sha1(f"{title}|{salt}".encode()).hexdigest()[:8]
    buf = io.StringIO()
    with matplotlib.rc_context({**_RC, "svg.hashsalt": key}):
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    svg = buf.getvalue()
    svg = svg[svg.index("<svg"):]
    svg = re.sub(r"\s*<metadata>.*?</metadata>", "", svg, count=1, flags=re.DOTALL)
    # inline in HTML5 the namespaces are implied: no URL in the page (a reader of it sees nothing to fetch)
    svg = re.sub(r'\s+xmlns(:xlink)?="[^"]*"', "", svg).replace("xlink:href=", "href=")
    pfx = f"c{key}-"
    svg = re.sub(r'\bid="([^"]+)"', lambda m: f'id="{pfx}{m.group(1)}"', svg)
    svg = re.sub(r"url\(#([^)]+)\)", lambda m: f"url(#{pfx}{m.group(1)})", svg)
    svg = re.sub(r'href="#([^"]+)"', lambda m: f'href="#{pfx}{m.group(1)}"', svg)
    for gid, tip in tips.items():
        svg = svg.replace(f'<g id="{pfx}{gid}">', f'<g id="{pfx}{gid}"><title>{escape(tip)}</title>', 1)
    w, h = (round(v * 72) for v in fig.get_size_inches())
    svg = re.sub(r'<svg ([^>]*?)width="[^"]*" height="[^"]*"',
                 lambda m: f'<svg class="chart" role="img" aria-label="{escape(title)}" {m.group(1)}'
                           f'width="{w}" height="{h}"', svg, count=1)
    svg = re.sub(r"(<svg[^>]*>)", lambda m: f"{m.group(1)}<title>{escape(title)}</title>", svg, count=1)
    return svg.strip()


def _legend(fig: Any, ax: Any, n: int) -> None:
    """The series' legend outside the axes, right of them (constrained layout makes room for it)."""
    if n:
        fig.legend(*ax.get_legend_handles_labels(), loc="outside right upper")


def line_chart(series: dict[str, list[tuple[float, float]]], *, title: str, x_label: str, y_label: str,
               width: int = 560, height: int = 260) -> str:
    """Lines of y over categorical x (e.g. p50 latency over batch size), one line per series."""
    xs_all = sorted({x for pts in series.values() for x, _ in pts})
    pos = {x: i for i, x in enumerate(xs_all)}
    tips: dict[str, str] = {}
    with _figure(width, height) as fig:
        ax = fig.add_subplot()
        for i, (name, pts) in enumerate(series.items()):
            pts = sorted(pts)
            ax.plot([pos[x] for x, _ in pts], [y for _, y in pts], color=color(i), lw=2, marker="o", ms=4,
                    label=_text(name))
            for j, (x, y) in enumerate(pts):
                gid = f"pt{i}-{j}"
                ax.plot([pos[x]], [y], "o", color=color(i), ms=6, alpha=0)[0].set_gid(gid)
                tips[gid] = f"{name}: {fmt_tick(x)} -> {y:.4g}"
        ax.set_xticks(range(len(xs_all)), [fmt_tick(x) for x in xs_all])
        ax.set_ylim(bottom=0)
        nice_axis(ax, "y")
        ax.set_xlabel(_text(x_label))
        ax.set_ylabel(_text(y_label))
        _legend(fig, ax, len(series))
        return _to_svg(fig, title, tips, repr(series))


def box_chart(rows: list[tuple[str, Sequence[float]]], *, title: str, x_label: str, width: int = 560) -> str:
    """Horizontal box plots of raw samples: whiskers p1-p99, box p25-p75, median mark, one row per case."""
    stats = [(name, percentiles(s, (1, 25, 50, 75, 99))) for name, s in rows if len(s)]
    height = 70 + 24 * len(stats)
    tips: dict[str, str] = {}
    with _figure(width, height) as fig:
        ax = fig.add_subplot()
        boxes = [{"whislo": p[0], "q1": p[1], "med": p[2], "q3": p[3], "whishi": p[4], "fliers": [],
                  "label": _text(name)} for name, p in stats]
        if boxes:
            art = ax.bxp(boxes, orientation="horizontal", widths=0.55, patch_artist=True, showfliers=False,
                         positions=range(len(boxes)))
            for i, (patch, (name, p)) in enumerate(zip(art["boxes"], stats)):
                patch.set(facecolor=color(i), alpha=0.3, edgecolor=color(i))
                art["medians"][i].set(color=color(i), lw=2)
                gid = f"box{i}"
                patch.set_gid(gid)
                tips[gid] = f"{name}: p1 {p[0]:.4g}, p25 {p[1]:.4g}, p50 {p[2]:.4g}, p75 {p[3]:.4g}, p99 {p[4]:.4g}"
            ax.invert_yaxis()
        ax.grid(axis="y", visible=False)
        nice_axis(ax, "x")
        ax.set_xlabel(_text(x_label))
        return _to_svg(fig, title, tips, repr(rows[:3]) + str(len(rows)))


def _place_labels(fig: Any, ax: Any, points: list[tuple[float, float, str, str]]) -> list[Any]:
    """Labels beside scatter points, none over another nor over the axes' edge: for each point (in order of
    x) the first of a few offsets whose box is free, else the least crowded one with a leader line."""
    renderer = fig.canvas.get_renderer()
    fig.draw_without_rendering()  # lay out first: the axes' final box
    frame = ax.get_window_extent(renderer)
    placed: list[Any] = []
    out = []
    # beside the point first, then further up and down (with a leader line), then to the left
    rises = [4, -12, 16, -24, 28, -36, 40, -48, 52, -60, 64, -72]
    offsets = [(dx, dy, ha) for dy in rises for dx, ha in ((6, "left"), (-6, "right"))]
    for x, y, label, c in sorted(points):
        best, best_cost = None, math.inf
        for dx, dy, ha in offsets:
            lead = {"arrowprops": {"arrowstyle": "-", "color": c, "lw": 0.6}} if abs(dy) > 12 else {}
            t = ax.annotate(label, (x, y), xytext=(dx, dy), textcoords="offset points", ha=ha, va="bottom",
                            fontsize=FONT_SIZE - 1, color="#333", **lead)
            t.set_in_layout(False)  # the layout is fixed before the labels are placed; they must not move it
            bb = _text_box(t, renderer)
            cost = sum(_overlap(bb, o) for o in placed)
            inside = bb.x0 >= frame.x0 and bb.x1 <= frame.x1 and bb.y0 >= frame.y0 and bb.y1 <= frame.y1
            cost += 0 if inside else 1e6
            if cost < best_cost:
                if best is not None:
                    best.remove()
                best, best_cost = t, cost
                if cost == 0:
                    break
            else:
                t.remove()
        if best is None:
            continue
        placed.append(_text_box(best, renderer))
        out.append(best)
    return out


def _text_box(t: Any, renderer: Any) -> Any:
    """The box of an annotation's text alone (not its leader line), a little padded."""
    from matplotlib.text import Text

    t.update_positions(renderer)
    return Text.get_window_extent(t, renderer).expanded(1.05, 1.15)


def _overlap(a: Any, b: Any) -> float:
    w = min(a.x1, b.x1) - max(a.x0, b.x0)
    h = min(a.y1, b.y1) - max(a.y0, b.y0)
    return w * h if w > 0 and h > 0 else 0.0


def scatter_chart(points: list[dict[str, object]], *, title: str, x_label: str, y_label: str,
                  width: int = 560, height: int = 300) -> str:
    """Points {x, y, label, group}: x on a log axis (drift), y linear (speed-up), a colour per group; each point
    labelled beside it where the label does not cover another (label boxes checked, not guessed)."""
    groups = list(dict.fromkeys(str(p["group"]) for p in points))
    tips: dict[str, str] = {}
    with _figure(width, height) as fig:
        ax = fig.add_subplot()
        ax.axhline(1.0, color="#999", ls="--", lw=1)
        for gi, g in enumerate(groups):
            mine = [p for p in points if str(p["group"]) == g]
            ax.scatter([float(p["x"]) for p in mine], [float(p["y"]) for p in mine],  # type: ignore[arg-type]
                       color=color(gi), s=22, label=_text(g), zorder=3)
        for i, p in enumerate(points):
            gid = f"pt{i}"
            ax.plot([float(p["x"])], [float(p["y"])], "o", ms=7, alpha=0)[0].set_gid(gid)  # type: ignore[arg-type]
            tips[gid] = (f'{p["label"]} ({p["group"]}): {x_label} {float(p["x"]):.3g}, '  # type: ignore[arg-type]
                         f'{y_label} {float(p["y"]):.3g}')  # type: ignore[arg-type]
        ax.set_xscale("log")
        xs = [float(p["x"]) for p in points]  # type: ignore[arg-type]
        if xs:
            lo, hi = min(xs), max(xs)
            ax.set_xlim(10 ** math.floor(math.log10(lo) - 0.3), 10 ** math.ceil(math.log10(hi) + 0.3))
        ys = [float(p["y"]) for p in points] + [1.0]  # type: ignore[arg-type]
        ax.set_ylim(0, max(ys) * 1.25)
        nice_axis(ax, "x", log=True)
        nice_axis(ax, "y")
        ax.set_xlabel(_text(x_label))
        ax.set_ylabel(_text(y_label))
        _legend(fig, ax, len(groups))
        _place_labels(fig, ax, [(float(p["x"]), float(p["y"]), _text(p["label"]),  # type: ignore[arg-type]
                                 color(groups.index(str(p["group"])))) for p in points])
        return _to_svg(fig, title, tips, repr(points))


def xy_chart(series: dict[str, list[tuple[float, float]]], *, title: str, x_label: str, y_label: str,
             width: int = 560, height: int = 260) -> str:
    """Lines of y over a numeric x (e.g. decode latency over context length), one line per series."""
    tips: dict[str, str] = {}
    with _figure(width, height) as fig:
        ax = fig.add_subplot()
        for i, (name, pts) in enumerate(series.items()):
            pts = sorted(pts)
            line, = ax.plot([x for x, _ in pts], [y for _, y in pts], color=color(i), lw=1.5, label=_text(name))
            line.set_gid(f"line{i}")
            tips[f"line{i}"] = name
        ax.set_ylim(bottom=0)
        nice_axis(ax, "x")
        nice_axis(ax, "y")
        ax.set_xlabel(_text(x_label))
        ax.set_ylabel(_text(y_label))
        _legend(fig, ax, len(series))
        return _to_svg(fig, title, tips, repr(series))


def curve_chart(series: dict[str, list[tuple[float, float, str]]], *, title: str, x_label: str, y_label: str,
                bounds: dict[str, float] | None = None, dashed: Sequence[str] = (), width: int = 560,
                height: int = 280) -> str:
    """Measured points joined in x order, one line per series, each point with its tooltip (x, y, tip), e.g. a
    batcher's p99 latency over the throughput it served. A series named in `dashed` is drawn dashed in the colour
    of the series before it (p50 under its p99); `bounds`: grey dashed horizontal lines (a latency bound). The y
    axis turns logarithmic when the values span more than 30x (a queue that grew beside ones that did not)."""
    tips: dict[str, str] = {}
    ys = [y for pts in series.values() for _, y, _ in pts if y > 0] + [y for y in (bounds or {}).values() if y > 0]
    log = bool(ys) and max(ys) / min(ys) > 30
    with _figure(width, height) as fig:
        ax = fig.add_subplot()
        c = -1
        for i, (name, pts) in enumerate(series.items()):
            c += name not in dashed or c < 0
            pts = sorted(pts)
            ax.plot([x for x, _, _ in pts], [y for _, y, _ in pts], color=color(c), lw=1.5, marker="o", ms=4,
                    ls="--" if name in dashed else "-", label=_text(name))
            for j, (x, y, tip) in enumerate(pts):
                gid = f"pt{i}-{j}"
                ax.plot([x], [y], "o", color=color(c), ms=7, alpha=0)[0].set_gid(gid)
                tips[gid] = f"{name}: {tip}"
        for name, y in (bounds or {}).items():
            ax.axhline(y, color="#888888", lw=1, ls=(0, (4, 3)), label=_text(name))
        ax.set_xlim(left=0)
        if log:
            ax.set_yscale("log")
        else:
            ax.set_ylim(bottom=0)
        nice_axis(ax, "x")
        nice_axis(ax, "y", log=log)
        ax.set_xlabel(_text(x_label))
        ax.set_ylabel(_text(y_label + (" (log)" if log else "")))
        _legend(fig, ax, len(series) + len(bounds or {}))
        return _to_svg(fig, title, tips, repr((series, bounds, tuple(dashed))))


def chart(draw: Callable[[Any, Any, dict[str, str]], None], *, title: str, width: int, height: int,
          salt: str = "") -> str:
    """A chart drawn by `draw(fig, ax, tips)` on one axes, as inline SVG (for other modules of report/)."""
    tips: dict[str, str] = {}
    with _figure(width, height) as fig:
        ax = fig.add_subplot()
        draw(fig, ax, tips)
        return _to_svg(fig, title, tips, salt)

