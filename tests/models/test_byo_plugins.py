"""Bring your own: a user package adding a ModelSpec through the `harness.models` entry point or
HARNESS_PLUGINS, and the examples of docs/bring-your-own-model.md (an ONNX file, docs/examples/my_torch_model.py),
run end to end."""

from __future__ import annotations

import pytest

import os
import subprocess
import sys
from pathlib import Path

from harness.results import load_results

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "bring-your-own-model.md"  # linked from the README

USER_ZOO = '''
from harness.model import BATCH, ModelSpec, TensorSpec, register_model


def build():
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 3)).eval()


SPEC = ModelSpec(name="user-linear", build=build, inputs=(TensorSpec("input", (BATCH, 6)),), outputs=("y",),
                 task="classification", tags=frozenset({"user-zoo"}))


def model_specs():          # entry point: group harness.models, a callable returning ModelSpecs
    return [SPEC]


if __name__ != "__main__" and __name__ == "user_zoo_plugin":
    register_model(SPEC, replace=True)   # HARNESS_PLUGINS=user_zoo_plugin: imported for this side effect
'''


def _harness(*args, env, timeout=300):
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], capture_output=True, text=True,
                          env=env, timeout=timeout)


def _env(fake_env, *paths):
    return {**fake_env, "PYTHONPATH": os.pathsep.join([*map(str, paths), fake_env.get("PYTHONPATH", "")])}


@pytest.mark.e2e
def test_entry_point_of_an_installed_user_package_adds_a_model(fake_env, tmp_path):
    (tmp_path / "user_zoo.py").write_text(USER_ZOO)
    dist = tmp_path / "user_zoo-0.1.dist-info"  # what `pip install` of a package with the entry point leaves
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: user-zoo\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[harness.models]\nuser_zoo = user_zoo:model_specs\n")
    env = _env(fake_env, tmp_path)
    listed = _harness("models", env=env)
    assert "user-linear" in listed.stdout, listed.stdout + listed.stderr
    out = tmp_path / "run"
    proc = _harness("run", "--models", "user-linear", "--runtimes", "torch-cpu,ort-cpu", "--batch-sizes", "2",
                    "--min-time", "0.02", "--min-iters", "3", "--out", str(out), env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [c.status for c in load_results(out).cases] == ["passed", "passed"]


@pytest.mark.e2e
def test_harness_plugins_variable_adds_a_model(fake_env, tmp_path):
    (tmp_path / "user_zoo_plugin.py").write_text(USER_ZOO)
    env = _env(fake_env, tmp_path)
    env["HARNESS_PLUGINS"] = "fakes,user_zoo_plugin"
    out = tmp_path / "run"
    proc = _harness("run", "--models", "user-linear", "--runtimes", "ort-cpu", "--batch-sizes", "1",
                    "--min-time", "0.02", "--min-iters", "3", "--out", str(out), env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (case,) = load_results(out).cases
    assert case.status == "passed" and case.reference_runtime == "torch-cpu"


@pytest.mark.e2e
def test_readme_example_factory_runs_end_to_end(fake_env, tmp_path):
    env = _env(fake_env, ROOT / "docs" / "examples")
    out = tmp_path / "run"
    proc = _harness("run", "--model", "my_torch_model:make_model", "--runtimes", "torch-cpu,ort-cpu",
                    "--batch-sizes", "1,4", "--seq-lens", "16", "--min-time", "0.02", "--min-iters", "3",
                    "--out", str(out), env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cases = load_results(out).cases
    assert [(c.case.model, c.case.runtime, c.case.batch, c.case.seq, c.status) for c in cases] == [
        ("my_torch_model.make_model", rt, b, 16, "passed") for rt in ("torch-cpu", "ort-cpu") for b in (1, 4)]
    assert all(c.accuracy["top1_agreement"] == 1.0 for c in cases)  # task "classification" from meta
    assert "(examples/my_torch_model.py)" in GUIDE.read_text()  # the guide links the example it documents
    assert "docs/bring-your-own-model.md" in (ROOT / "README.md").read_text()


@pytest.mark.e2e
def test_guide_onnx_example_runs_as_written(fake_env, tmp_path):
    """docs/bring-your-own-model.md's copy-paste ONNX example: its Python snippet, then its harness command
    (short timing)."""
    import re
    import shlex

    text = GUIDE.read_text()
    block = re.search(r"```bash\npython - <<'PY'\n(.*?)\nPY\n(harness run [^\n]+)\n```", text, re.S)
    assert block, "docs/bring-your-own-model.md: the ONNX copy-paste example is missing"
    script, command = block.group(1), block.group(2)
    made = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True,
                          env=fake_env, timeout=300)
    assert made.returncode == 0 and (tmp_path / "my_model.onnx").is_file(), made.stderr
    args = shlex.split(command)[2:] + ["--min-time", "0.02", "--min-iters", "3", "--out", str(tmp_path / "r")]
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "run", *args], cwd=tmp_path,
                          capture_output=True, text=True, env=fake_env, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cases = load_results(tmp_path / "r").cases
    assert [(c.case.batch, c.status, c.reference_runtime) for c in cases] == [(1, "passed", "ort-cpu"),
                                                                            (4, "passed", "ort-cpu")]
