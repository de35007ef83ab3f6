"""The README stays a front page, and every relative link in it and in docs/ leads to a file and heading that exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", text, re.M)}


def test_readme_is_a_front_page():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines: move reference text into docs/"
    assert "![report of harness run --quick](docs/img/report-quick.png)" in lines


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        assert dest.exists(), f"{page.name}: link to {target}: no such file"
        if anchor and dest.suffix == ".md":
            assert anchor in anchors(dest), f"{page.name}: link to {target}: no such heading"


def test_slug_matches_github():
    assert slug("`harness gate-check`: the gate measures itself") == "harness-gate-check-the-gate-measures-itself"
    assert slug("results.csv columns") == "resultscsv-columns"
    assert slug("The harness's own overhead and the fidelity check (2026-11-23)") == (
        "the-harnesss-own-overhead-and-the-fidelity-check-2026-11-23")


def _readme_commands(prefix: str) -> list[list[str]]:
    import shlex

    blocks = re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    lines = [line for block in blocks for line in block.splitlines() if line.startswith(prefix)]
    return [shlex.split(line, comments=True) for line in lines]


def test_readme_harness_commands_parse_and_validate():
    """Every `harness ...` line of the README parses with the CLI; `harness run` lines also validate into a
    RunConfig (names, values), so an example cannot drift from the options."""
    from harness.cli import _parser
    from harness.options import OPTIONS, parse_run_options

    commands = _readme_commands("harness ")
    assert ["harness", "run", "--quick"] in commands and len(commands) >= 4
    for argv in commands:
        args = _parser().parse_args(argv[1:])
        if argv[1] == "run" and "--model" not in argv:  # --model needs the file to exist
            parse_run_options({o.dest: getattr(args, o.dest) for o in OPTIONS})


def test_readme_pytest_commands_use_known_options():
    from harness.options import OPTION_NAMES

    for argv in _readme_commands("pytest suites"):
        for arg in argv[2:]:
            if arg.startswith("--harness-"):
                assert arg[len("--harness-"):].split("=")[0] in OPTION_NAMES, arg
