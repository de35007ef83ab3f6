"""Runtime environments: which runtime gets one, builds from a wheel folder, reuse, repair, failures, pins, bisect."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import pytest

from harness.config import RunConfig
from harness.envs import EnvBuildError, EnvSpec, EnvStore, environment_for
from harness.envs.spec import requirements_of
from harness.errors import UsageError
from harness.execution.bisect_run import bisect, version_range
from harness.measure.timer import TimingPolicy
from harness.results.schema import CaseId, CaseResult
from harness.runtimes import get_runtime
from harness.runtimes.base import Runtime
from fakes import fake_latency

TESTS_DIR = Path(__file__).resolve().parents[1]


class _Rt(Runtime):
    name: ClassVar[str] = "unit-rt"

    def _activate(self) -> None: ...

    def _infer(self, prepared):  # pragma: no cover - never run
        return {}


def _rt(**attrs) -> type[Runtime]:
    return type("Rt", (_Rt,), attrs)


# ------------------------------------------------------------------ which environment
def test_a_runtime_whose_requirements_are_installed_here_runs_here():
    assert environment_for(_rt(requirements=("numpy>=1.0", "pytest"))) is None
    assert environment_for(_rt()) is None  # nothing beyond the harness's own dependencies
    assert environment_for(get_runtime("ort-cpu")) is None and environment_for(get_runtime("torch-cpu")) is None


def test_a_missing_requirement_a_pin_or_an_own_environment_gets_one():
    spec = environment_for(_rt(requirements=("numpy>=1.0", "no-such-package-xyz>=2")))
    assert spec is not None and spec.requirements == ("no-such-package-xyz>=2", "numpy>=1.0")
    assert environment_for(_rt(requirements=("numpy",), own_environment=True)).requirements == ("numpy",)
    pinned = get_runtime("ort-cpu@1.24.4")
    assert pinned.name == "ort-cpu@1.24.4" and pinned.pinned_version == "1.24.4"
    assert environment_for(pinned).requirements == ("onnxruntime==1.24.4",)
    tvm = get_runtime("tvm-cpu@0.22.0")  # the pin replaces the distribution's own requirement, keeps the rest
    assert requirements_of(tvm) == ("apache-tvm-ffi<0.1.15", "xgboost-cpu>=2.1", "apache-tvm==0.22.0")
    assert environment_for(get_runtime("ort-openvino")).requirements == ("onnxruntime-openvino>=1.17",)
    assert environment_for(pinned, "off") is None  # --envs off: never


def test_a_pin_is_checked_and_the_key_is_the_requirement_set():
    with pytest.raises(UsageError, match="no package to pin"):
        get_runtime("ort-rocm@1.20.0")  # a provider of whatever onnxruntime build is installed: nothing to pin
    # torch runs the torch module: torch-cpu@VERSION is that torch release in its own environment, where the base's
    # torch is not held (an environment otherwise takes torch from the base)
    from harness.envs.store import _held

    assert environment_for(get_runtime("torch-cpu@2.0.0")).requirements == ("torch==2.0.0",)
    assert "torch" not in _held(("torch==2.0.0",)) and _held(("onnxruntime==1.20.0",)) == _held(())
    with pytest.raises(UsageError, match="is not a version"):
        get_runtime("ort-cpu@latest!")
    # here (no environment of its own) the pinned runtime is unavailable, with the version this interpreter has
    verdict = get_runtime("ort-cpu@0.0.1").availability()
    assert not verdict and ("not 0.0.1" in verdict.reason or "not installed" in verdict.reason)
    a, b = EnvSpec(("b==1", "a")), EnvSpec(("a", "b==1", "a"))
    assert a.key == b.key and a.requirements == ("a", "b==1")
    assert EnvSpec(("a",)).key != a.key and EnvSpec(("a", "b==1"), python="3.99.0").key != a.key


# ------------------------------------------------------------------ bisect's search
def _fake_measure(versions, first_changed, log):
    def measure(v):
        log.append(v)
        slow = versions.index(v) >= versions.index(first_changed) if first_changed else False
        return CaseResult(CaseId("mlp", "fakert-cpu", "fp32", 1, None, "cpu"), "passed",
                          samples_ns=[1300 if slow else 1000] * 10, latency=fake_latency(1.3 if slow else 1.0, 10))
    return measure


def _judge(a, b):
    ratio = b.samples_ns[0] / a.samples_ns[0]
    return (ratio > 1.1, f"x{ratio:.2f}")


@pytest.mark.parametrize("n,k", [(3, 1), (10, 1), (10, 7), (10, 9), (33, 20), (2, 1)])
def test_bisect_names_the_first_changed_release_measuring_as_few_as_binary_search(n, k):
    versions = [f"1.{i}.0" for i in range(n)]
    log = []
    found = bisect(versions, _fake_measure(versions, versions[k], log), _judge, "fakert-cpu")
    assert found.first_changed == versions[k] and found.last_same == versions[k - 1]
    assert len(log) == len(set(log)) <= 2 + math.ceil(math.log2(n - 1))
    assert found.lines()[-1].startswith(f"result: first changed in {versions[k]}")


def test_bisect_without_a_change_measures_the_two_ends():
    versions = [f"2.{i}" for i in range(8)]
    log = []
    found = bisect(versions, _fake_measure(versions, None, log), _judge)
    assert found.first_changed is None and log == ["2.0", "2.7"]


def test_version_ranges():
    known = ["1.9.0", "1.10.0", "1.10.1", "1.11.0", "1.12.0"]
    lister = lambda dist, wheels: known  # noqa: E731
    assert version_range("1.10.0..1.11.0", "x", lister=lister) == ["1.10.0", "1.10.1", "1.11.0"]
    assert version_range("..1.10.0", "x", lister=lister) == ["1.9.0", "1.10.0"]
    assert version_range("1.11.0,1.9.0", "x", lister=lister) == ["1.9.0", "1.11.0"]
    with pytest.raises(UsageError, match="1.13.0 is not a release"):
        version_range("1.10.0..1.13.0", "x", lister=lister)
    with pytest.raises(UsageError, match="at least two"):
        version_range("1.10.0", "x", lister=lister)


# ------------------------------------------------------------------ real environments from a wheel folder
@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> Path:
    from env_fakes import make_wheel

    folder = tmp_path_factory.mktemp("wheels")
    make_wheel(folder, "1.0.0", 0.001)
    make_wheel(folder, "1.1.0", 0.0013)  # 30% slower from here on
    make_wheel(folder, "1.2.0", 0.0013)
    return folder


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cache")


def test_an_environment_is_built_from_a_wheel_folder_reused_and_repaired(wheels, cache):
    store, lines = EnvStore(cache), []
    spec = EnvSpec(("harness-fakert==1.0.0",))
    env = store.ensure(spec, wheels=wheels, progress=lines.append, who="fakert-cpu@1.0.0")
    assert env.packages == {"harness-fakert": "1.0.0"} and env.key == spec.key
    assert any("building" in ln for ln in lines) and any("built in" in ln for ln in lines)
    # the environment's own package first, the harness (and torch, numpy) from the base it is layered over
    probe = subprocess.run([str(env.python), "-c", "import harness_fakert, harness, numpy; "
                            "print(harness_fakert.__version__, harness.__file__)"], capture_output=True, text=True)
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.split()[0] == "1.0.0"
    built_at = env.manifest["built_at"]
    lines.clear()
    again = store.ensure(spec, wheels=wheels, progress=lines.append)
    assert again.manifest["built_at"] == built_at and lines == [  # reused: nothing built
        f"environment {spec.key} for [harness-fakert==1.0.0]: reused"]
    env.python.unlink()  # a deleted interpreter: rebuilt, and said why
    repaired = store.ensure(spec, wheels=wheels, progress=lines.append)
    assert repaired.python.exists() and any("is gone; rebuilding" in ln for ln in lines)
    listed = dict(store.list())
    assert listed[env.path]["requirements"] == ["harness-fakert==1.0.0"]


def test_an_environment_that_cannot_be_built_names_the_requirement_and_the_installer(wheels, cache):
    store = EnvStore(cache)
    spec = EnvSpec(("harness-fakert==9.9.9",))
    with pytest.raises(EnvBuildError) as err:
        store.ensure(spec, wheels=wheels)
    text = str(err.value)
    assert "harness-fakert==9.9.9" in text and "No matching distribution found for harness-fakert==9.9.9" in text
    assert "\n" not in text and not (store.root / spec.key).exists()


@pytest.mark.e2e
def test_cases_run_in_their_environments_and_a_broken_one_is_a_skip(wheels, cache, monkeypatch):
    """One executor: a release in its environment, a case in the harness's own, the release again (its worker was
    parked, alive), a release that cannot be built (a skip with the installer's line)."""
    import env_fakes  # noqa: F401 - registers fakert-cpu here; the workers import it through HARNESS_PLUGINS
    from harness.execution.supervisor import IsolatedExecutor

    monkeypatch.setenv("HARNESS_PLUGINS", "env_fakes")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")]))
    config = RunConfig.build(cache_dir=cache, env_wheels=str(wheels), repeats=1, out_dir=cache / "out",
                             timing=TimingPolicy(warmup_time_s=0.05, min_time_s=0.05, min_iters=5))
    ex = IsolatedExecutor()
    try:
        case = lambda rt: CaseId("mlp", rt, "fp32", 1, None, "cpu")  # noqa: E731
        first = ex.run(case("fakert-cpu@1.0.0"), config)
        assert first.status == "passed", first.reason + first.stderr_tail
        assert first.environment.packages == {"harness-fakert": "1.0.0"}
        assert first.environment.requirements == ["harness-fakert==1.0.0"]
        own = ex.run(case("ort-cpu"), config)
        assert own.status == "passed" and own.environment is None
        again = ex.run(case("fakert-cpu@1.0.0"), config)
        assert again.status == "passed" and ex.workers_started == 2
        broken = ex.run(case("fakert-cpu@9.9.9"), config)
        assert broken.status == "skipped" and "harness-fakert==9.9.9" in broken.reason
        assert "No matching distribution" in broken.reason
    finally:
        ex.close()
    stored = CaseResult.from_dict(json.loads(json.dumps(first.as_dict())))
    assert stored.environment == first.environment


@pytest.mark.e2e
def test_bisect_names_the_slower_release_of_a_published_package(wheels, cache, tmp_path):
    env = dict(os.environ, HARNESS_PLUGINS="env_fakes", HARNESS_CACHE_DIR=str(cache),
               PYTHONPATH=os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")]))
    out = tmp_path / "bisect"
    done = subprocess.run([sys.executable, "-m", "harness.cli", "bisect", "fakert-cpu", "--versions", "1.0.0..1.2.0",
                           "--env-wheels", str(wheels), "--models", "mlp", "--min-time", "0.5", "--repeats", "5",
                           "--ab-pairs", "10", "--ab-block-time", "0.02", "--out", str(out)],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 1, done.stdout + done.stderr  # 1: a change was found
    assert "result: first changed in 1.1.0 (last like 1.0.0: 1.0.0)" in done.stdout, done.stdout
    assert "measured 3: 1.0.0, 1.2.0, 1.1.0" in done.stdout
    for version in ("1.0.0", "1.1.0", "1.2.0"):
        case = json.loads((out / version / "results.json").read_text())["cases"][0]
        assert case["environment"]["packages"] == {"harness-fakert": version}
        assert case["case"]["runtime"] == f"fakert-cpu@{version}"
    # the median judged on the two releases side by side, each in its own environment (two workers in turn)
    assert "  side by side fakert-cpu@1.0.0 vs fakert-cpu@1.2.0: regressed, B/A 1." in done.stdout, done.stdout
    rows = json.loads((out / "side-by-side" / "results.json").read_text())["cases"]
    assert [(r["ab"]["a"], r["case"]["runtime"]) for r in rows] == [("fakert-cpu@1.0.0", "fakert-cpu@1.2.0"),
                                                                      ("fakert-cpu@1.0.0", "fakert-cpu@1.1.0")]
    assert rows[0]["environment"]["packages"] == {"harness-fakert": "1.2.0"}
    assert rows[0]["details"]["bisect"]["side_a"]["environment"]["packages"] == {"harness-fakert": "1.0.0"}
    assert all(r["ab"]["verdict"] == "regressed" and r["ab"]["ratio"] > 1.1 for r in rows), rows  # 1.3x quiet


def test_the_runtimes_requirements_are_their_extras():
    import tomllib

    extras = tomllib.loads((TESTS_DIR.parent / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for runtime, extra in (("openvino-cpu", "openvino"), ("litert-cpu", "litert"), ("tvm-cpu", "tvm"),
                           ("tensorrt", "tensorrt")):
        assert set(get_runtime(runtime).requirements) == set(extras[extra]), runtime


@pytest.mark.e2e
def test_envs_ls_and_clear(wheels, cache):
    store = EnvStore(cache)
    env = store.ensure(EnvSpec(("harness-fakert==1.2.0",)), wheels=wheels)
    run = lambda *a: subprocess.run([sys.executable, "-m", "harness.cli", "envs", *a, "--cache-dir", str(cache)],  # noqa: E731
                                    capture_output=True, text=True, timeout=120)
    listed = run("ls")
    assert listed.returncode == 0, listed.stderr
    assert f"{env.key}" in listed.stdout and "harness-fakert==1.2.0 -> harness-fakert 1.2.0" in listed.stdout
    cleared = run("clear", env.key[:8])
    assert cleared.returncode == 0 and env.key in cleared.stdout and not env.path.exists()
    built = run("build", "ort-cpu")
    assert built.returncode == 0 and "runs in the harness's own environment" in built.stdout


@pytest.mark.parametrize("spec", ["1.11.0..1.10.0", "1.12.0..1.9.0", "1.10.1..1.10.0"])
def test_a_reversed_range_is_a_usage_error_that_says_so(spec):
    known = ["1.9.0", "1.10.0", "1.10.1", "1.11.0", "1.12.0"]
    lo, hi = spec.split("..")
    with pytest.raises(UsageError, match=rf"a reversed range \({lo} is newer than {hi}\); give the older release "
                                         rf"first: {hi}\.\.{lo}"):
        version_range(spec, "x", lister=lambda dist, wheels: known)


@pytest.mark.parametrize("signum, status, word", [(15, 143, "terminated"), (2, 130, "interrupted")])
def test_bisect_stopped_by_a_signal_exits_128_plus_it(signum, status, word, monkeypatch, capsys, tmp_path):
    """The session turns SIGTERM/SIGINT into SignalStop carrying the signal; the command exits 143 or 130 (not
    130 for both), one line."""
    import signal as signal_module

    from harness.cli import main
    from harness.execution import bisect_run
    from harness.execution.session import HarnessSession

    def measured_until_the_signal(config, runtime, versions, gates):
        session = HarnessSession.__new__(HarnessSession)
        session.stop_signal = None
        session.progress = type("P", (), {"note": staticmethod(lambda line: None)})()
        session._on_signal(signum, None)  # what the handler does when the signal arrives

    monkeypatch.setattr(bisect_run, "run_bisect", measured_until_the_signal)
    monkeypatch.setattr(bisect_run, "version_range", lambda spec, dist, wheels: ["1.0", "2.0"])
    assert main(["bisect", "ort-cpu", "--versions", "1.0..2.0", "--models", "mlp", "--out",
                 str(tmp_path / "b")]) == status
    assert capsys.readouterr().err == f"harness bisect: {word}\n"
    assert signal_module.Signals(signum)
