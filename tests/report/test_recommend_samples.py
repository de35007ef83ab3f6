"""Every stored recommend.json of docs/samples renders as Markdown and as HTML (a file written by an earlier
harness, or one a search stopped before its end, lacks keys a finished one has: the page says less, never ends in
a traceback)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.report.recommend import render_html, render_markdown

SAMPLES = sorted((Path(__file__).parents[2] / "docs" / "samples").glob("recommend-*/rec-*.json"))


def test_the_samples_are_found():
    assert len(SAMPLES) >= 10


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.stem)
def test_a_stored_recommendation_renders_both_ways(path):
    data = json.loads(path.read_text())
    md, html = render_markdown(data), render_html(data)
    assert data["model"] in md and data["model"] in html
    assert "s of probing" in html and html.rstrip().endswith("</html>")
