"""The house's size figures for the before/after tables of the house issues (#56): hand add_argument calls in
harness/commands/, rooms (top-level packages and modules of harness/) the command modules import, and functions
over 50 lines in harness/. `python tools/house_metrics.py [ROOT]` (ROOT: a checkout, default this one)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path


def hand_add_arguments(pkg: Path) -> int:
    """`.add_argument(` calls written in harness/commands/*.py (the option groups' own are in harness/options/)."""
    return sum(p.read_text().count(".add_argument(") for p in sorted((pkg / "commands").glob("*.py")))


def rooms_imported_by_commands(pkg: Path) -> list[str]:
    """harness's rooms (harness.X) any module of harness/commands/ imports, at any depth of its body, itself left
    out; `harness.X.Y` and `from harness.X import Y` both count as room X."""
    rooms: set[str] = set()
    for p in sorted((pkg / "commands").glob("*.py")):
        for node in ast.walk(ast.parse(p.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            rooms |= {n.split(".")[1] for n in names if n.startswith("harness.") and n.count(".") >= 1}
    return sorted(rooms - {"commands"})


def long_functions(pkg: Path, limit: int = 50) -> list[tuple[str, int]]:
    """Functions and methods of harness/ longer than `limit` lines (def line to last line, decorators left out)."""
    out = []
    for p in sorted(pkg.rglob("*.py")):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                if n > limit:
                    out.append((f"{p.relative_to(pkg.parent)}:{node.lineno} {node.name}", n))
    return sorted(out, key=lambda x: -x[1])


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else Path(__file__).resolve().parents[1]
    pkg = root / "harness"
    rooms = rooms_imported_by_commands(pkg)
    long = long_functions(pkg)
    print(f"hand add_argument calls in harness/commands/: {hand_add_arguments(pkg)}")
    print(f"rooms imported by harness/commands/: {len(rooms)} ({', '.join(rooms)})")
    print(f"functions over 50 lines in harness/: {len(long)}")
    for name, n in long:
        print(f"  {n:4d} {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
