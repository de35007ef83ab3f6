"""Module docstrings under harness/ say what the module is in one or two lines; method text lives in docs/."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "harness"


def test_module_docstrings_are_at_most_two_lines():
    long = []
    for path in sorted(PKG.rglob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")), clean=False)
        if doc and len(doc.strip().splitlines()) > 2:
            long.append(f"{path.relative_to(PKG.parent)}: {len(doc.strip().splitlines())} lines")
    assert not long, "module docstrings longer than two lines (move the method text to docs/):\n" + "\n".join(long)
