"""Every install hint (errors, skip reasons, docs) installs an extra with the constraints that pin CPU torch."""

from __future__ import annotations

import re
from pathlib import Path

from harness.errors import install_hint

ROOT = Path(__file__).resolve().parents[1]
# `pip install ... -e ".[extra]"` or `pip install 'inference-harness[extra]'`: an extra installed from here
EXTRA = re.compile(r"pip install\b[^\n`'\"]*?(?:-e\s+\\?[\"']?\.\[|[\"']?inference-harness\[)")


def test_install_hint_names_the_constraints():
    assert install_hint("tensorrt") == 'pip install -c constraints/cpu.txt -e ".[tensorrt]"'


def test_no_install_hint_without_the_constraints():
    files = [*(ROOT / "harness").rglob("*.py"), *(ROOT / "models").rglob("*.py"), *(ROOT / "docs").rglob("*.md"),
             ROOT / "README.md"]
    bad = []
    for f in files:
        text = f.read_text(encoding="utf-8")
        for m in EXTRA.finditer(text):
            line = text[text.rfind("\n", 0, m.start()) + 1:text.find("\n", m.end())]
            if "-c constraints/cpu.txt" not in line and "-c\nconstraints" not in text[m.start() - 40:m.end()]:
                bad.append(f"{f.relative_to(ROOT)}: {line.strip()}")
    assert not bad, bad
