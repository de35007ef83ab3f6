"""The floor of each room of harness/ (a top-level module or package): 0 when it imports no other room, else 1 + the
highest floor of the rooms it imports, imports inside functions included (a lazy import lifts a room as much as a
top-level one); with the chain that sets it. Dynamic imports (importlib by a string, plugins) are not seen.

    python tools/room_floors.py [ROOT] [ROOM ...]      e.g. python tools/room_floors.py . gating report
"""

from __future__ import annotations

import ast
import sys
from functools import cache
from pathlib import Path


def _room(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "harness" and len(parts) > 1 else None


def room_imports(root: Path) -> dict[str, set[str]]:
    """room -> the other rooms its modules import."""
    edges: dict[str, set[str]] = {}
    for f in (root / "harness").rglob("*.py"):
        parts = f.relative_to(root).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        me = _room(module)
        if me is None:
            continue
        package = module if f.name == "__init__.py" else module.rsplit(".", 1)[0]
        edges.setdefault(me, set())
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[:len(package.split(".")) - node.level + 1]
                    names = [".".join(base + ([node.module] if node.module else []))]
                else:
                    names = [node.module or ""]
                if names[0] == "harness":
                    names = [f"harness.{a.name}" for a in node.names]
            else:
                continue
            edges[me] |= {r for n in names if (r := _room(n)) and r != me}
    return edges


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else Path(".")
    edges = room_imports(root)

    @cache
    def floor(room: str) -> int:
        return 1 + max(map(floor, edges[room])) if edges.get(room) else 0

    for room in argv[1:] or sorted(edges):
        chain, r = [room], room
        while edges.get(r):
            r = max(sorted(edges[r]), key=floor)
            chain.append(f"{r} ({floor(r)})")
        print(f"{room}: floor {floor(room)}  [{' -> '.join(chain)}]")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
