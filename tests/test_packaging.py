"""The wheel holds every package of the tree: pyproject.toml lists packages by hand (models/ and suites/ are
installed under other names), so a new folder left out of the list would install a wheel that fails on import
(`No module named 'harness.generation'` was that bug). CI also installs the built wheel and runs it."""

from __future__ import annotations

import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent


def _setuptools() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


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


def test_every_package_folder_is_in_the_wheel():
    tool = _setuptools()
    listed = set(tool["packages"])
    on_disk = _packages_on_disk(tool["package-dir"])
    assert on_disk - listed == set(), "folders with an __init__.py missing from pyproject's packages"
    assert listed - on_disk == set(), "pyproject lists packages that have no folder"


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
