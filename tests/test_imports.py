"""The import graph of harness/, read from the source with ast: no cycles, and the layering.

Every `import` and `from ... import` counts, at module level and inside functions (a lazy import ties a
circle as surely as a top-level one), `if TYPE_CHECKING:` ones too. Nodes are modules; a package is its
`__init__.py`. Importing `harness.x.y` (or a name from it) is an edge to `harness.x.y` and to the package
`harness.x`, because Python runs `harness/x/__init__.py` first and a re-exporting `__init__` pulls in its
siblings; the exception is a module inside `harness.x` itself, whose package is already initialised and
which does not depend on what the `__init__` re-exports. So `__init__` -> submodule is an ordinary edge, and a
module outside the package that reaches any part of it depends on the whole `__init__`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "harness"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def _imported_names(name: str, path: Path) -> list[str]:
    """Every dotted name `name` imports (absolute, relative resolved; `from m import x` gives m.x)."""
    is_pkg = path.name == "__init__.py"
    out: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            out.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.extend(f"{mod}.{alias.name}" for alias in node.names)  # a submodule, or a name in mod
    return out


def _targets(importer: str, imported: str, modules: dict[str, Path]) -> set[str]:
    """The modules of harness/ that importing `imported` runs: the deepest module it names, and every package
    on the way to it that does not already hold the importer (Python runs a package's __init__ first)."""
    parts = imported.split(".")
    while parts and ".".join(parts) not in modules:  # `from harness.x import name`: name lives in harness.x
        parts.pop()
    out = set()
    for i in range(1, len(parts) + 1):
        mod = ".".join(parts[:i])
        if i == len(parts) or not (importer + ".").startswith(mod + "."):
            out.add(mod)
    return out


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges: set[str] = set()
        for imported in _imported_names(name, path):
            if imported.split(".")[0] == "harness":
                edges |= _targets(name, imported, modules)
        edges.discard(name)
        graph[name] = edges
    return graph


def _external_imports(path: Path) -> set[str]:
    return {n.split(".")[0] for n in _imported_names(_module_name(path), path) if n}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a list of modules (first repeated at the end), or None."""
    WHITE, GREY, BLACK = 0, 1, 2
    color = dict.fromkeys(graph, WHITE)
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        color[node] = GREY
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if color.get(nxt) == GREY:
                return stack[stack.index(nxt):] + [nxt]
            if color.get(nxt) == WHITE:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        color[node] = BLACK
        return None

    for start in sorted(graph):
        if color[start] == WHITE:
            found = visit(start)
            if found:
                return found
    return None


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan: every strongly connected component of more than one module (each one circle of imports)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = [0]

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


def test_graph_sees_lazy_and_relative_imports(tmp_path: Path) -> None:
    """The reader itself: function-level and relative imports are read; a package's __init__ counts from outside."""
    src = "import os\nfrom . import b\ndef f():\n    from harness.x.c import thing\n    import harness.x.d.e\n"
    path = tmp_path / "harness" / "x" / "a.py"
    path.parent.mkdir(parents=True)
    path.write_text(src)
    names = set(_imported_names("harness.x.a", path))
    assert {"harness.x.b", "harness.x.c.thing", "harness.x.d.e"} <= names
    modules = dict.fromkeys(["harness", "harness.x", "harness.x.a", "harness.x.c", "harness.y", "harness.y.m"],
                            path)
    assert _targets("harness.x.a", "harness.x.c.thing", modules) == {"harness.x.c"}  # own package: initialised
    assert _targets("harness.y.m", "harness.x.c.thing", modules) == {"harness.x", "harness.x.c"}  # runs x's __init__
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert strongly_connected(graph) == [["a", "b", "c"]]


def test_no_import_cycles() -> None:
    graph = import_graph()
    assert len(graph) > 40, "the reader found too few modules"
    assert graph["harness.execution.worker"], "the reader found no imports"
    circles = strongly_connected(graph)
    cycle = find_cycle(graph)
    assert not circles, (f"import cycle: {' -> '.join(cycle or [])}; "
                         + "; ".join(f"circle of {len(c)}: {', '.join(c)}" for c in circles))


# The layer rules of shared/DESIGN.md, each as (package, what it must never import, why). Direction:
# cli / pytest_plugin -> options -> execution -> workloads -> runtimes, artifacts, measure, accuracy -> results,
# model, precision; gating/ and report/ read results/ and never drive a run.
ENTRY = ("harness.cli", "harness.pytest_plugin", "harness.commands")
LAYER_RULES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("harness.options", ("harness.execution", *ENTRY), "options parse strings into the configuration, for the CLI "
                                                       "and the plugin"),
    ("harness.execution", ("harness.options", *ENTRY), "the session gets a typed configuration, never strings"),
    ("harness.workloads", ("harness.execution", "harness.options", *ENTRY), "a workload is driven by the session"),
    ("harness.runtimes", ("harness.workloads", "harness.execution", "harness.options", "harness.report",
                          "harness.gating", "harness.history", *ENTRY),
     "a runtime offers capabilities (infer, a decoder, an ONNX runner); workloads use them"),
    ("harness.artifacts", ("harness.runtimes", "harness.workloads", "harness.execution", "harness.options",
                           "harness.report", "harness.gating", *ENTRY), "build steps know no runtime or run"),
    ("harness.variants", ("harness.runtimes", "harness.workloads", "harness.execution", "harness.options",
                          "harness.report", "harness.gating", *ENTRY),
     "a variant is a recipe over a model and build options; a runtime declares the knobs it honours"),
    ("harness.envs", ("harness.workloads", "harness.execution", "harness.options", "harness.report", "harness.gating",
                      "harness.history", *ENTRY),
     "an environment is built from what a runtime declares; the supervisor starts its workers there"),
    ("harness.measure", ("harness.runtimes", "harness.workloads", "harness.execution", "harness.options",
                         "harness.report", "harness.gating", "harness.artifacts", *ENTRY), "timing is a leaf"),
    ("harness.profile", ("harness.runtimes", "harness.workloads", "harness.execution", "harness.options",
                         "harness.report", "harness.gating", "harness.variants", "harness.config", "harness.history",
                         "harness.accuracy", *ENTRY),
     "FLOPs and bytes read ONNX graphs, ceilings measure the machine: never a runtime adapter or a run"),
    ("harness.accuracy", ("harness.runtimes", "harness.workloads", "harness.execution", "harness.options",
                          "harness.report", "harness.gating", *ENTRY), "drift metrics are a leaf"),
    ("harness.results", ("harness.runtimes", "harness.workloads", "harness.execution", "harness.options",
                         "harness.report", "harness.gating", "harness.config", "harness.artifacts", *ENTRY),
     "records and their reader stand below everything that writes or reads them"),
    ("harness.gating", ("harness.execution", "harness.workloads", "harness.config", "harness.runtimes",
                        "harness.report", "harness.options", *ENTRY), "gating judges stored results only"),
    ("harness.report", ("harness.execution", "harness.workloads", "harness.runtimes", "harness.options",
                        "harness.config", *ENTRY), "reports render stored results and never ask a runtime again"),
    ("harness.config", ("harness.execution", "harness.workloads", "harness.runtimes", "harness.options",
                        "harness.report", "harness.gating", *ENTRY), "the configuration is plain typed data"),
    ("harness.model", ("harness.runtimes", "harness.workloads", "harness.execution", "harness.options", *ENTRY),
     "a model spec knows no runtime"),
    ("harness.precision", ("harness.runtimes", "harness.workloads", "harness.execution", *ENTRY), "a leaf"),
    ("harness.traffic", ("harness.runtimes", "harness.workloads", "harness.execution", "harness.options",
                         "harness.report", "harness.gating", *ENTRY),
     "traffic is a schedule and a replay over a callable; the capacity workload binds a runtime to it"),
    ("harness.commands", ("harness.cli",), "a command module owns its parsers and its runs; cli.py dispatches"),
    ("harness.pytest_plugin", ("harness.cli", "harness.commands"),
     "pytest loads the plugin; `harness run` hands it the parsed configuration, never the reverse"),
)


def _in(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


@pytest.mark.parametrize("package, forbidden, why", LAYER_RULES, ids=[r[0] for r in LAYER_RULES])
def test_layer_rules(package: str, forbidden: tuple[str, ...], why: str) -> None:
    modules = _modules()
    bad = sorted(f"{name} -> {imported}" for name, path in modules.items() if _in(name, package)
                 for imported in _imported_names(name, path) if any(_in(imported, f) for f in forbidden))
    assert not bad, f"{package} must not import {', '.join(forbidden)} ({why}): " + "; ".join(bad)


def test_only_harness_run_hands_its_cases_to_pytest() -> None:
    """Of the command modules, `harness run` alone goes through pytest (the plugin); the others drive the run
    session themselves."""
    users = sorted(name for name, path in _modules().items() if _in(name, "harness.commands")
                   and any(_in(i, "harness.pytest_plugin") for i in _imported_names(name, path)))
    assert users == ["harness.commands.run"], users


def test_the_rules_cover_every_package() -> None:
    top = {".".join(n.split(".")[:2]) for n in _modules() if n.count(".") >= 1}
    covered = {r[0] for r in LAYER_RULES} | set(ENTRY)
    allowed_unruled = {"harness.data", "harness.feeds", "harness.model_files", "harness.matrix", "harness.plugins",
                       "harness.errors", "harness.display", "harness.metrics", "harness.history",
                       "harness.options_doc"}
    assert top - covered <= allowed_unruled, sorted(top - covered - allowed_unruled)


def test_options_are_parsed_only_by_the_entry_points() -> None:
    users = sorted(name for name, path in _modules().items()
                   if any(_in(i, "harness.options") for i in _imported_names(name, path))
                   and not any(_in(name, e) for e in (*ENTRY, "harness.options", "harness.options_doc")))
    assert not users, f"only the CLI and the pytest plugin turn strings into a configuration: {users}"


def _source_lines(needle: str) -> list[str]:
    out = []
    for path in sorted(PKG.rglob("*.py")):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if needle in line:
                out.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    return out


def test_the_configuration_is_read_as_typed_attributes() -> None:
    """No `getattr(config, ...)` with a default (defaults written twice) and no untyped `config: Any`."""
    bad = [x for needle in ("getattr(config", "getattr(cfg", "getattr(run_config", "config: Any", "cfg: Any")
           for x in _source_lines(needle)]
    assert not bad, "\n".join(bad)


def test_registries_do_not_load_plugins() -> None:
    """The runtime, model and workload registries never load plugins, nor does the judging room (it would stand
    above the runtimes); their callers (the CLI's commands, the plugin, the worker) do."""
    judging = [str(p.relative_to(PKG)) for p in sorted((PKG / "gating").glob("*.py"))]
    for rel in ("runtimes/__init__.py", "model.py", "workloads/__init__.py", *judging):
        calls = [n for n in ast.walk(ast.parse((PKG / rel).read_text()))
                 if isinstance(n, ast.Call) and getattr(n.func, "id", getattr(n.func, "attr", "")) == "load_plugins"]
        assert not calls, f"harness/{rel} loads plugins"


@pytest.mark.parametrize("path", sorted(PKG.rglob("*.py")), ids=lambda p: _module_name(p))
def test_harness_never_imports_the_zoo_or_suites(path: Path) -> None:
    """The zoo is found through the `harness.models` entry point, the suites by path, never by import."""
    bad = _external_imports(path) & {"harness_suites", "harness_zoo", "models", "suites"}
    assert not bad, f"{_module_name(path)} imports {', '.join(sorted(bad))}"


def test_no_command_module_imports_another() -> None:
    """A command module (one with COMMANDS) is a thin shell: it composes option groups and calls the rooms below;
    what two commands share lives in a module of its own (harness.commands.common, .gate_config), never in a
    sibling command (`gate-check --nightly` imported `harness gate`'s module and faked its arguments)."""
    commands = PKG / "commands"
    command_modules = {p.stem for p in commands.glob("*.py") if "\nCOMMANDS" in p.read_text()}
    bad = []
    for path in sorted(commands.glob("*.py")):
        if path.stem not in command_modules:
            continue
        for name in _imported_names(f"harness.commands.{path.stem}", path):
            parts = name.split(".")
            if len(parts) >= 3 and parts[:2] == ["harness", "commands"] and parts[2] in command_modules \
                    and parts[2] != path.stem:
                bad.append(f"harness.commands.{path.stem} imports {name}")
            if name == "harness.commands" and path.stem != "__init__":
                bad.append(f"harness.commands.{path.stem} imports the commands package")
    assert command_modules and not bad, "\n".join(bad)
