"""The report's charts (matplotlib SVG): valid SVG, nice tick values, no text drawn over other text."""

from __future__ import annotations

import itertools
import math
import re
import xml.etree.ElementTree as ET

import pytest

from harness.report import charts
from harness.report.trend import trend_chart

SVG = ""  # inline SVG in HTML5: no namespace declarations (nothing that looks like a URL to fetch)


def _parse(svg: str) -> ET.Element:
    assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")
    root = ET.fromstring(svg)  # well-formed XML, one root
    assert root.tag == f"{SVG}svg" and root.get("class") == "chart" and root.get("role") == "img"
    return root


def _ticks(root: ET.Element, axis: str) -> list[str]:
    """The labels of the major ticks of `axis` ("x" or "y"), as written."""
    out = []
    for g in root.iter(f"{SVG}g"):
        if re.search(rf"-{axis}tick_\d+$", g.get("id", "")):
            out += ["".join(t.itertext()) for t in g.iter(f"{SVG}text")]
    return [t for t in out if t]


def _nice(labels: list[str]) -> bool:
    """Evenly spaced values whose step is 1, 2, 2.5 or 5 x 10^k."""
    values = [float(t) for t in labels]
    steps = {round(b - a, 12) for a, b in itertools.pairwise(values)}
    if len(values) < 2 or len(steps) != 1:
        return False
    step = abs(steps.pop())
    mantissa = step / 10 ** math.floor(math.log10(step))
    return any(math.isclose(mantissa, m, rel_tol=1e-6) for m in (1, 2, 2.5, 5, 10))


def _boxes(root: ET.Element) -> list[tuple[str, float, float, float, float]]:
    """(text, x0, y0, x1, y1) of every horizontal text: its width estimated from its length (0.55 em a
    character, a narrow estimate for sans-serif digits and letters), its height one em above the baseline."""
    out = []
    for t in root.iter(f"{SVG}text"):
        style = t.get("style", "")
        if "rotate(-90" in (t.get("transform") or ""):
            continue
        size = float(re.search(r"font-size: ([\d.]+)px", style).group(1))
        x, y = float(t.get("x")), float(t.get("y"))
        text = "".join(t.itertext())
        w = 0.55 * size * len(text)
        anchor = re.search(r"text-anchor: (\w+)", style)
        x0 = {"middle": x - w / 2, "end": x - w}.get(anchor.group(1) if anchor else "start", x)
        out.append((text, x0, y - 0.8 * size, x0 + w, y))
    return out


def _overlaps(boxes: list[tuple[str, float, float, float, float]]) -> list[tuple[str, str]]:
    bad = []
    for a, b in itertools.combinations(boxes, 2):
        if min(a[3], b[3]) - max(a[1], b[1]) > 0.5 and min(a[4], b[4]) - max(a[2], b[2]) > 0.5:
            bad.append((a[0], b[0]))
    return bad


def test_line_chart_ticks_are_nice_and_the_svg_is_inline_ready():
    svg = charts.line_chart({"torch": [(1, 2.0), (8, 9.5), (32, 30.7)], "ort-cpu": [(1, 1.02), (8, 5.1), (32, 20.5)]},
                            title="p50 latency vs batch size", x_label="batch size", y_label="p50 latency (ms)")
    root = _parse(svg)
    assert _ticks(root, "x") == ["1", "8", "32"]  # categorical: the batch sizes themselves
    y = _ticks(root, "y")
    assert _nice(y) and y[0] == "0", y  # e.g. 0, 5, 10 ... not 1.02 / 2.05 / 3.07
    assert "<?xml" not in svg and "<!DOCTYPE" not in svg and "http" not in svg  # nothing external
    assert "ort-cpu: 8 -&gt; 5.1" in svg  # hover titles on the points
    assert not _overlaps(_boxes(root))


def test_ids_are_unique_per_chart_so_several_share_a_page():
    a = charts.xy_chart({"a": [(1, 1.0), (2, 2.0)]}, title="one", x_label="x", y_label="y")
    b = charts.xy_chart({"b": [(1, 1.0), (2, 3.0)]}, title="two", x_label="x", y_label="y")
    ids_a, ids_b = set(re.findall(r'id="([^"]+)"', a)), set(re.findall(r'id="([^"]+)"', b))
    assert ids_a and not ids_a & ids_b
    assert a == charts.xy_chart({"a": [(1, 1.0), (2, 2.0)]}, title="one", x_label="x", y_label="y")  # stable


def test_scatter_labels_do_not_overlap():
    # ten points in two tight clusters: labels placed beside them must not cover each other
    pts = [{"x": 1e-7 * (1 + 0.1 * i), "y": 1 + 0.02 * i, "label": f"ort-cpu b{i}", "group": "fp32" if i % 2 else "fp16"}
           for i in range(6)]
    pts += [{"x": 3e-3, "y": 7.5, "label": "ort-cpu b8", "group": "int8"},
            {"x": 3.1e-3, "y": 7.4, "label": "openvino-cpu b8", "group": "int8"}]
    svg = charts.scatter_chart(pts, title="speed-up vs drift", x_label="drift: rel L2 vs FP32 reference",
                               y_label="speed-up vs torch fp32")
    root = _parse(svg)
    boxes = _boxes(root)
    assert {p["label"] for p in pts} <= {b[0] for b in boxes}  # every point labelled
    assert not _overlaps(boxes), _overlaps(boxes)
    x = _ticks(root, "x")
    assert x and all(re.fullmatch(r"1e-?\d+|0\.0*1|1|10+", t) for t in x), x  # decades on the log axis
    assert _nice(_ticks(root, "y"))


def test_box_chart_names_escaped_and_ticks_nice():
    svg = charts.box_chart([("torch", [1.0, 1.02, 2.05, 3.07, 1.5] * 20), ("<b>evil</b>\u202e", [0.5, 0.9] * 20)],
                           title="latency", x_label="latency per call (ms)")
    root = _parse(svg)
    assert "<b>" not in svg and "\\u202e" in svg
    assert _nice(_ticks(root, "x"))
    assert not _overlaps(_boxes(root))


@pytest.mark.parametrize("p50", [[1.0, 1.0, 1.0, 1.1, 1.1, 1.1], [102.0, 205.0, 307.0, 410.0, 512.0, 615.0]])
def test_trend_chart_ticks(p50):
    row = {"case": "m-r-fp32-b1", "machine": "x", "runs": [f"run-{i}" for i in range(6)], "p50": p50,
           "p99": [v * 1.4 for v in p50], "changes": [(3, 10.0)]}
    root = _parse(trend_chart(row))
    assert _nice(_ticks(root, "y")) and _ticks(root, "x") == ["0", "1", "2", "3", "4", "5"]
    assert not _overlaps(_boxes(root))
