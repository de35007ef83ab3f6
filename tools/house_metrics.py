"""The house's size figures for the before/after tables of the house issues (#56): hand add_argument calls in
harness/commands/, rooms (top-level packages and modules of harness/) the command modules import, and functions
over 50 lines in harness/, the record idioms of harness/results/, the places that read a case's latency dict by
key and the reads by key of the keys the former TypedDicts declare. `python tools/house_metrics.py [ROOT]` (ROOT: a
checkout, default this one); `--key-reads` lists those reads."""

from __future__ import annotations

import ast
import re
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


def record_idioms(pkg: Path) -> dict[str, int]:
    """How harness/results/ types its records, by ast: hand `from_dict` methods (the one reader's own,
    `Record.from_dict`, left out), `DictRecord` classes (a record that remembers the dict it came from),
    `TypedDict` classes, pydantic `BaseModel` classes (and their subclasses), `__setattr__` overrides (a record
    converting what is assigned to it), and the dataclass records read by the one reader (`Record`'s direct
    subclasses; the DictRecords are counted as such)."""
    out = {"from_dict": 0, "DictRecord": 0, "TypedDict": 0, "BaseModel": 0, "__setattr__": 0, "Record": 0}
    models = {"BaseModel"}
    for p in sorted((pkg / "results").glob("*.py")):
        tree = ast.parse(p.read_text())
        one_reader = {id(n) for c in ast.walk(tree) if isinstance(c, ast.ClassDef) and c.name == "Record"
                      for n in c.body}
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name in ("from_dict", "__setattr__"):
                out[node.name] += id(node) not in one_reader
            elif isinstance(node, ast.ClassDef):
                bases_ = {b.id for b in node.bases if isinstance(b, ast.Name)}
                out["Record"] += "Record" in bases_
                bases = {b.id for b in node.bases if isinstance(b, ast.Name)}
                if bases & models:
                    models.add(node.name)
                    out["BaseModel"] += 1
                out["DictRecord"] += "DictRecord" in bases
                out["TypedDict"] += "TypedDict" in bases
    return out


_LATENCY_BY_KEY = re.compile(r"""latency(?:\)|\s*or \{\})?\["|latency(?:\s*or \{\})?\)?\.get\(""")


def latency_by_key(pkg: Path) -> int:
    """Lines of harness/ that read a case's `latency` dict by key (`latency["p50_ms"]`, `(c.latency or {}).get(`)."""
    return sum(len(_LATENCY_BY_KEY.findall(p.read_text())) for p in sorted(pkg.rglob("*.py")))


# the nine TypedDicts of harness/results/stored.py that became Records (#56, part D), by either name they had
FORMER_TYPEDDICTS = ("ProfileNodeRecord", "ProfileUnmappedRecord", "RooflineRecord", "CostRecord", "ProfileRecord",
                     "BlockContentionRecord", "BlockContention", "CaseContentionRecord", "EnvironmentRecord",
                     "RunEnvironmentRecord")


def record_keys(pkg: Path) -> set[str]:
    """The keys the former TypedDicts declare (their annotated names, as TypedDict or as Record), plus `own_wait`
    (the one key a producer added beside a block's contention before it was declared)."""
    keys = {"own_wait"}
    for p in sorted((pkg / "results").glob("*.py")):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ClassDef) and node.name in FORMER_TYPEDDICTS:
                keys |= {s.target.id for s in node.body if isinstance(s, ast.AnnAssign)
                         and isinstance(s.target, ast.Name)}
    return keys


def key_reads(pkg: Path, keys: set[str] | None = None) -> list[str]:
    """Reads by key in harness/ (`x["k"]`, `x.get("k")`, by ast) of a key in `keys` (default: record_keys), as
    `file:line: container[key]`. Broad by design: other dicts with the same key names (a row's "contended", a
    config's "threads", the run environment's keys while it is a dict) count too, before and after alike."""
    keys = record_keys(pkg) if keys is None else keys
    out = []
    for p in sorted(pkg.rglob("*.py")):
        for node in ast.walk(ast.parse(p.read_text())):
            key = obj = None
            if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
                key, obj = node.slice.value, node.value
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                  and node.args and isinstance(node.args[0], ast.Constant)):
                key, obj = node.args[0].value, node.func.value
            if isinstance(key, str) and key in keys:
                out.append(f"{p.relative_to(pkg.parent)}:{node.lineno}: {ast.unparse(obj)}[{key!r}]")
    return out


def main(argv: list[str]) -> int:
    listing = "--key-reads" in argv
    argv = [a for a in argv if a != "--key-reads"]
    root = Path(argv[0]) if argv else Path(__file__).resolve().parents[1]
    pkg = root / "harness"
    if listing:
        print("\n".join(key_reads(pkg)))
        return 0
    rooms = rooms_imported_by_commands(pkg)
    long = long_functions(pkg)
    print(f"hand add_argument calls in harness/commands/: {hand_add_arguments(pkg)}")
    print(f"rooms imported by harness/commands/: {len(rooms)} ({', '.join(rooms)})")
    idioms = record_idioms(pkg)
    kinds = sum(1 for k in ("from_dict", "DictRecord", "TypedDict", "BaseModel", "Record") if idioms[k])
    print(f"record idioms in harness/results/: {kinds} ({', '.join(f'{k} {n}' for k, n in idioms.items())})")
    print(f"reads of a case's latency dict by key in harness/: {latency_by_key(pkg)}")
    print(f"reads by key in harness/ of a key the former TypedDicts declare: {len(key_reads(pkg))} "
          f"(tools/house_metrics.py --key-reads lists them)")
    print(f"functions over 50 lines in harness/: {len(long)}")
    for name, n in long:
        print(f"  {n:4d} {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
