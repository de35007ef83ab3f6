"""Shared fixtures: fake plugins on the path, a private artifact cache, helpers to run the harness."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS_DIR))
# The tests' own runs are judged on what they test, not on how busy the machine running them is: no block is
# called contended unless a test sets a limit itself (tests/measure/test_contention.py, the gating tests give
# contention explicitly). Subprocesses inherit it.
os.environ.setdefault("HARNESS_CONTENTION_LIMIT", "1")


@pytest.fixture
def fake_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, str]:
    """Environment for a harness subprocess that knows the fake runtimes and uses a private cache."""
    monkeypatch.setenv("HARNESS_PLUGINS", "fakes")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    return dict(os.environ)


@pytest.fixture(scope="session")
def fakes():
    import fakes as module
    from harness import plugins

    plugins.load_plugins()
    return module


@pytest.fixture(scope="session", autouse=True)
def _registries() -> None:
    """The zoo and plugin runtimes registered, as the CLI, the pytest plugin and a worker do before they
    resolve names (the registries themselves never load plugins)."""
    from harness import plugins

    plugins.load_plugins()
