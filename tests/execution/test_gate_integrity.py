"""The nightly gate's side A is what it says it is (#57): every blob re-hashed against its digest before it is
replayed, references kept inside the store, the runtime's build and release pinned as the baseline ran it, the
stored configuration checked before anything is measured, and `baseline save` under a lock.

Unit tests on the fake clock and `fake-graph` (tests/fakes.py); the release pin through the CLI with wheels the
tests build (tests/env_fakes.py): harness-fakert-gpu is a second build of the module harness_fakert, as
onnxruntime-gpu is of onnxruntime."""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from harness.commands.gate_config import check_stored_config
from harness.errors import ResultsError
from harness.execution.gate_run import plan_gate
from harness.gating import baseline as baseline_mod
from harness.gating.baseline import (DIGEST_MISMATCH, blob_path, load_baseline_runs, load_replay, save_baseline,
                                     verify_blob)
from harness.gating.verdicts import EXIT_REGRESSION
from harness.model import register_model
from harness.results.environment import module_provider, site_providers
from harness.results.schema import CaseId, CaseResult, RunResults
from harness.results.stats import latency_stats
from harness.results.store import write_results
from harness.results.stored import RunEnvironmentRecord

CASE = "fake-file-fake-graph-fp32-b1"


def _run(tmp_path: Path, artifacts: dict[str, Path], run_id: str = "base-1", config: dict | None = None,
         fingerprints: dict[str, str] | None = None, environment: dict | None = None) -> Path:
    """A finished run of fake-graph over the model files `artifacts` (model name -> file)."""
    cases = []
    for model, path in artifacts.items():
        samples = [int(100_000 * (1 + 0.001 * (i % 7))) for i in range(40)]
        cases.append(CaseResult(CaseId(model, "fake-graph", "fp32", 1, None, "cpu"), "passed", samples_ns=samples,
                                latency=latency_stats(samples), timing_scope="host_to_host",
                                artifact=str(path), feed_sha256="f" * 64,
                                model_fingerprint=(fingerprints or {}).get(model, "0" * 64)))
    run = RunResults(run_id=run_id, started_at="2026-11-26T01:00:00+00:00", cases=cases,
                     environment=RunEnvironmentRecord.from_dict(environment or {"machine": "test", "libraries": {"numpy": "2.0"}}),
                     config=config or {"threads": 1, "seed": 0, "repeats": 1})
    run.finished_at = "2099-01-01T00:00:00+00:00"
    run.complete = True
    return write_results(run, tmp_path / run_id).parent


@pytest.fixture
def saved(tmp_path, fakes):
    """A baseline `main` of one fake-graph case whose model file cost 100 us; (baselines folder, blob path)."""
    model = tmp_path / "model.onnx"
    model.write_text("cost_us=100\n")
    register_model(dataclasses.replace(fakes.FAKE_MODEL, name="fake-file", build=None, onnx_path=model), replace=True)
    save_baseline(_run(tmp_path, {"fake-file": model}), "main", tmp_path / "baselines")
    replay = load_replay("main", tmp_path / "baselines")
    sha = replay.cases[CASE].artifact_sha256
    return tmp_path / "baselines", blob_path(tmp_path / "baselines" / "artifacts", sha)


def _plan(baselines: Path):
    runs = load_baseline_runs("main", baselines)
    return plan_gate(runs[-1], load_replay("main", baselines))[0]


def _replace(blob: Path, data: bytes) -> None:
    os.chmod(blob, 0o644)
    blob.write_bytes(data)


@pytest.mark.parametrize("mutate, says", [
    (lambda b: _replace(b, b"cost_us=999\n"), "hashes to"),  # same size, another graph: swapped
    (lambda b: _replace(b, b"cost_us=1"), "the blob holds 9 bytes, the baseline stored 12"),  # truncated
    (lambda b: _replace(b, bytes(range(12))), "hashes to"),  # garbage of the same size
])
def test_a_blob_that_no_longer_matches_its_digest_is_never_replayed(saved, mutate, says):
    baselines, blob = saved
    assert _plan(baselines).fallback == ""  # intact: replayed
    mutate(blob)
    g = _plan(baselines)
    assert g.artifact is None and DIGEST_MISMATCH in g.fallback and says in g.fallback, g.fallback
    assert blob.name[:-5] in g.fallback and str(baselines / "main.json") in g.fallback  # the digest and the file
    assert g.fallback.endswith("never replayed")


def test_a_swapped_blob_falls_back_to_the_stored_figures_labelled(saved, tmp_path, fakes, monkeypatch):
    """Through the driver: the case is judged on the stored figures, labelled with the digest mismatch; side A
    never ran (one worker's worth of forward measuring, no A/B row)."""
    from harness.config import RunConfig
    from harness.execution.gate_run import GateDriver
    from harness.execution.session import HarnessSession
    from harness.gating import load_gate_config
    from harness.measure.timer import TimingPolicy

    baselines, blob = saved
    _replace(blob, b"cost_us=999\n")
    runs = load_baseline_runs("main", baselines)
    replay = load_replay("main", baselines)
    plans = plan_gate(runs[-1], replay)
    config = RunConfig.build(workload="gate", isolation=False, threads=1, ab_pairs=4, ab_block_time_s=0.002,
                             contention_limit=1.0, repeats=1, cache_dir=tmp_path / "cache", out_dir=tmp_path / "g",
                             timing=TimingPolicy(warmup_iters=1, warmup_time_s=0.0, min_iters=5, min_time_s=0.001))
    outcome = GateDriver(HarnessSession(config), runs, replay, load_gate_config(None, ())).run(plans)
    rows = [r for r in outcome.records if r.case_id == CASE]
    assert rows and CASE in outcome.fallbacks
    assert all(DIGEST_MISMATCH in r.reason and r.reason.startswith("stored figures") for r in rows), rows
    assert all(c.ab is None for c in outcome.run.cases)  # no A/B: the stored graph was not run


def test_references_outside_the_store_are_refused_when_the_baseline_is_read(saved):
    baselines, _ = saved
    file = baselines / "main.json"
    doc = json.loads(file.read_text())
    for ref in ("../outside/evil", "/etc/passwd", "A" * 64, "ab/../../x"):
        doc["replay"]["cases"][CASE]["artifact_sha256"] = ref
        file.write_text(json.dumps(doc))
        with pytest.raises(ResultsError) as info:
            load_replay("main", baselines)
        assert str(file) in str(info.value) and f"replay.cases.{CASE}.artifact_sha256" in str(info.value)
        assert "not a sha256 digest" in str(info.value)


def test_a_symlink_fifo_or_folder_in_the_store_is_not_followed(saved, tmp_path):
    baselines, blob = saved
    outside = tmp_path / "outside.onnx"
    outside.write_text("cost_us=100\n")  # even the right content, outside the store, is not read through a link
    blob.unlink()
    blob.symlink_to(outside)
    path, why = verify_blob(blob.parent.parent, blob.name[:-5])
    assert path is None and "is a symlink" in why
    blob.unlink()
    os.mkfifo(blob)  # would block a reader that opened it
    path, why = verify_blob(blob.parent.parent, blob.name[:-5])
    assert path is None and "not a regular file" in why
    blob.unlink()
    folder = blob.parent
    folder.rmdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / blob.name).write_text("cost_us=100\n")
    folder.symlink_to(tmp_path / "elsewhere")
    path, why = verify_blob(folder.parent, blob.name[:-5])
    assert path is None and "the blob's folder" in why and "symlink" in why
    assert "symlink" in _plan(baselines).fallback


def test_a_poisoned_store_is_repaired_by_the_next_save(tmp_path, fakes):
    """Someone put other bytes (of the same size) where the digest of our graph lives: the save re-hashes the blob
    it would share, says so, and stores the right bytes; the gate then replays them."""
    model = tmp_path / "model.onnx"
    model.write_text("cost_us=100\n")
    register_model(dataclasses.replace(fakes.FAKE_MODEL, name="fake-file", build=None, onnx_path=model), replace=True)
    import hashlib

    sha = hashlib.sha256(model.read_bytes()).hexdigest()
    poisoned = blob_path(tmp_path / "baselines" / "artifacts", sha)
    poisoned.parent.mkdir(parents=True)
    poisoned.write_text("cost_us=001\n")
    lines: list[str] = []
    save_baseline(_run(tmp_path, {"fake-file": model}), "main", tmp_path / "baselines", warn=lines.append)
    assert poisoned.read_text() == "cost_us=100\n"
    assert any(sha in line and "replaced by this save's copy" in line for line in lines), lines
    assert _plan(tmp_path / "baselines").fallback == ""


def _onnx(path: Path, op: str) -> Path:
    """A real one-node ONNX graph y = op(x, x) over float x[batch, 4]."""
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])
    graph = helper.make_graph([helper.make_node(op, ["x", "x"], ["y"])], "g", [x], [y])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_another_cases_digest_is_refused_by_the_model_fingerprint(tmp_path, fakes):
    """Two user ONNX models of the same inputs; the baseline edited so that model a's case points at b's (intact)
    blob: the digest checks out, but the blob is not the model a's case ran."""
    from harness.model import get_model
    from harness.model_files import register_user_model

    a, b = _onnx(tmp_path / "a.onnx", "Add"), _onnx(tmp_path / "b.onnx", "Mul")
    for p in (a, b):
        register_user_model(str(p))
    fps = {m: get_model(m).fingerprint() for m in ("a", "b")}
    run = _run(tmp_path, {"a": a, "b": b}, config={"threads": 1, "seed": 0, "repeats": 1,
                                                     "user_models": [str(a), str(b)]}, fingerprints=fps)
    save_baseline(run, "main", tmp_path / "baselines")
    runs = load_baseline_runs("main", tmp_path / "baselines")
    plans = plan_gate(runs[-1], load_replay("main", tmp_path / "baselines"))
    assert [g.fallback for g in plans] == ["", ""]  # honest: both replayed
    file = tmp_path / "baselines" / "main.json"
    doc = json.loads(file.read_text())
    cases = doc["replay"]["cases"]
    ida, idb = "a-fake-graph-fp32-b1", "b-fake-graph-fp32-b1"
    cases[ida]["artifact_sha256"], cases[ida]["artifact_bytes"] = cases[idb]["artifact_sha256"], \
        cases[idb]["artifact_bytes"]
    file.write_text(json.dumps(doc))
    plans = plan_gate(runs[-1], load_replay("main", tmp_path / "baselines"))
    assert "not the model the baseline ran" in plans[0].fallback and plans[1].fallback == ""


@pytest.mark.parametrize("field, value, says", [
    ("packages", {"onnxruntime": "1.0 --index-url http://127.0.0.1:1/simple"}, "not a valid version"),
    ("packages", {"onnxruntime": "<b>1.0</b>"}, "not a valid version"),
    ("packages", {"--pre onnxruntime": "1.0"}, "not a distribution name"),
    ("providers", {"onnxruntime": {"distribution": "onnxruntime-gpu", "version": "1.30 ; rm"}}, "valid version"),
    ("providers", {"onnxruntime": {"distribution": "x y", "version": "1.30.0"}}, "not a distribution name"),
])
def test_stored_releases_that_are_not_releases_are_refused_naming_the_field(saved, field, value, says):
    baselines, _ = saved
    file = baselines / "main.json"
    doc = json.loads(file.read_text())
    doc["replay"]["cases"][CASE][field] = value
    file.write_text(json.dumps(doc))
    with pytest.raises(ResultsError) as info:
        load_replay("main", baselines)
    assert str(file) in str(info.value) and f"replay.cases.{CASE}.{field}" in str(info.value) and says in \
        str(info.value), str(info.value)


def test_the_module_provider_is_the_build_this_install_imports():
    """On the README's install onnxruntime's module comes from onnxruntime-gpu (never recorded as onnxruntime)."""
    from importlib import metadata

    got = module_provider("onnxruntime")
    assert got is not None
    try:
        assert got == {"distribution": "onnxruntime-gpu", "version": metadata.version("onnxruntime-gpu")}
    except metadata.PackageNotFoundError:  # an install of the CPU package instead
        assert got == {"distribution": "onnxruntime", "version": metadata.version("onnxruntime")}
    assert module_provider("no_such_module_here") is None


def test_site_providers_read_an_environments_own_packages(tmp_path):
    import zipfile

    from env_fakes import make_wheel

    wheel = make_wheel(tmp_path / "w", "1.0.0", 0.0, dist="harness-fakert-gpu")
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    assert site_providers(site) == {"harness_fakert": {"distribution": "harness-fakert-gpu", "version": "1.0.0"}}


def test_the_saved_baseline_records_the_providers_of_the_run(tmp_path, fakes):
    model = tmp_path / "model.onnx"
    model.write_text("cost_us=100\n")
    register_model(dataclasses.replace(fakes.FAKE_MODEL, name="fake-file", build=None, onnx_path=model), replace=True)
    env = {"machine": "t", "libraries": {"onnxruntime": None, "onnxruntime-gpu": "1.29.0"},
           "providers": {"onnxruntime": {"distribution": "onnxruntime-gpu", "version": "1.29.0"}}}
    save_baseline(_run(tmp_path, {"fake-file": model}, environment=env), "main", tmp_path / "baselines")
    stored = load_replay("main", tmp_path / "baselines").cases[CASE]
    assert stored.providers == {"onnxruntime": {"distribution": "onnxruntime-gpu", "version": "1.29.0"}}
    # a baseline saved before providers were recorded: the one build in its package list is inferred
    assert baseline_mod.release_by_name(env["libraries"], "onnxruntime") == \
        {"distribution": "onnxruntime-gpu", "version": "1.29.0"}
    assert baseline_mod.release_by_name({"onnxruntime": None}, "onnxruntime") is None


# ------------------------------------------------------------------ the stored configuration
def _config_run(tmp_path: Path, **config) -> RunResults:
    return load_baseline_runs(_run(tmp_path, {"fake-linear": tmp_path / "m.onnx"}, config=config))[-1]


@pytest.mark.parametrize("config, field, says", [
    ({"user_models": ["/etc/hostname"]}, "user_models[0]", "neither an .onnx file"),
    ({"user_models": ["FIFO.onnx"]}, "user_models[0]", "FIFO"),
    ({"user_models": ["missing.onnx"]}, "user_models[0]", "no such model file"),
    ({"user_models": "a.onnx"}, "user_models", "not a list"),
    ({"seed": -1}, "seed", "below the minimum 0"),
    ({"seed": "abc"}, "seed", "not an integer"),
    ({"threads": "abc"}, "threads", "not an integer"),
    ({"threads": 100000}, "threads", "more threads than any machine has cores"),
    ({"threads": -3}, "threads", "below the minimum 1"),
    ({"repeats": 0}, "repeats", "not a count"),
    ({"feeds": 5}, "feeds", "not a path"),
])
def test_a_bad_stored_configuration_is_refused_before_anything_runs(tmp_path, fakes, config, field, says):
    refs = config.get("user_models")
    if refs == ["FIFO.onnx"]:
        os.mkfifo(tmp_path / "FIFO.onnx")
        config = {"user_models": [str(tmp_path / "FIFO.onnx")]}
    elif refs == ["missing.onnx"]:
        config = {"user_models": [str(tmp_path / "missing.onnx")]}
    run = _config_run(tmp_path, **config)
    with pytest.raises(ResultsError) as info:
        check_stored_config(run, tmp_path / "main.json", 0)
    text = str(info.value)
    assert text.startswith(f"{tmp_path / 'main.json'}: runs[0].config.{field}: ") and says in text, text
    assert "\n" not in text


def test_a_case_whose_model_is_unknown_tonight_is_refused_before_anything_runs(tmp_path, fakes):
    run = load_baseline_runs(_run(tmp_path, {"gone-model": tmp_path / "m.onnx"}))[-1]
    with pytest.raises(ResultsError, match=r"runs\[0\]\.cases\[0\]\.case\.model: 'gone-model' is neither"):
        check_stored_config(run, tmp_path / "main.json", 0)
    check_stored_config(_config_run(tmp_path, threads=2, seed=7, repeats=3), tmp_path / "main.json", 0)  # fine


# ------------------------------------------------------------------ baseline save: a lock, its own ids, errors
def test_two_appends_at_once_keep_both_runs_and_each_save_names_its_own(tmp_path, fakes):
    model = tmp_path / "model.onnx"
    model.write_text("cost_us=100\n")
    register_model(dataclasses.replace(fakes.FAKE_MODEL, name="fake-file", build=None, onnx_path=model), replace=True)
    runs = [_run(tmp_path, {"fake-file": model}, run_id=f"r{i}") for i in range(6)]
    barrier = threading.Barrier(3)
    got: dict[int, object] = {}

    def save(i: int) -> None:
        barrier.wait()
        for k in (i, i + 3):
            got[k] = save_baseline(runs[k], "main", tmp_path / "baselines", append=True)

    threads = [threading.Thread(target=save, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stored = [r.run_id for r in load_baseline_runs("main", tmp_path / "baselines")]
    assert sorted(stored) == [f"r{i}" for i in range(6)]  # none lost
    assert all(got[k].added == [f"r{k}"] for k in range(6))  # each save names the run it added
    plain = save_baseline(runs[0], "plain", tmp_path / "baselines")
    assert plain.run_ids == ["r0"] and plain.added == ["r0"]


@pytest.mark.parametrize("code, says", [(errno.EROFS, "Read-only file system"),
                                        (errno.ENOSPC, "No space left on device")])
def test_a_folder_that_cannot_be_written_is_one_line_naming_it(tmp_path, fakes, monkeypatch, code, says):
    model = tmp_path / "model.onnx"
    model.write_text("cost_us=100\n")
    register_model(dataclasses.replace(fakes.FAKE_MODEL, name="fake-file", build=None, onnx_path=model), replace=True)
    run = _run(tmp_path, {"fake-file": model})

    def refuse(path, text):  # the kernel's answer for a read-only mount or a full disk (root ignores chmod)
        raise OSError(code, os.strerror(code), str(path))

    monkeypatch.setattr(baseline_mod, "atomic_write_text", refuse)
    with pytest.raises(ResultsError) as info:
        save_baseline(run, "main", tmp_path / "baselines")
    text = str(info.value)
    assert text.startswith(f"{tmp_path / 'baselines'}: cannot save baseline 'main': {says}") and "\n" not in text
    assert not (tmp_path / "baselines" / "main.json").exists()


@pytest.mark.e2e
def test_the_cli_save_reports_a_write_error_in_one_line_exit_2(tmp_path, fake_env):
    """A file where the baselines folder should be: exit 2, one line naming it, no traceback."""
    from harness.results.store import write_results as write

    samples = [100_000] * 20
    run = RunResults(run_id="r1", started_at="2026-11-26T01:00:00+00:00", cases=[CaseResult(
        CaseId("fake-linear", "fake-ok", "fp32", 1, None, "cpu"), "passed", samples_ns=samples,
        latency=latency_stats(samples), timing_scope="host_to_host")], config={"threads": 1},
        environment=RunEnvironmentRecord.from_dict({"machine": "t"}))
    run.finished_at, run.complete = "2099-01-01T00:00:00+00:00", True
    path = write(run, tmp_path / "r").parent
    (tmp_path / "notadir").write_text("x")
    got = subprocess.run([sys.executable, "-m", "harness.cli", "baseline", "save", str(path), "--name", "main",
                          "--dir", str(tmp_path / "notadir")], env=fake_env, capture_output=True, text=True,
                         check=False, timeout=120)
    assert got.returncode == 2 and "Traceback" not in got.stderr, got.stderr
    assert f"{tmp_path / 'notadir'}: cannot save baseline 'main'" in got.stderr


# ------------------------------------------------------------------ the release pin, end to end
@pytest.mark.e2e
def test_another_build_upgraded_between_save_and_gate_is_pinned_or_falls_back(tmp_path, fake_env):
    """The baseline ran fakertgpu-cpu with harness-fakert-gpu 1.0.0 (a build of the module harness_fakert whose
    name is not the runtime's distribution, as onnxruntime-gpu is not onnxruntime); tonight 1.1.0 is installed,
    30% slower per call. Side A runs harness-fakert-gpu 1.0.0 in its own environment and the regression is found.
    Where 1.0.0 cannot be installed any more, the case falls back to the stored figures, labelled."""
    from env_fakes import make_wheel

    then, now, gone = tmp_path / "wheels-then", tmp_path / "wheels-now", tmp_path / "wheels-gone"
    make_wheel(then, "1.0.0", 0.001, dist="harness-fakert-gpu")
    make_wheel(now, "1.0.0", 0.001, dist="harness-fakert-gpu")
    make_wheel(now, "1.1.0", 0.0013, dist="harness-fakert-gpu")
    make_wheel(gone, "1.1.0", 0.0013, dist="harness-fakert-gpu")
    env = dict(fake_env, HARNESS_PLUGINS="env_fakes", HARNESS_BASELINE_DIR=str(tmp_path / "baselines"),
               HARNESS_CONTENTION_LIMIT="1")
    cli = [sys.executable, "-m", "harness.cli"]
    run = subprocess.run([*cli, "run", "--models", "mlp", "--runtimes", "fakertgpu-cpu", "--batch-sizes", "1",
                          "--threads", "1", "--min-time", "0.1", "--repeats", "1", "--env-wheels", str(then),
                          "--cache-dir", str(tmp_path / "cache-then"), "--out", str(tmp_path / "r")],
                         env=env, capture_output=True, text=True, check=False, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    saved = subprocess.run([*cli, "baseline", "save", str(tmp_path / "r"), "--name", "main"], env=env,
                           capture_output=True, text=True, check=False, timeout=120)
    assert saved.returncode == 0, saved.stdout + saved.stderr
    stored = load_replay("main", tmp_path / "baselines").cases["mlp-fakertgpu-cpu-fp32-b1"]
    assert stored.providers["harness_fakert"] == {"distribution": "harness-fakert-gpu", "version": "1.0.0"}
    gate = subprocess.run([*cli, "gate", "main", "--ab-pairs", "10", "--ab-block-time", "0.02", "--env-wheels",
                           str(now), "--cache-dir", str(tmp_path / "cache-now"), "--out", str(tmp_path / "g")],
                          env=env, capture_output=True, text=True, check=False, timeout=600)
    assert gate.returncode == EXIT_REGRESSION, gate.stdout + gate.stderr
    assert "side A runs harness-fakert-gpu 1.0.0 (the baseline's release) in its own environment, side B " \
           "tonight's 1.1.0" in gate.stdout, gate.stdout
    row = json.loads((tmp_path / "g" / "results.json").read_text())["cases"][0]
    side_a = row["details"]["gate"]["side_a"]
    assert side_a["runtime"] == "fakertgpu-cpu@harness-fakert-gpu==1.0.0"
    assert side_a["release"] == "harness-fakert-gpu 1.0.0"
    assert side_a["environment"]["packages"] == {"harness-fakert-gpu": "1.0.0"}
    assert row["details"]["gate"]["side_b"]["release"] == "harness-fakert-gpu 1.1.0"
    assert row["ab"]["verdict"] == "regressed", row["ab"]["reason"]
    fell = subprocess.run([*cli, "gate", "main", "--ab-pairs", "4", "--ab-block-time", "0.02", "--env-wheels",
                           str(gone), "--cache-dir", str(tmp_path / "cache-gone"), "--out", str(tmp_path / "f")],
                          env=env, capture_output=True, text=True, check=False, timeout=600)
    assert "side A not reproduced: side A (fakertgpu-cpu@harness-fakert-gpu==1.0.0" in fell.stdout + fell.stderr, \
        fell.stdout + fell.stderr
    md = (tmp_path / "f" / "gate.md").read_text()
    assert "stored figures (not re-measured" in md
    assert np.isfinite(json.loads((tmp_path / "f" / "gate.json").read_text())["exit_code"])
