"""Shared fixtures: fake plugins on the path, a private artifact cache, helpers to run the harness."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS_DIR))

import shared_exports  # noqa: E402 - from the tests' folder, put on the path just above
# The tests' own runs are judged on what they test, not on how busy the machine running them is: no block is
# called contended unless a test sets a limit itself (tests/measure/test_contention.py, the gating tests give
# contention explicitly). Subprocesses inherit it.
os.environ.setdefault("HARNESS_CONTENTION_LIMIT", "1")
# Over pytest-xdist's workers (CI's Ray line: `-n 2 --dist loadfile`) each worker's test clusters keep a temp folder
# of their own: Ray writes there the address that `--ray auto` and ray.init("auto") read, and one worker's driver
# must not find the other worker's cluster.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("RAY_TMPDIR", f"/tmp/ray-{os.environ['PYTEST_XDIST_WORKER']}-{os.getpid()}")


# The end-to-end tier: tests that drive the harness as a user does (subprocess runs, real crashes, hangs,
# timeouts and signals, real exports, environments built with pip) and take seconds each (4 s or more in CI's
# --durations list), marked on the tests themselves (`@pytest.mark.e2e`; `slow` counts too). `pytest tests` (the
# README's command) leaves them out; `pytest tests -m e2e` runs them (CI runs both).


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "e2e: the slower end-to-end tier (pytest tests -m e2e; CI runs it)")
    config.addinivalue_line("markers", "alone: an e2e test whose assertion rests on wall-clock timing a neighbouring "
                            "test process can move (a trend over rounds, a stop within a bound): CI runs the tier "
                            "over two workers without these, then these with nothing beside them")
    config.addinivalue_line("markers", "fresh_export: export with torch.onnx even where this session exported the "
                                       "same model already (a test of the exporter itself)")


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
def fake_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, request: pytest.FixtureRequest) -> dict[str, str]:
    """Environment for a harness subprocess that knows the fake runtimes and uses a private cache (and shares the
    session's torch.onnx exports: tests/shared_exports.py; not for a test marked fresh_export)."""
    monkeypatch.setenv("HARNESS_PLUGINS", "fakes")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path / "cache"))
    if _STORE is not None and request.node.get_closest_marker("fresh_export") is None:
        monkeypatch.setenv(shared_exports.ENV, str(_STORE))
    else:
        monkeypatch.delenv(shared_exports.ENV, raising=False)
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


# One torch.onnx export per model and exporter in a session. Each test gets a private artifact cache (a cache
# hit or miss is part of what many tests check), so every test that ran a zoo model through ONNX exported it
# again (seconds each, a minute on a loaded machine). The first export of a key is real and kept here; a later
# miss of the same key in another test's cache copies those files into that cache instead, through the same
# get_or_build (a miss stays a miss, with its meta.json and build_s). Shared only for the very spec object that
# was exported (a registered model, a module's constant; never a dataclasses.replace copy), never while
# torch.onnx.export is replaced by a test; a test marked fresh_export exports for real (and its export is kept
# for the tests after it). The store folder is shared with the harness subprocesses a test starts through
# `fake_env` (tests/shared_exports.py: the same rule for a registered model's spec there).
_EXPORTS: dict[str, tuple[object, Path, dict]] = {}
_FRESH_EXPORT = False
_STORE: Path | None = None


@pytest.fixture(scope="session", autouse=True)
def _one_export_per_model(tmp_path_factory: pytest.TempPathFactory):
    import shutil

    from harness.artifacts.cache import cache_key
    from harness.artifacts.onnx_from_torch import OnnxFromTorch

    global _STORE
    store = _STORE = tmp_path_factory.mktemp("exports")
    real_export = OnnxFromTorch._export

    def export(self: OnnxFromTorch, path: Path) -> dict:
        import torch

        if not getattr(torch.onnx.export, "__module__", "").startswith("torch."):
            return real_export(self, path)  # a test's stand-in for the exporter: never kept
        key = cache_key(self.key_parts())
        spec, folder, meta = _EXPORTS.get(key, (None, None, None))
        if spec is self.spec and not _FRESH_EXPORT:
            for f in folder.iterdir():
                shutil.copy2(f, path.parent / f.name)
            return dict(meta)
        meta = real_export(self, path)
        if spec is None:
            shared_exports.publish(store, key, path.parent, meta)
            _EXPORTS[key] = (self.spec, store / key, dict(meta))
        return meta

    export.shared_exports = True  # the pytest process's own rule: tests/shared_exports.py installs nothing here
    OnnxFromTorch._export = export
    yield
    OnnxFromTorch._export = real_export
    _STORE = None


@pytest.fixture(autouse=True)
def _fresh_export(request: pytest.FixtureRequest):
    global _FRESH_EXPORT
    _FRESH_EXPORT = request.node.get_closest_marker("fresh_export") is not None
    yield
    _FRESH_EXPORT = False
