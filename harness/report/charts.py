"""Inline SVG charts for the HTML report, drawn here rather than by a plotting library."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from html import escape as _html_escape

import numpy as np

from harness.display import visible
from harness.results.stats import percentiles


def escape(text: str) -> str:
    """Text for SVG: control and bidi characters made visible, then HTML-escaped."""
    return _html_escape(visible(text))


PALETTE = ("#3366cc", "#dc3912", "#ff9900", "#109618", "#990099", "#0099c6", "#dd4477", "#66aa00",
           "#b82e2e", "#316395", "#994499", "#22aa99")
FONT = 'font-family="system-ui, sans-serif" font-size="11"'


def color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


@dataclass(frozen=True)
class Scale:
    """Maps data values to pixels on one axis, linear or log10."""

    lo: float
    hi: float
    p0: float
    p1: float
    log: bool = False

    @classmethod
    def fit(cls, values: Iterable[float], p0: float, p1: float, *, zero: bool = False,
            log: bool | None = None) -> "Scale":
        vals = [v for v in values if v is not None and math.isfinite(v)]
        if not vals:
            return cls(0.0, 1.0, p0, p1)
        lo, hi = min(vals), max(vals)
        if log is None:
            log = lo > 0 and hi / lo > 20
        if log:
            lo = max(lo, 1e-12)
            return cls(10 ** math.floor(math.log10(lo)), 10 ** math.ceil(math.log10(max(hi, lo * 10))), p0, p1,
                       True)
        if zero:
            lo = min(0.0, lo)
        if hi == lo:
            hi = lo + (abs(lo) or 1.0)
        pad = (hi - lo) * 0.05
        return cls(lo if zero else lo - pad, hi + pad, p0, p1)

    def __call__(self, v: float) -> float:
        if self.log:
            v = max(v, self.lo)
            t = (math.log10(v) - math.log10(self.lo)) / (math.log10(self.hi) - math.log10(self.lo))
        else:
            t = (v - self.lo) / (self.hi - self.lo)
        return self.p0 + t * (self.p1 - self.p0)

    def ticks(self, n: int = 5) -> list[float]:
        if self.log:
            a, b = int(round(math.log10(self.lo))), int(round(math.log10(self.hi)))
            step = max(1, (b - a) // 6)
            return [10.0 ** e for e in range(a, b + 1, step)]
        return [float(t) for t in np.linspace(self.lo, self.hi, n)]


def fmt_tick(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 1000 or abs(v) < 0.01:
        return f"{v:.0e}"
    return f"{v:.3g}"


def _svg(width: int, height: int, body: list[str], title: str) -> str:
    return (f'<svg class="chart" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}"><title>{escape(title)}'
            f'</title>{"".join(body)}</svg>')


def _axes(xs: Scale | None, ys: Scale, x_label: str, y_label: str, left: int, top: int, right: int,
          bottom: int) -> list[str]:
    out = [f'<line x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}" stroke="#888"/>',
           f'<line x1="{left}" y1="{top}" x2="{left}" y2="{bottom}" stroke="#888"/>']
    for t in ys.ticks():
        y = ys(t)
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{right}" y2="{y:.1f}" stroke="#eee"/>'
                   f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end" {FONT}>{escape(fmt_tick(t))}</text>')
    if xs is not None:
        for t in xs.ticks():
            x = xs(t)
            out.append(f'<text x="{x:.1f}" y="{bottom + 14}" text-anchor="middle" {FONT}>'
                       f'{escape(fmt_tick(t))}</text>')
    out.append(f'<text x="{(left + right) / 2:.0f}" y="{bottom + 30}" text-anchor="middle" {FONT}>'
               f'{escape(x_label)}</text>')
    out.append(f'<text transform="translate(12 {(top + bottom) / 2:.0f}) rotate(-90)" text-anchor="middle" '
               f'{FONT}>{escape(y_label)}</text>')
    return out


def _legend(names: Sequence[str], x: int, y: int, colors: Sequence[str]) -> list[str]:
    out = []
    for i, (name, c) in enumerate(zip(names, colors)):
        yy = y + 15 * i
        out.append(f'<rect x="{x}" y="{yy - 8}" width="10" height="10" fill="{c}"/>'
                   f'<text x="{x + 14}" y="{yy + 1}" {FONT}>{escape(name)}</text>')
    return out


def line_chart(series: dict[str, list[tuple[float, float]]], *, title: str, x_label: str, y_label: str,
               width: int = 560, height: int = 260) -> str:
    """Lines of y over categorical x (e.g. p50 latency over batch size), one line per series."""
    xs_all = sorted({x for pts in series.values() for x, _ in pts})
    legend_w = 10 + 7 * max((len(n) for n in series), default=0)
    left, top, right, bottom = 56, 12, width - min(legend_w, width // 2) - 16, height - 40
    pos = {x: left + 20 + (right - left - 40) * (i / max(1, len(xs_all) - 1)) for i, x in enumerate(xs_all)}
    ys = Scale.fit([y for pts in series.values() for _, y in pts], bottom, top, zero=True)
    body = _axes(None, ys, x_label, y_label, left, top, right, bottom)
    for x in xs_all:
        body.append(f'<text x="{pos[x]:.1f}" y="{bottom + 14}" text-anchor="middle" {FONT}>{escape(fmt_tick(x))}'
                    f'</text>')
    for i, (name, pts) in enumerate(series.items()):
        pts = sorted(pts)
        path = " ".join(f"{pos[x]:.1f},{ys(y):.1f}" for x, y in pts)
        body.append(f'<polyline fill="none" stroke="{color(i)}" stroke-width="2" points="{path}"/>')
        for x, y in pts:
            body.append(f'<circle cx="{pos[x]:.1f}" cy="{ys(y):.1f}" r="3" fill="{color(i)}">'
                        f'<title>{escape(name)}: {escape(fmt_tick(x))} -> {y:.4g}</title></circle>')
    body += _legend(list(series), right + 16, top + 10, [color(i) for i in range(len(series))])
    return _svg(width, height, body, title)


def box_chart(rows: list[tuple[str, Sequence[float]]], *, title: str, x_label: str, width: int = 560) -> str:
    """Horizontal box plots of raw samples: whiskers p1-p99, box p25-p75, median mark, one row per case."""
    label_w = min(300, 14 + 7 * max((len(n) for n, _ in rows), default=0))
    row_h = 22
    height = 46 + row_h * len(rows)
    left, right, top = label_w, width - 16, 8
    bottom = top + row_h * len(rows)
    stats = [(name, percentiles(s, (1, 25, 50, 75, 99))) for name, s in rows if len(s)]
    xs = Scale.fit([v for _, p in stats for v in (p[0], p[4])], left, right)
    body = [f'<line x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}" stroke="#888"/>']
    for t in xs.ticks():
        x = xs(t)
        body.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{bottom}" stroke="#eee"/>'
                    f'<text x="{x:.1f}" y="{bottom + 14}" text-anchor="middle" {FONT}>{escape(fmt_tick(t))}</text>')
    for i, (name, (p1, q1, med, q3, p99)) in enumerate(stats):
        cy = top + row_h * i + row_h / 2
        c = color(i)
        tip = f"{name}: p1 {p1:.4g}, p25 {q1:.4g}, p50 {med:.4g}, p75 {q3:.4g}, p99 {p99:.4g}"
        body.append(
            f'<g><title>{escape(tip)}</title>'
            f'<text x="{left - 6}" y="{cy + 4:.1f}" text-anchor="end" {FONT}>{escape(name)}</text>'
            f'<line x1="{xs(p1):.1f}" y1="{cy:.1f}" x2="{xs(p99):.1f}" y2="{cy:.1f}" stroke="{c}"/>'
            f'<rect x="{xs(q1):.1f}" y="{cy - 6:.1f}" width="{max(1.0, xs(q3) - xs(q1)):.1f}" height="12" '
            f'fill="{c}" fill-opacity="0.25" stroke="{c}"/>'
            f'<line x1="{xs(med):.1f}" y1="{cy - 7:.1f}" x2="{xs(med):.1f}" y2="{cy + 7:.1f}" stroke="{c}" '
            f'stroke-width="2"/></g>')
    body.append(f'<text x="{(left + right) / 2:.0f}" y="{bottom + 30}" text-anchor="middle" {FONT}>'
                f'{escape(x_label)}</text>')
    return _svg(width, height, body, title)


def scatter_chart(points: list[dict[str, object]], *, title: str, x_label: str, y_label: str,
                  width: int = 560, height: int = 280) -> str:
    """Points {x, y, label, group}: x on a log axis (drift), y linear (speed-up), a colour per group."""
    groups = list(dict.fromkeys(str(p["group"]) for p in points))
    legend_w = 10 + 7 * max((len(g) for g in groups), default=0)
    left, top, right, bottom = 56, 12, width - min(legend_w, width // 3) - 16, height - 40
    xs = Scale.fit([float(p["x"]) for p in points], left, right, log=True)  # type: ignore[arg-type]
    ys = Scale.fit([float(p["y"]) for p in points] + [1.0], bottom, top, zero=True)  # type: ignore[arg-type]
    body = _axes(xs, ys, x_label, y_label, left, top, right, bottom)
    y1 = ys(1.0)
    body.append(f'<line x1="{left}" y1="{y1:.1f}" x2="{right}" y2="{y1:.1f}" stroke="#999" '
                f'stroke-dasharray="4 3"/>')
    for p in points:
        c = color(groups.index(str(p["group"])))
        x, y = xs(float(p["x"])), ys(float(p["y"]))  # type: ignore[arg-type]
        tip = f'{p["label"]} ({p["group"]}): {x_label} {float(p["x"]):.3g}, {y_label} {float(p["y"]):.3g}'  # type: ignore[arg-type]
        body.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{c}"><title>{escape(tip)}</title></circle>'
                    f'<text x="{x + 6:.1f}" y="{y - 5:.1f}" {FONT} fill="#444">{escape(str(p["label"]))}</text>')
    body += _legend(groups, right + 16, top + 10, [color(i) for i in range(len(groups))])
    return _svg(width, height, body, title)


def xy_chart(series: dict[str, list[tuple[float, float]]], *, title: str, x_label: str, y_label: str,
             width: int = 560, height: int = 260) -> str:
    """Lines of y over a numeric x (e.g. decode latency over context length), one line per series."""
    legend_w = 10 + 7 * max((len(n) for n in series), default=0)
    left, top, right, bottom = 56, 12, width - min(legend_w, width // 2) - 16, height - 40
    xs = Scale.fit([x for pts in series.values() for x, _ in pts], left + 8, right - 8, log=False)
    ys = Scale.fit([y for pts in series.values() for _, y in pts], bottom, top, zero=True)
    body = _axes(xs, ys, x_label, y_label, left, top, right, bottom)
    for i, (name, pts) in enumerate(series.items()):
        path = " ".join(f"{xs(x):.1f},{ys(y):.1f}" for x, y in sorted(pts))
        body.append(f'<polyline fill="none" stroke="{color(i)}" stroke-width="1.5" points="{path}">'
                    f'<title>{escape(name)}</title></polyline>')
    body += _legend(list(series), right + 16, top + 10, [color(i) for i in range(len(series))])
    return _svg(width, height, body, title)
