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


# The end-to-end tier: tests that drive the harness as a user does (subprocess runs, real crashes, hangs,
# timeouts and signals, real exports, environments built with pip) and take seconds each, marked on the tests
# themselves (`@pytest.mark.e2e`; `slow` counts too). `pytest tests` (the README's command) leaves them out;
# `pytest tests -m e2e` runs them (CI runs both).


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "e2e: the slower end-to-end tier (pytest tests -m e2e; CI runs it)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Leave the end-to-end tier out unless -m or -k chooses tests or tests are named by node id (a test marked
    `slow` is in the tier too)."""
    for item in items:
        if item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.e2e)
    if config.option.markexpr or config.option.keyword or any("::" in str(a) for a in config.args):
        return
    kept = [i for i in items if not i.get_closest_marker("e2e")]
    if len(kept) < len(items):
        config.hook.pytest_deselected(items=[i for i in items if i.get_closest_marker("e2e")])
        items[:] = kept


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
