"""`harness qualify --reproduce` runs each case on the runtime release its certificate records, in an environment
of its own where this machine's differs (harness.execution.qualify_run.release_plans), as the nightly gate runs
side A; a release that cannot be installed falls back to this interpreter's, labelled. The environment store is a
fake here (no network, nothing built); tests/envs and the gate's e2e tests build real ones from wheels."""

from __future__ import annotations

import pytest

from harness.config import RunConfig
from harness.envs import EnvBuildError, EnvStore
from harness.execution.qualify_run import release_plans
from harness.results.schema import CaseId
from harness.results.stored import EnvironmentRecord


class _Env:
    """A built environment as release_plans reads it: the providers of its own site-packages."""

    def __init__(self, version: str, dist: str = "harness-fakert") -> None:
        self.providers = {"harness_fakert": {"distribution": dist, "version": version}}

    def record(self) -> EnvironmentRecord:
        return EnvironmentRecord(providers=self.providers)


@pytest.fixture
def store(monkeypatch):
    """Installable here: harness-fakert 1.0.0 and 1.1.0 (the newest, what a plain fakert-cpu gets) and the other
    build harness-fakert-gpu 1.0.0; 0.9.0 is gone from the index."""
    import env_fakes  # noqa: F401 - registers fakert-cpu (module harness_fakert, distribution harness-fakert)

    built: list[tuple[str, ...]] = []

    def ensure(self, spec, *, wheels=None, progress=lambda line: None, who=""):
        built.append(spec.requirements)
        known = {("harness-fakert",): _Env("1.1.0"), ("harness-fakert==1.0.0",): _Env("1.0.0"),
                 ("harness-fakert==1.1.0",): _Env("1.1.0"),
                 ("harness-fakert", "harness-fakert-gpu==1.0.0"): _Env("1.0.0", "harness-fakert-gpu")}
        if spec.requirements not in known:
            raise EnvBuildError(f"the environment for {spec.label} could not be built (installing exited 1): "
                                f"ERROR: No matching distribution found for {spec.label}")
        return known[spec.requirements]

    monkeypatch.setattr(EnvStore, "ensure", ensure)
    return built


def _case(runtime: str, batch: int = 1) -> CaseId:
    return CaseId("mlp", runtime, "fp32", batch, None, "cpu")


def _certified(version: str, dist: str = "harness-fakert") -> dict:
    return {"harness_fakert": {"distribution": dist, "version": version}}


def test_each_case_runs_its_certified_release_or_says_why_not(store, tmp_path, fakes):
    config = RunConfig.build(cache_dir=tmp_path / "cache", out_dir=tmp_path / "out")
    cases = [_case("fakert-cpu", b) for b in (1, 2, 3, 4, 5)] + [_case("fake-ok")]
    certified = {cases[0].id: _certified("1.0.0"), cases[1].id: _certified("1.1.0"),
                 cases[2].id: _certified("0.9.0"), cases[3].id: _certified("1.0.0", "harness-fakert-gpu"),
                 cases[5].id: _certified("1.0.0")}  # cases[4]: a certificate that recorded no release
    plans = release_plans(cases, certified, config)
    assert [p.case for p in plans] == cases
    older, same, gone, build, unknown, own = plans
    assert older.run_as == _case("fakert-cpu@1.0.0", 1) and older.pinned and not older.fallback
    assert older.release == ("harness-fakert 1.0.0, the certified release in its own environment (this "
                             "interpreter's is harness-fakert 1.1.0)")
    assert same.run_as == same.case and not same.pinned and same.release == "harness-fakert 1.1.0, as certified"
    assert gone.run_as == gone.case and not gone.pinned
    assert gone.release.startswith("harness-fakert 1.1.0, this interpreter's (the certified harness-fakert 0.9.0 "
                                   "could not be installed here: the environment for harness-fakert==0.9.0 could")
    assert "No matching distribution found" in gone.fallback
    # another build of the same module (as onnxruntime-gpu is of onnxruntime): pinned by its distribution's name
    assert build.run_as == _case("fakert-cpu@harness-fakert-gpu==1.0.0", 4) and build.pinned
    assert unknown.run_as == unknown.case and "the certificate records no release of harness_fakert" in \
        unknown.release
    assert own.run_as == own.case and own.release.startswith("the harness's own environment")
    assert ("harness-fakert==1.0.0",) in store and ("harness-fakert", "harness-fakert-gpu==1.0.0") in store


def test_with_environments_off_a_differing_release_falls_back_labelled(store, tmp_path, fakes):
    config = RunConfig.build(cache_dir=tmp_path / "cache", out_dir=tmp_path / "out", envs="off")
    (plan,) = release_plans([_case("fakert-cpu")], {_case("fakert-cpu").id: _certified("1.0.0")}, config)
    assert plan.run_as == plan.case and not plan.pinned
    assert "runtime environments are off" in plan.fallback and "this interpreter's" in plan.release


@pytest.mark.e2e
def test_reproduce_pins_the_certified_release_or_falls_back_labelled(tmp_path, fake_env):
    """A certificate of fakert-cpu on harness-fakert 1.0.0; reproduced on a machine whose plain install gets 1.1.0
    (30% slower a call), the case runs 1.0.0 in its own environment and its figures reproduce; where 1.0.0 is gone
    from the index, it runs 1.1.0, labelled, and the figures are judged as they come."""
    import json
    import subprocess
    import sys

    from env_fakes import make_wheel

    then, now, gone = tmp_path / "wheels-then", tmp_path / "wheels-now", tmp_path / "wheels-gone"
    make_wheel(then, "1.0.0", 0.001)
    make_wheel(now, "1.0.0", 0.001)
    make_wheel(now, "1.1.0", 0.0013)
    make_wheel(gone, "1.1.0", 0.0013)
    env = dict(fake_env, HARNESS_PLUGINS="env_fakes", HARNESS_CONTENTION_LIMIT="1")
    cli = [sys.executable, "-m", "harness.cli"]

    def harness(*argv: str, cache: str) -> subprocess.CompletedProcess:
        return subprocess.run([*cli, *argv], env={**env, "HARNESS_CACHE_DIR": str(tmp_path / cache)},
                              capture_output=True, text=True, check=False, timeout=600)

    run = harness("run", "--models", "mlp", "--runtimes", "fakert-cpu", "--batch-sizes", "1", "--threads", "1",
                  "--min-time", "0.2", "--repeats", "3", "--env-wheels", str(then), "--out", str(tmp_path / "r"),
                  cache="cache-then")
    assert run.returncode == 0, run.stdout + run.stderr
    spec = tmp_path / "spec.toml"
    spec.write_text('name = "pinned"\n[measure]\nmin_time = 0.2\nthreads = 1\n[defaults.require]\np50_ms_max = 1000\n'
                    '[[case]]\nmodel = "mlp"\nruntime = "fakert-cpu"\nbatch = 1\n')
    cert = harness("qualify", str(spec), "--results", str(tmp_path / "r" / "results.json"), cache="cache-then")
    assert cert.returncode in (0, 3), cert.stdout + cert.stderr
    doc = json.loads((tmp_path / "r" / "certificate.json").read_text())
    assert doc["provenance"]["environment_lock"]["providers"]["mlp-fakert-cpu-fp32-b1"]["harness_fakert"] == \
        {"distribution": "harness-fakert", "version": "1.0.0"}
    pinned = harness("qualify", "--reproduce", str(tmp_path / "r" / "certificate.json"), "--env-wheels", str(now),
                     "--out", str(tmp_path / "p"), cache="cache-now")
    assert pinned.returncode in (0, 1, 3), pinned.stdout + pinned.stderr
    assert ("release mlp-fakert-cpu-fp32-b1: harness-fakert 1.0.0, the certified release in its own environment "
            "(this interpreter's is harness-fakert 1.1.0)") in pinned.stdout, pinned.stdout
    rep = json.loads((tmp_path / "p" / "reproduce.json").read_text())
    assert rep["releases"][0]["runtime"] == "fakert-cpu@1.0.0" and rep["releases"][0]["pinned"]
    assert rep["rows"] and all(r["release"].startswith("harness-fakert 1.0.0, the certified") for r in rep["rows"])
    row = json.loads((tmp_path / "p" / "results.json").read_text())["cases"][0]
    assert row["case"]["runtime"] == "fakert-cpu" and row["environment"]["packages"] == {"harness-fakert": "1.0.0"}
    assert row["details"]["release"]["runtime"] == "fakert-cpu@1.0.0"
    fell = harness("qualify", "--reproduce", str(tmp_path / "r" / "certificate.json"), "--env-wheels", str(gone),
                   "--out", str(tmp_path / "f"), cache="cache-gone")
    assert fell.returncode in (0, 1, 3), fell.stdout + fell.stderr
    assert "release mlp-fakert-cpu-fp32-b1: harness-fakert 1.1.0, this interpreter's (the certified harness-fakert " \
           "1.0.0 could not be installed here: the environment for harness-fakert==1.0.0 could not be built" in \
           fell.stdout, fell.stdout
    rep = json.loads((tmp_path / "f" / "reproduce.json").read_text())
    assert not rep["releases"][0]["pinned"] and "No matching distribution" in rep["releases"][0]["fallback"]
    assert "1 case(s) on this interpreter's release" in fell.stdout
    row = json.loads((tmp_path / "f" / "results.json").read_text())["cases"][0]
    assert row["environment"]["packages"] == {"harness-fakert": "1.1.0"}
