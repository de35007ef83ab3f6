"""The tune=N variant: TVM tuned with MetaSchedule for N trials (tvm-cpu only), as a cached artifact whose
tuning runs in a child process; a crashing tuner is a skip with the crash's one-line cause.

The fake tuners run without TVM (the main CI venv has none); the real tuning needs the tvm extra."""

from __future__ import annotations

import json
import os
import sys
import textwrap

import numpy as np
import pytest

from harness.artifacts import ArtifactCache, tvm_tune
from harness.artifacts.cache import Artifact
from harness.artifacts.tvm_tune import TvmTunedFromOnnx, crash_cause
from harness.data import make_feed
from harness.errors import UnsupportedModelError, UsageError
from harness.model import get_model
from harness.precision import Precision
from harness.runtimes import RuntimeOptions, get_runtime, runtime_names
from harness.variants import parse_variant

# What the apache-tvm 0.27.0.post1 wheel printed here with apache-tvm-ffi 0.1.15.post2 (shortened)
TVM_SEGFAULT = """\
2026-11-26 08:03:11 [INFO] Logging directory: /tmp/work/logs
!!!!!!! Segfault encountered !!!!!!!
  File "./signal/../sysdeps/unix/sysv/linux/x86_64/libc_sigaction.c", line 0, in 0x00007f5391c5a04f
  File "<unknown>", line 0, in tvm::ffi::ToJSONGraph(tvm::ffi::Any const&, tvm::ffi::Any const&)
  File "<unknown>", line 0, in TVMFFIPyCallback(void*, TVMFFIAny const*, int, TVMFFIAny*)
"""


def _fake_tuner(tmp_path, body: str) -> tuple[str, ...]:
    """A tuner command: a Python script given the job file's path as sys.argv[1]."""
    script = tmp_path / "fake_tuner.py"
    script.write_text("import json, os, signal, sys\nfrom pathlib import Path\n"
                      "job = json.loads(Path(sys.argv[1]).read_text())\nwork = Path(job['work_dir'])\n"
                      + textwrap.dedent(body))
    return (sys.executable, str(script))


def _step(tmp_path, command, trials=8) -> TvmTunedFromOnnx:
    onnx_path = tmp_path / "model.onnx"
    onnx_path.write_bytes(b"not read by a fake tuner")
    onnx = Artifact(onnx_path, "onnxkey", True, 0.0, {})
    return TvmTunedFromOnnx(onnx, ArtifactCache(tmp_path / "cache"), shapes={"x": (1, 256)},
                            dtypes={"x": "float32"}, target={"kind": "llvm", "num-cores": 1}, trials=trials,
                            tvm_version="fake", label="mlp", command=command)


# ------------------------------------------------------------------ spelling and who may take it
def test_tune_spelling_budget_and_the_one_runtime_that_honours_it():
    assert parse_variant("tune=on").name == "tune=64" and parse_variant("tune=016").name == "tune=16"
    for bad in ("tune=0", "tune=-3", "tune=fast", "tune=20001"):
        with pytest.raises(UsageError, match=r"tune takes a whole number of trials from 1 to 20000, or on \(64\)"):
            parse_variant(bad)
    tune = parse_variant("tune=32")
    spec = get_model("mlp")
    _, options = tune.apply(spec, RuntimeOptions(threads=1))
    assert options.tuning_trials == 32 and options.variant == "tune=32"
    assert [n for n in runtime_names() if "tvm-tuning" in get_runtime(n).variant_hooks] == ["tvm-cpu"]
    why = tune.refusal(spec, get_runtime("ort-cpu").variant_hooks, "ort-cpu", Precision.FP32)
    assert why == "variant tune=32 needs the tvm-tuning capability, which ort-cpu lacks"
    assert "fp32 cases only" in tune.refusal(spec, get_runtime("tvm-cpu").variant_hooks, "tvm-cpu", Precision.INT8)


# ------------------------------------------------------------------ the tuner child, faked (no TVM needed)
def test_crash_cause_is_one_line():
    assert crash_cause(TVM_SEGFAULT) == "Segfault encountered in tvm::ffi::ToJSONGraph"
    assert crash_cause("Traceback (most recent call last):\n  File 'x.py'\nRuntimeError: No module named "
                       "'xgboost'\n") == "RuntimeError: No module named 'xgboost'"
    assert crash_cause("") == "no output" and crash_cause("a\nlast words\n\n") == "last words"


def test_a_crashing_tuner_is_unsupported_with_its_cause_and_caches_nothing(tmp_path):
    command = _fake_tuner(tmp_path, f"""
        sys.stdout.write({TVM_SEGFAULT!r}); sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGSEGV)
    """)
    step = _step(tmp_path, command)
    with pytest.raises(UnsupportedModelError, match=r"^TVM MetaSchedule tuning crashed \(SIGSEGV\) after \d+ s: "
                                                    r"Segfault encountered in tvm::ffi::ToJSONGraph \(the tvm extra "
                                                    r"pins what tuning needs: pip install .*\[tvm\]"):
        step()
    assert not (tmp_path / "cache" / "tvm-tuned").exists() or not any((tmp_path / "cache" / "tvm-tuned").iterdir())
    failing = _fake_tuner(tmp_path, "raise RuntimeError('no tasks')\n")
    with pytest.raises(UnsupportedModelError, match=r"failed \(exit status 1\) after \d+ s: RuntimeError: no tasks$"):
        _step(tmp_path, failing)()


def test_a_tuned_build_is_cached_with_its_database_trials_and_time(tmp_path):
    command = _fake_tuner(tmp_path, """
        Path(job['out']).write_bytes(b'so')
        (work / 'database_tuning_record.json').write_text('{}\\n' * 5)
        (work / 'result.json').write_text(json.dumps({'tuning_s': 1.5, 'tuning_tasks': 3, 'tuning_trials': 8}))
    """)
    first = _step(tmp_path, command)()
    assert not first.cache_hit and first.path.read_bytes() == b"so"
    assert first.meta["tuning_trials_run"] == 5 and first.meta["tuning_s"] == 1.5 and first.meta["tuned"]
    tuning = first.path.parent / "tuning"
    assert {p.name for p in tuning.iterdir()} >= {"job.json", "result.json", "tuner.log", "database_tuning_record.json"}
    assert json.loads((tuning / "job.json").read_text())["trials"] == 8
    again = _step(tmp_path, command)()
    assert again.cache_hit and again.path == first.path and again.meta["tuning_trials_run"] == 5
    other = _step(tmp_path, command, trials=16)()
    assert other.path != first.path and other.key != first.key  # the budget is in the key


def _tvm_cpu():
    """tvm-cpu, or a skip with its reason; a failure where CI requires it (HARNESS_REQUIRE_RUNTIMES, .ci/extras)."""
    cls = get_runtime("tvm-cpu")
    verdict = cls.availability()
    if not verdict:
        if "tvm-cpu" in os.environ.get("HARNESS_REQUIRE_RUNTIMES", "").split(","):
            pytest.fail(f"tvm-cpu is required here (HARNESS_REQUIRE_RUNTIMES) but unavailable: {verdict.reason}")
        pytest.skip(verdict.reason)
    return cls


def test_a_crashing_tuner_makes_the_tvm_case_a_skip_with_the_cause(tmp_path, monkeypatch):
    """End to end through the case runner: tvm-cpu ~tune=8 with a tuner that segfaults is a skipped row."""
    _tvm_cpu()
    from harness.execution import CaseRunner
    from harness.matrix import case_ids
    from tests.variants.test_variants import _config

    monkeypatch.setattr(tvm_tune, "TUNER", _fake_tuner(tmp_path, f"""
        sys.stdout.write({TVM_SEGFAULT!r}); sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGSEGV)
    """))
    config = _config(tmp_path, "tune=8")
    [case] = case_ids(["mlp"], ["tvm-cpu"], ["fp32"], [1], [32], variants=config.matrix.variants)
    row = CaseRunner().run(case, config)
    assert row.status == "skipped", row.reason
    assert row.reason.startswith("TVM MetaSchedule tuning crashed (SIGSEGV)")
    assert "Segfault encountered in tvm::ffi::ToJSONGraph (the tvm extra pins" in row.reason


# ------------------------------------------------------------------ the real thing (tvm extra)
@pytest.mark.slow
def test_metaschedule_tunes_the_mlp_for_its_budget_and_keeps_the_outputs(tmp_path):
    """A minute or two on 2 cores: MetaSchedule for 6 trials over the mlp's tasks, then a cache hit."""
    cls = _tvm_cpu()
    import torch

    spec = get_model("mlp")
    feed = make_feed(spec, {"batch": 1}, seed=0)
    _, options = parse_variant("tune=6").apply(spec, RuntimeOptions(threads=1, cache=ArtifactCache(tmp_path)))
    with cls(spec, Precision.FP32, options) as rt:
        out = rt.infer(feed)["logits"]
        details = rt.details()
        folder = rt.artifact.path.parent
    with torch.inference_mode():
        expected = spec.build()(torch.from_numpy(feed["x"])).numpy()
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)
    assert details["tuning"] == "metaschedule" and details["tuning_trials"] == 6
    assert 1 <= details["tuning_trials_run"] <= 6 and details["tuning_s"] > 0 and details["tuning_tasks"] >= 1
    assert details["target"]["num-cores"] == 1 and not details["artifact_cache_hit"]
    assert (folder / "tuning" / "database_tuning_record.json").is_file()
    with cls(spec, Precision.FP32, options) as rt:
        rt.infer(feed)
        assert rt.details()["artifact_cache_hit"] and rt.details()["tuning_trials_run"] == details["tuning_trials_run"]
