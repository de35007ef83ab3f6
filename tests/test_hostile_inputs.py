"""Hostile inputs by class (issue 40): each class tested with generated cases, not only the reported example.
Unwritable cache folders, environment variables read at import, destructive empty arguments."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import main

TESTS_DIR = Path(__file__).resolve().parent


# ------------------------------------------------------------------ unwritable cache folders
def _unwritable(kind: str, tmp_path: Path) -> Path:
    """A cache folder that cannot be made or written, of several kinds (root ignores permission bits, so none
    of them relies on chmod): a regular file where the folder goes, a folder under a regular file, a folder
    in a read-only system tree."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    if kind == "is-a-file":
        return blocker
    if kind == "under-a-file":
        return blocker / "cache"
    folder = Path("/sys/harness-test-cache")  # sysfs refuses new entries, to root too
    if not Path("/sys").is_dir():
        pytest.skip("no /sys here")
    return folder


UNWRITABLE = ["is-a-file", "under-a-file", "read-only-tree"]


@pytest.mark.parametrize("kind", UNWRITABLE)
def test_envs_build_in_an_unwritable_cache_is_one_line_naming_the_folder(kind, tmp_path, capsys):
    cache = _unwritable(kind, tmp_path)
    assert main(["envs", "build", "ort-cpu@1.24.4", "--cache-dir", str(cache)]) == 2
    out = capsys.readouterr()
    assert out.err.count("\n") == 1 and "Traceback" not in out.err
    assert out.err.startswith(f"harness envs: error: cache folder {cache}") and "is not writable (" in out.err
    assert "--cache-dir" in out.err


@pytest.mark.parametrize("kind", UNWRITABLE)
def test_ceilings_in_an_unwritable_cache_is_one_line_before_measuring(kind, tmp_path, capsys, monkeypatch):
    from harness.profile import ceilings

    def never(threads):  # the folder is checked before minutes of measuring would be lost at the write
        raise AssertionError("measured although the cache cannot keep it")

    monkeypatch.setattr(ceilings, "measure_ceilings", never)
    cache = _unwritable(kind, tmp_path)
    assert main(["ceilings", "--threads", "1", "--cache-dir", str(cache)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"harness ceilings: error: cache folder {cache}")


@pytest.mark.parametrize("kind", UNWRITABLE)
def test_a_run_with_an_unwritable_cache_keeps_the_case_with_the_reason(kind, tmp_path, capsys):
    """`harness run` whose model needs the cache (an ONNX export): the case is an error whose reason names the
    folder, in results.json and the final table; never a complete run of 0 cases."""
    cache = _unwritable(kind, tmp_path)
    out = tmp_path / "run"
    status = main(["run", "--models", "mlp", "--runtimes", "ort-cpu", "--batch-sizes", "1", "--min-time", "0.01",
                   "--min-iters", "3", "--repeats", "1", "--cache-dir", str(cache), "--out", str(out)])
    assert status == 1
    results = json.loads((out / "results.json").read_text())
    assert len(results["cases"]) == 1
    case = results["cases"][0]
    assert case["status"] == "error" and f"cache folder {cache}" in case["reason"]
    assert f"cache folder {cache}" in capsys.readouterr().out


# ------------------------------------------------------------------ environment variables are read where used
def test_a_malformed_build_timeout_variable_fails_only_the_build_naming_it(tmp_path):
    env = {**os.environ, "HARNESS_ENV_BUILD_TIMEOUT": "ten minutes",
           "PYTHONPATH": os.pathsep.join([str(TESTS_DIR.parent), os.environ.get("PYTHONPATH", "")])}
    for argv in (["models"], ["runtimes"], ["envs", "ls", "--cache-dir", str(tmp_path)], ["variants"]):
        done = subprocess.run([sys.executable, "-m", "harness.cli", *argv], check=False, capture_output=True, text=True,
                              env=env, timeout=120)
        assert done.returncode == 0, (argv, done.stderr)
    done = subprocess.run([sys.executable, "-m", "harness.cli", "envs", "build", "ort-cpu@1.24.4", "--cache-dir",
                           str(tmp_path)], check=False, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 1 and "Traceback" not in done.stderr + done.stdout
    assert "$HARNESS_ENV_BUILD_TIMEOUT='ten minutes': expected a positive number of seconds" in done.stdout


@pytest.mark.parametrize("value", ["ten", "", "0", "-5", "inf", "nan", "1e999"])
def test_build_timeout_values(value, monkeypatch):
    from harness.envs import EnvBuildError
    from harness.envs.store import build_timeout_s

    monkeypatch.setenv("HARNESS_ENV_BUILD_TIMEOUT", value)
    if value == "":
        assert build_timeout_s() == 1800
    else:
        with pytest.raises(EnvBuildError, match="HARNESS_ENV_BUILD_TIMEOUT"):
            build_timeout_s()
    monkeypatch.setenv("HARNESS_ENV_BUILD_TIMEOUT", "90.5")
    assert build_timeout_s() == 90.5


# ------------------------------------------------------------------ destructive empty arguments
@pytest.mark.parametrize("keys", [[""], [" "], ["abc", ""], ["\t"]])
def test_envs_clear_with_an_empty_key_is_a_usage_error_and_removes_nothing(keys, tmp_path, capsys):
    root = tmp_path / "envs"
    for name in ("aaaa1111", "bbbb2222"):
        (root / name).mkdir(parents=True)
        (root / name / "harness-env.json").write_text(json.dumps({"key": name, "requirements": []}))
    assert main(["envs", "clear", *keys, "--cache-dir", str(tmp_path)]) == 2
    assert "empty KEY" in capsys.readouterr().err
    assert sorted(p.name for p in root.iterdir() if p.is_dir()) == ["aaaa1111", "bbbb2222"]


def test_a_malformed_contention_limit_variable_is_not_read_at_import(tmp_path):
    """In a process started with the malformed variable: other commands are unaffected, and a run is one line."""
    env = {**os.environ, "HARNESS_CONTENTION_LIMIT": "lots",
           "PYTHONPATH": os.pathsep.join([str(TESTS_DIR.parent), os.environ.get("PYTHONPATH", "")])}
    models = subprocess.run([sys.executable, "-m", "harness.cli", "models"], check=False, capture_output=True,
                            text=True, env=env, timeout=120)
    assert models.returncode == 0, models.stderr  # not read at import: other commands are unaffected
    run = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--models", "mlp", "--out",
                          str(tmp_path / "r")], check=False, capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 2 and run.stderr.strip() == (
        "harness run: error: $HARNESS_CONTENTION_LIMIT='lots': expected a fraction in [0, 1] (1: never call a block "
        "contended; unset: 0.1)")


@pytest.mark.parametrize("value", ["lots", "nan", "-0.5", "1.5", "inf"])
def test_a_malformed_contention_limit_variable_is_one_line_where_a_run_is_configured(value, tmp_path, monkeypatch,
                                                                                      capsys):
    """Each malformed value, in this process (the process-level behaviour: the test above)."""
    from harness.cli import main

    monkeypatch.setenv("HARNESS_CONTENTION_LIMIT", value)
    assert main(["run", "--models", "mlp", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.strip() == (
        f"harness run: error: $HARNESS_CONTENTION_LIMIT={value!r}: expected a fraction in [0, 1] (1: never call a "
        "block contended; unset: 0.1)")


@pytest.mark.parametrize("exc", [PermissionError(13, "Permission denied", "/ro/cache/envs"),
                                 OSError(30, "Read-only file system", "/ro/cache/onnx"),
                                 RuntimeError("the worker could not be started")])
def test_a_case_that_fails_in_the_harness_process_is_an_error_row_never_lost(exc, monkeypatch, tmp_path, capsys,
                                                                            fakes):
    """What fails outside the worker (preparing the case, its environment or worker: an unwritable cache
    folder) is the case's error with its reason in results.json: never a complete run of 0 cases."""
    from harness.execution.supervisor import IsolatedExecutor

    def fails(self, case, config, payload):
        raise exc

    monkeypatch.setattr(IsolatedExecutor, "run", fails)
    out = tmp_path / "ab"
    assert main(["ab", "base", "threads=2", "--models", "fake-linear", "--runtimes", "fake-ok", "--ab-pairs", "2",
                 "--out", str(out)]) == 1
    doc = json.loads((out / "results.json").read_text())
    (case,) = doc["cases"]
    assert case["status"] == "error" and case["phase"] == "setup"
    assert case["reason"].startswith(type(exc).__name__) and str(exc).split(":")[0] in case["reason"]


def test_an_environment_in_an_unwritable_cache_is_the_cases_reason(tmp_path):
    """A runtime that needs an environment of its own, with a cache folder that cannot hold one: the case is
    skipped with the folder named (the supervisor's rule for an environment that cannot be built)."""
    from harness.config import RunConfig
    from harness.execution.supervisor import IsolatedExecutor
    from harness.results.schema import CaseId

    cache = _unwritable("under-a-file", tmp_path)
    config = RunConfig.build(models=("mlp",), runtimes=("ort-cpu@1.24.4",), cache_dir=cache,
                             out_dir=tmp_path / "o")
    ex = IsolatedExecutor()
    try:
        why = ex._environment(CaseId("mlp", "ort-cpu@1.24.4", "fp32", 1, None, "cpu"), config)
    finally:
        ex.close()
    assert isinstance(why, str) and f"cache folder {cache}" in why
