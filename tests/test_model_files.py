"""User model files: checks before any library opens them, and ONNX files run end to end beside the zoo."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.errors import ModelError
from harness.model_files import check_model_path, spec_from_onnx


def make_onnx(path: Path, external: str | None = None, batch_dim: str = "batch") -> Path:
    """Y = relu(X @ W), X: [batch, 4] float32; W optionally stored as external data in `external`."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3) / 10, name="W")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["X", "W"], ["H"]), helper.make_node("Relu", ["H"], ["Y"])], "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [batch_dim, 4])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [batch_dim, 3])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    if external:
        onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                        location=external, size_threshold=0)
    else:
        onnx.save_model(model, str(path))
    return path


def test_good_file_becomes_a_spec_with_batch_axis(tmp_path):
    spec = spec_from_onnx(make_onnx(tmp_path / "tiny.onnx"))
    assert spec.name == "tiny" and spec.reference == "ort-cpu" and spec.build is None
    assert spec.inputs[0].shape == ("batch", 4) and spec.outputs == ("Y",)


def test_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "pipe.onnx"
    os.mkfifo(fifo)
    with pytest.raises(ModelError, match=r"pipe.onnx: is a FIFO \(named pipe\)"):
        check_model_path(fifo)


def test_directory_and_device_are_refused(tmp_path):
    (tmp_path / "dir.onnx").mkdir()
    with pytest.raises(ModelError, match="dir.onnx: is a directory"):
        check_model_path(tmp_path / "dir.onnx")
    with pytest.raises(ModelError, match="/dev/zero: is a character device"):
        check_model_path("/dev/zero")


def test_symlink_out_of_the_folder_is_refused_inside_is_allowed(tmp_path):
    outside = make_onnx(tmp_path / "outside.onnx")
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "escape.onnx").symlink_to(outside)
    with pytest.raises(ModelError, match="escape.onnx: symlink leads out of the model's folder"):
        check_model_path(folder / "escape.onnx")
    make_onnx(folder / "real.onnx")
    (folder / "alias.onnx").symlink_to("real.onnx")
    assert check_model_path(folder / "alias.onnx")
    (folder / "zero.onnx").symlink_to("/dev/zero")
    with pytest.raises(ModelError, match="zero.onnx: symlink leads out"):
        check_model_path(folder / "zero.onnx")


def test_missing_and_empty_files(tmp_path):
    with pytest.raises(ModelError, match="nope.onnx: no such model file"):
        check_model_path(tmp_path / "nope.onnx")
    (tmp_path / "empty.onnx").write_bytes(b"")
    with pytest.raises(ModelError, match="empty.onnx: empty file"):
        check_model_path(tmp_path / "empty.onnx")


def test_external_data_links_are_refused(tmp_path):
    model = make_onnx(tmp_path / "ext.onnx", external="w.bin")
    assert spec_from_onnx(model).name == "ext"  # a plain external-data file is fine
    os.link(tmp_path / "w.bin", tmp_path / "w-hard.bin")
    with pytest.raises(ModelError, match=r"external data 'w.bin': is a hard link \(link count 2\)"):
        spec_from_onnx(model)
    os.unlink(tmp_path / "w-hard.bin")
    os.rename(tmp_path / "w.bin", tmp_path / "w-real.bin")
    os.symlink("w-real.bin", tmp_path / "w.bin")
    with pytest.raises(ModelError, match="external data 'w.bin': is a symbolic link"):
        spec_from_onnx(model)


def test_external_data_outside_the_folder_is_refused(tmp_path):
    import onnx

    folder = tmp_path / "m"
    folder.mkdir()
    model_path = make_onnx(folder / "ext.onnx", external="w.bin")
    model = onnx.load(str(model_path), load_external_data=False)
    for entry in model.graph.initializer[0].external_data:
        if entry.key == "location":
            entry.value = "../secret.bin"
    (tmp_path / "secret.bin").write_bytes(b"\0" * 48)
    onnx.save_model(model, str(model_path))
    with pytest.raises(ModelError, match="points outside the model's folder"):
        spec_from_onnx(model_path)


def test_random_bytes_are_a_clear_error(tmp_path):
    (tmp_path / "junk.onnx").write_bytes(os.urandom(256))
    with pytest.raises(ModelError, match="junk.onnx: not a readable ONNX model"):
        spec_from_onnx(tmp_path / "junk.onnx")


def test_model_twice_with_models_runs_and_a_refused_file_is_an_error_row(fake_env, tmp_path):
    from harness.results import load_results

    a = make_onnx(tmp_path / "user_a.onnx")
    b = make_onnx(tmp_path / "user_b.onnx", batch_dim="N")
    os.mkfifo(tmp_path / "fifo.onnx")
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", "--models", "fake-linear", "--model", str(a), "--model",
         str(b), "--model", str(tmp_path / "fifo.onnx"), "--runtimes", "fake-ok,ort-cpu", "--batch-sizes", "2",
         "--min-time", "0.02", "--min-iters", "3", "--out", str(out)],
        env=fake_env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the FIFO rows are errors (and fake-ok cannot run X)
    run = load_results(out)
    status = {c.case.id: c for c in run.cases}
    assert status["fake-linear-fake-ok-fp32-b2"].status == "passed"
    for name in ("user_a", "user_b"):
        ort = status[f"{name}-ort-cpu-fp32-b2"]
        assert ort.status == "passed", ort.reason
        assert ort.reference_runtime == "ort-cpu" and ort.accuracy["max_abs"] == 0.0
    fifo = status["fifo-ort-cpu-fp32-b2"]
    assert fifo.status == "error" and "fifo.onnx: is a FIFO" in fifo.reason
