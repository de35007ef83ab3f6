"""The wheel holds every package and data file of the tree. Packages are found (setup.py), models/ and suites/
installed under other names; a folder without an __init__.py or a data file no package-data pattern matches
would install a wheel that fails on import (`No module named 'harness.generation'` was that bug, when the
list was written by hand). CI also builds the wheel, installs it non-editable and runs every workload from it."""

from __future__ import annotations

import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent


def _setuptools() -> dict:
    """pyproject's [tool.setuptools] with what setup.py adds (packages found, package_dir)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("harness_setup", ROOT / "setup.py")
    setup = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(setup)  # its setup() call is under `if __name__ == "__main__"`
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return {**tool, "packages": setup.packages(), "package-dir": setup.PACKAGE_DIRS}


def _packages_on_disk(package_dir: dict[str, str]) -> set[str]:
    found = set()
    for name, folder in package_dir.items():
        base = ROOT / folder
        for init in base.rglob("__init__.py"):
            if "__pycache__" in init.parts:
                continue
            rel = init.parent.relative_to(base).parts
            found.add(".".join((name, *rel)))
    return found


def test_every_folder_of_python_files_is_a_package_in_the_wheel():
    tool = _setuptools()
    found = set(tool["packages"])
    assert found == _packages_on_disk(tool["package-dir"])
    assert {"harness.workloads.generate", "harness.runtimes.decoding", "harness_zoo", "harness_suites"} <= found
    no_init = []
    for folder in tool["package-dir"].values():
        for py in (ROOT / folder).rglob("*.py"):
            if "__pycache__" in py.parts or "migrations" in py.parts:  # Alembic's scripts are package data
                continue
            if not (py.parent / "__init__.py").exists():
                no_init.append(py.relative_to(ROOT).as_posix())
    assert no_init == [], "Python files in a folder with no __init__.py are left out of the wheel"


def test_every_data_file_is_in_the_wheel():
    """Templates, migrations and suite files that are not .py modules of a listed package match package-data."""
    tool = _setuptools()
    listed = set(tool["packages"])
    data = tool["package-data"]
    missing = []
    for name, folder in tool["package-dir"].items():
        base = ROOT / folder
        patterns = data.get(name, [])
        for path in base.rglob("*"):
            if not path.is_file() or "__pycache__" in path.parts or path.suffix == ".pyc":
                continue
            rel = path.relative_to(base)
            module_pkg = ".".join((name, *rel.parent.parts))
            if path.suffix == ".py" and module_pkg in listed:
                continue
            if not any(rel.match(p) or rel.as_posix() == p for p in patterns):
                missing.append(f"{folder}/{rel.as_posix()}")
    assert missing == []
