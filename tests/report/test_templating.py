"""One Jinja2 environment renders every HTML output, from report/ only; gating/ renders nothing."""

from __future__ import annotations

import ast
from pathlib import Path

import jinja2
import pytest

from harness.report.templating import environment, render_template

HARNESS = Path(__file__).resolve().parents[2] / "harness"


def _trees(root: Path) -> list[tuple[Path, ast.AST]]:
    return [(p, ast.parse(p.read_text(), str(p))) for p in sorted(root.rglob("*.py"))]


def test_exactly_one_jinja_environment_is_constructed_in_harness():
    calls = [f"{p.relative_to(HARNESS)}:{n.lineno}" for p, tree in _trees(HARNESS) for n in ast.walk(tree)
             if isinstance(n, ast.Call) and (getattr(n.func, "id", None) == "Environment"
                                             or getattr(n.func, "attr", None) == "Environment")]
    assert len(calls) == 1 and calls[0].startswith("report/templating.py:"), calls


def test_gating_imports_nothing_from_report():
    bad = []
    for p, tree in _trees(HARNESS / "gating"):
        for n in ast.walk(tree):
            names = ([a.name for a in n.names] if isinstance(n, ast.Import)
                     else [f"{n.module}.{a.name}" for a in n.names] if isinstance(n, ast.ImportFrom) and n.module
                     else [])
            bad += [f"{p.name}:{n.lineno} {m}" for m in names if m.startswith("harness.report")]
    assert not bad, bad
    assert not list((HARNESS / "gating").rglob("*.j2"))  # every template lives in report/templates


def test_every_template_renders_through_the_one_environment():
    names = sorted(p.name for p in (HARNESS / "report" / "templates").glob("*.j2"))
    assert names == ["certificate.html.j2", "conformance.html.j2", "fleet-certificate.html.j2", "gatecheck.html.j2",
                     "recommend.html.j2",
                     "report.html.j2"]
    env = environment()
    assert env.undefined is jinja2.StrictUndefined and env.finalize is not None
    for name in names:
        env.get_template(name)  # compiles
    lenient = environment(strict=False)  # report.html.j2 reads optional keys of older stored results
    assert lenient.loader is env.loader and lenient.finalize is env.finalize and lenient.undefined is jinja2.Undefined


def test_strict_autoescaped_and_visible():
    env = environment()
    out = env.from_string("{{ x }}").render(x="<b>\u202e</b>")
    assert "<b>" not in out and "&lt;b&gt;" in out and "\u202e" not in out
    with pytest.raises(jinja2.UndefinedError):
        render_template("gatecheck.html.j2", g={})
