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


@pytest.mark.e2e
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


# --------------------------------------------------------- bad models, --shape, declared types, factories

def _graph_model(path: Path, nodes, inputs, outputs, opsets=(("", 17),), initializers=()) -> Path:
    import onnx
    from onnx import helper

    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    model.ir_version = 8
    onnx.save_model(model, str(path))
    return path


def _runner_config(tmp_path, models: str, runtimes: str = "ort-cpu", **extra):
    from harness.options import OPTIONS, parse_run_options

    raw = {o.dest: None for o in OPTIONS}
    raw.update(models=models, runtimes=runtimes, min_time="0.01", min_iters="3", warmup="1",
               cache_dir=str(tmp_path / "cache"), out=str(tmp_path / "out"), **extra)
    return parse_run_options(raw)


def _run_case(tmp_path, name: str, runtime: str = "ort-cpu", batch: int = 2, seq=None, **extra):
    """One case in-process; with model=[...] in `extra` the run has only those user models."""
    from harness.execution import CaseRunner
    from harness.results.schema import CaseId

    config = _runner_config(tmp_path, None if extra.get("model") else name, runtime, **extra)
    return CaseRunner().run(CaseId(name, runtime, "fp32", batch, seq, "cpu"), config)


def test_truncated_file_is_a_clear_error(tmp_path):
    whole = make_onnx(tmp_path / "whole.onnx").read_bytes()
    (tmp_path / "cut.onnx").write_bytes(whole[: len(whole) // 2])
    with pytest.raises(ModelError, match="cut.onnx: not a readable ONNX model"):
        spec_from_onnx(tmp_path / "cut.onnx")


def test_unknown_operator_domain_is_an_error_row(tmp_path):
    from onnx import TensorProto, helper

    path = _graph_model(tmp_path / "mystery.onnx",
                        [helper.make_node("Mystery", ["X"], ["Y"], domain="com.example.unknown")],
                        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", 4])],
                        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", 4])],
                        opsets=(("", 17), ("com.example.unknown", 1)))
    r = _run_case(tmp_path, "mystery", model=[str(path)])
    assert r.status == "error" and r.phase == "load"
    assert "com.example.unknown:Mystery" in r.reason and "is not a registered function/op" in r.reason


def test_opset_newer_than_installed_is_refused(tmp_path):
    from onnx import TensorProto, helper

    from harness.model_files import register_user_model

    path = _graph_model(tmp_path / "future.onnx", [helper.make_node("Relu", ["X"], ["Y"])],
                        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", 4])],
                        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", 4])],
                        opsets=(("", 99),))
    with pytest.raises(ModelError, match=r"future.onnx: the model needs ai.onnx opset 99, newer than"):
        spec_from_onnx(path)
    r = _run_case(tmp_path, register_user_model(str(path)), model=[str(path)])
    assert r.status == "error" and "opset 99" in r.reason


def _image_model(path: Path) -> Path:
    """Y = X * 2 with X: [batch, 3, height, w] (symbolic height and w) float32."""
    from onnx import TensorProto, helper, numpy_helper

    two = numpy_helper.from_array(np.array(2.0, dtype=np.float32), name="two")
    return _graph_model(path, [helper.make_node("Mul", ["X", "two"], ["Y"])],
                        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", 3, "height", "w"])],
                        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", 3, "height", "w"])],
                        initializers=[two])


def test_shape_fills_symbolic_dims_by_name_or_input_axis(tmp_path):
    from harness.errors import UsageError
    from harness.model_files import parse_shapes

    path = _image_model(tmp_path / "img.onnx")
    with pytest.raises(ModelError, match=r"2 free axes are not batch or sequence axes: input 'X' axis 2 \(named "
                                         r"'height'\), input 'X' axis 3 \(named 'w'\); give them sizes with --shape "
                                         r"X:2=N,X:3=N \(or height=N, w=N for every axis of those names\)$"):
        spec_from_onnx(path)
    with pytest.raises(ModelError, match=r"img.onnx: input 'X' axis 3 is free, named 'w', and not a batch or "
                                         r"sequence axis; give it a size with --shape X:3=N \(or w=N for every "
                                         r"axis of that name\)$"):
        spec_from_onnx(path, shapes=parse_shapes("height=6"))
    spec = spec_from_onnx(path, shapes=parse_shapes("height=6, X:3=5"))
    assert spec.inputs[0].shape == ("batch", 3, 6, 5) and spec.config["shape"] == {"height": 6, "X:3": 5}
    for bad, msg in (("height", "expected NAME=DIM"), ("height=x", "'x' is not an integer"),
                     ("height=0", "not a positive size"), ("batch=4", "use --batch-sizes"),
                     ("seq=4", "use --seq-lens"), ("?=48", "'\\?' is no input or dimension name"),
                     ("=48", "expected NAME=DIM"), ("x:=48", "'x:' is no input or dimension name"),
                     ("a=1,?=2", "INPUT:AXIS=DIM, e.g. x:2=48"), ("h=4000000000", "above the maximum 1048576")):
        with pytest.raises(UsageError, match=msg):
            parse_shapes(bad)
    r = _run_case(tmp_path, "img", model=[str(path)], shape="height=6,w=5")
    assert r.status == "passed", r.reason
    with pytest.raises(UsageError, match=r"no user ONNX model has a dimension 'depth'.*height"):
        _runner_config(tmp_path, None, model=[str(path)], shape="height=6,w=5,depth=2")
    with pytest.raises(UsageError, match="no --model was given"):
        _runner_config(tmp_path, "mlp", shape="height=6")


def test_shape_contradicting_a_fixed_dim_is_an_error_row(tmp_path):
    path = make_onnx(tmp_path / "fixed.onnx")  # X: [batch, 4]
    with pytest.raises(ModelError, match=r"axis 1 is fixed at 4 by the model; --shape X:1=5 contradicts it"):
        spec_from_onnx(path, shapes={"X:1": 5})
    r = _run_case(tmp_path, "fixed", model=[str(path)], shape="X:1=5")
    assert r.status == "error" and "--shape X:1=5 contradicts it" in r.reason


def test_feed_contradicting_the_model_is_an_error_row_and_the_runner_goes_on(tmp_path):
    from harness.execution import CaseRunner
    from harness.model import BATCH, ModelSpec, TensorSpec, register_model
    from harness.results.schema import CaseId

    path = make_onnx(tmp_path / "strict.onnx")  # X: [batch, 4]
    register_model(ModelSpec(name="strict-wrong-feed", onnx_path=path, inputs=(TensorSpec("X", (BATCH, 5)),),
                             outputs=("Y",)), replace=True)
    config = _runner_config(tmp_path, "strict-wrong-feed", model=[str(path)])
    runner = CaseRunner()
    bad = runner.run(CaseId("strict-wrong-feed", "ort-cpu", "fp32", 2, None, "cpu"), config)
    assert bad.status == "error" and "Got invalid dimensions for input: X" in bad.reason
    good = runner.run(CaseId("strict", "ort-cpu", "fp32", 2, None, "cpu"), config)
    assert good.status == "passed", good.reason


def test_feeds_follow_the_declared_input_types(tmp_path):
    from onnx import TensorProto, helper

    from harness.data import make_feed

    nodes = [helper.make_node("Cast", ["ids"], ["ids_f"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["pos"], ["pos_f"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["keep"], ["keep_f"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["scale"], ["scale_f"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["ids_f", "pos_f"], ["a"]),
             helper.make_node("Mul", ["a", "keep_f"], ["b"]),
             helper.make_node("Mul", ["b", "scale_f"], ["Y"])]
    io = [helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq_len"]),
          helper.make_tensor_value_info("pos", TensorProto.INT32, ["batch", "seq_len"]),
          helper.make_tensor_value_info("keep", TensorProto.BOOL, ["batch", "seq_len"]),
          helper.make_tensor_value_info("scale", TensorProto.FLOAT16, ["batch", "seq_len"])]
    path = _graph_model(tmp_path / "typed.onnx", nodes, io,
                        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", "seq_len"])])
    spec = spec_from_onnx(path)
    assert [(t.dtype, t.shape) for t in spec.inputs] == [
        ("int64", ("batch", "seq")), ("int32", ("batch", "seq")), ("bool", ("batch", "seq")),
        ("float16", ("batch", "seq"))]
    feed = make_feed(spec, {"batch": 2, "seq": 7}, 0)
    assert {k: v.dtype.name for k, v in feed.items()} == {"ids": "int64", "pos": "int32", "keep": "bool",
                                                           "scale": "float16"}
    assert feed["keep"].any() and not feed["keep"].all() and feed["ids"].max() < 100
    r = _run_case(tmp_path, "typed", model=[str(path)], seq=7, seq_lens="7")
    assert r.status == "passed", r.reason
    strings = _graph_model(tmp_path / "strings.onnx", [helper.make_node("Identity", ["S"], ["Y"])],
                           [helper.make_tensor_value_info("S", TensorProto.STRING, ["batch"])],
                           [helper.make_tensor_value_info("Y", TensorProto.STRING, ["batch"])])
    with pytest.raises(ModelError, match="input 'S' has element type STRING"):
        spec_from_onnx(strings)


FACTORIES = '''
import torch
from torch import nn


class Branchy(nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # data-dependent control flow: torch.export cannot capture it
            return x * 2
        return x - 1


def branchy():
    return Branchy(), {"x": torch.randn(2, 4)}


class Pair(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(50, 8)

    def forward(self, tokens, weight):
        h = self.embed(tokens) * weight.unsqueeze(-1)
        return h.sum(1), h.mean(1)


def pair():
    torch.manual_seed(0)
    tokens = torch.arange(3, 13).reshape(2, 5)  # ids 3..12: the feeds draw from [3, 13)
    return Pair(), {"tokens": tokens, "weight": torch.rand(2, 5)}, {"seq_dims": {"tokens": 1, "weight": 1}}


def not_a_tuple():
    return 42


def _load_weights():
    raise FileNotFoundError("weights.bin: no such file\\nsecond line of the message")


def raising():
    _load_weights()
'''


@pytest.fixture
def factories(tmp_path, monkeypatch):
    (tmp_path / "user_factories.py").write_text(FACTORIES)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "user_factories"


def test_factory_spec_follows_the_contract(factories):
    from harness.model_files import is_factory_ref, spec_from_factory, user_model_name

    assert is_factory_ref("user_factories:pair") and not is_factory_ref("model.onnx")
    spec = spec_from_factory("user_factories:pair")
    assert spec.name == user_model_name("user_factories:pair") == "user_factories.pair"
    assert [(t.name, t.shape, t.dtype, t.low, t.high) for t in spec.inputs] == [
        ("tokens", ("batch", "seq"), "int64", 3, 13), ("weight", ("batch", "seq"), "float32", 0, 2)]
    assert spec.outputs == ("output_0", "output_1") and spec.has_seq and spec.reference == "torch-cpu"
    assert spec.config["example_inputs"] == [("tokens", [2, 5], "torch.int64"),
                                             ("weight", [2, 5], "torch.float32")]
    with pytest.raises(ModelError, match=r"must return \(module, example_inputs\)"):
        spec_from_factory("user_factories:not_a_tuple")
    with pytest.raises(ModelError, match="has no callable 'nope'"):
        spec_from_factory("user_factories:nope")
    with pytest.raises(ModelError, match="cannot import 'no_such_module_xyz'"):
        spec_from_factory("no_such_module_xyz:make")


def test_factory_runs_on_torch_and_its_export_on_ort(factories, tmp_path):
    for runtime in ("torch-cpu", "ort-cpu"):
        r = _run_case(tmp_path, "user_factories.pair", runtime, seq=6, model=["user_factories:pair"],
                      seq_lens="6", exporter="legacy")
        assert r.status == "passed", r.reason
        assert r.reference_runtime == "torch-cpu"


@pytest.mark.e2e
def test_export_that_fails_is_an_error_row_with_the_cause(factories, tmp_path):
    r = _run_case(tmp_path, "user_factories.branchy", "ort-cpu", model=["user_factories:branchy"])
    assert r.status == "error" and r.phase == "load"
    assert "ONNX export (dynamo) failed" in r.reason and "data-dependent control flow" in r.reason
    eager = _run_case(tmp_path, "user_factories.branchy", "torch-cpu", model=["user_factories:branchy"])
    assert eager.status == "passed", eager.reason  # eager PyTorch runs it; only the export is refused


@pytest.mark.e2e
def test_a_run_mixing_bad_models_with_good_ones_writes_the_good_results(fake_env, tmp_path):
    """End to end: a truncated ONNX file and a factory whose export fails, beside a good ONNX file."""
    from harness.results import load_results

    good = make_onnx(tmp_path / "good.onnx")
    whole = good.read_bytes()
    (tmp_path / "broken.onnx").write_bytes(whole[: len(whole) // 2])
    (tmp_path / "user_factories.py").write_text(FACTORIES)
    env = {**fake_env, "PYTHONPATH": os.pathsep.join([str(tmp_path), fake_env.get("PYTHONPATH", "")])}
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", "--model", str(good), "--model",
         str(tmp_path / "broken.onnx"), "--model", "user_factories:branchy", "--model", "user_factories:raising",
         "--runtimes", "ort-cpu",
         "--batch-sizes", "2", "--min-time", "0.02", "--min-iters", "3", "--out", str(out)],
        env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    cases = {c.case.id: c for c in load_results(out).cases}
    assert cases["good-ort-cpu-fp32-b2"].status == "passed"
    assert cases["good-ort-cpu-fp32-b2"].reference_runtime == "ort-cpu"
    broken = cases["broken-ort-cpu-fp32-b2"]
    assert broken.status == "error" and "broken.onnx: not a readable ONNX model" in broken.reason
    branchy = cases["user_factories.branchy-ort-cpu-fp32-b2"]
    assert branchy.status == "error" and "data-dependent control flow" in branchy.reason
    raising = cases["user_factories.raising-ort-cpu-fp32-b2"]
    assert raising.status == "error" and raising.reason == (
        "--model user_factories:raising: the factory raised FileNotFoundError: weights.bin: no such file "
        "(traceback in the case's log)")
    log = out / "logs" / "user_factories.raising-ort-cpu-fp32-b2.log"
    assert f"logs/{log.name}" in proc.stdout, proc.stdout  # the progress line names the log file
    text = log.read_text()
    assert "Traceback (most recent call last)" in text and "in _load_weights" in text and "second line" in text
    assert (out / "report.html").is_file() and (out / "results.csv").is_file()


def test_a_fixed_zero_dimension_is_named_as_such(tmp_path):
    from onnx import TensorProto, helper

    path = _graph_model(tmp_path / "empty.onnx", [helper.make_node("Relu", ["X"], ["Y"])],
                        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", 0])],
                        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", 0])])
    with pytest.raises(ModelError, match=r"empty.onnx: input 'X' axis 1 is fixed at 0 by the model \(an empty "
                                         r"tensor\)") as info:
        spec_from_onnx(path)
    assert "symbolic" not in str(info.value)
    unnamed = _graph_model(tmp_path / "unnamed.onnx", [helper.make_node("Relu", ["X"], ["Y"])],
                           [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", None])],
                           [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", None])])
    with pytest.raises(ModelError, match=r"axis 1 is free \(no size and no name\) and not a "
                                         r"batch or sequence axis; give it a size with --shape X:1=N"):
        spec_from_onnx(unnamed)


def _free_dims_model(path: Path, form: str) -> Path:
    """Y = Relu(X), X: [free, 3, free, free] with every free axis in one ONNX form (as exporters write them)."""
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, ["b", 3, "h", "w"])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["b", 3, "h", "w"])
    for vi in (x, y):
        for i in (0, 2, 3):
            d = vi.type.tensor_type.shape.dim[i]
            d.Clear()
            if form == "dim_param":
                d.dim_param = f"p2o.DynamicDimension.{i}"
            elif form == "question_mark":
                d.dim_param = "?"
            elif form == "negative":
                d.dim_value = -1
            # "absent": neither dim_value nor dim_param
    return _graph_model(path, [helper.make_node("Relu", ["X"], ["Y"])], [x], [y])


@pytest.mark.parametrize("form", ["dim_param", "question_mark", "negative", "absent"])
def test_every_free_dimension_form_is_named_by_shape_and_axis_0_is_the_batch(tmp_path, form):
    """paddle2onnx writes -1, "?" and p2o.DynamicDimension.N; onnxruntime runs all of them."""
    from harness.model_files import parse_shapes

    path = _free_dims_model(tmp_path / f"{form}.onnx", form)
    with pytest.raises(ModelError, match=r"2 free axes are not batch or sequence axes: input 'X' axis 2 .*, "
                                         r"input 'X' axis 3 .*; give them sizes with --shape X:2=N,X:3=N") as info:
        spec_from_onnx(path)
    if form != "dim_param":  # unnamed: the only name suggested is INPUT:AXIS
        assert str(info.value).endswith("give them sizes with --shape X:2=N,X:3=N")
    spec = spec_from_onnx(path, shapes=parse_shapes("X:2=6,X:3=5"))
    assert spec.inputs[0].shape == ("batch", 3, 6, 5)
    assert {"X:0", "X:2", "X:3"} <= set(spec.config["shape_names"]) and "?" not in spec.config["shape_names"]
    r = _run_case(tmp_path, form, model=[str(path)], shape="X:2=6,X:3=5", batch=3)
    assert r.status == "passed", r.reason


def test_a_named_free_dimension_takes_its_name_or_input_axis(tmp_path):
    from harness.errors import UsageError
    from harness.model_files import parse_shapes

    path = _free_dims_model(tmp_path / "named.onnx", "dim_param")
    with pytest.raises(ModelError, match=r"axis 2 \(named 'p2o.DynamicDimension.2'\), .*--shape X:2=N,X:3=N "
                                         r"\(or p2o.DynamicDimension.2=N, p2o.DynamicDimension.3=N for every axis of "
                                         r"those names\)"):
        spec_from_onnx(path)
    spec = spec_from_onnx(path, shapes=parse_shapes("p2o.DynamicDimension.2=4,X:3=7"))
    assert spec.inputs[0].shape == ("batch", 3, 4, 7)
    with pytest.raises(UsageError, match=r"--shape '\?=4': '\?' is no input or dimension name"):
        _runner_config(tmp_path, None, model=[str(_free_dims_model(tmp_path / "q.onnx", "question_mark"))],
                       shape="X:2=6,X:3=5,?=4")


def test_a_negative_fixed_looking_batch_axis_takes_the_batch_sizes(tmp_path):
    path = _free_dims_model(tmp_path / "neg.onnx", "negative")
    spec = spec_from_onnx(path, shapes=(("X:2", 2), ("X:3", 2)))
    assert spec.inputs[0].shape[0] == "batch"
    for batch in (1, 4):
        r = _run_case(tmp_path, "neg", model=[str(path)], shape="X:2=2,X:3=2", batch=batch)
        assert r.status == "passed", r.reason


def test_onnxruntime_enforces_a_zero_dimension(tmp_path):
    """Why dim_value 0 is fixed (an error), not free: onnxruntime refuses any other size for it."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    path = _graph_model(tmp_path / "zero.onnx", [helper.make_node("Relu", ["X"], ["Y"])],
                        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 0])],
                        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 0])])
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    with pytest.raises(Exception, match="Expected: 0"):
        session.run(None, {"X": np.ones((2, 5), np.float32)})


def test_graph_the_checker_rejects_is_an_error_row_with_its_complaint(tmp_path):
    from onnx import TensorProto, helper, numpy_helper

    from harness.model_files import register_user_model

    w = numpy_helper.from_array(np.ones(4, dtype=np.float32), name="W")
    path = _graph_model(tmp_path / "dup.onnx", [helper.make_node("Add", ["X", "W"], ["Y"])],
                        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", 4])],
                        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", 4])],
                        initializers=[w, w])
    with pytest.raises(ModelError, match=r"dup.onnx: the ONNX checker rejects the model: W initializer name is "
                                         r"not unique$"):
        spec_from_onnx(path)
    r = _run_case(tmp_path, register_user_model(str(path)), model=[str(path)])
    assert r.status == "error" and r.samples_ns == [] and "W initializer name is not unique" in r.reason


# The OCR models of the rapidocr-onnxruntime wheel (exported by paddle2onnx: "?", -1 and p2o.DynamicDimension.N
# axes), run when HARNESS_RAPIDOCR_DIR names the folder holding them (.ci/run downloads the wheel). The shapes
# are the ones rapidocr feeds them (config.yaml: det any multiple of 32, rec 3x48x320, cls 3x48x192).
_RAPIDOCR = {"ch_PP-OCRv4_det_infer.onnx": "x:2=320,x:3=320",
             "ch_PP-OCRv4_rec_infer.onnx": "x:2=48,x:3=320",
             "ch_ppocr_mobile_v2.0_cls_infer.onnx": "x:2=48,x:3=192"}


@pytest.mark.skipif(not os.environ.get("HARNESS_RAPIDOCR_DIR"),
                    reason="HARNESS_RAPIDOCR_DIR unset (the folder of rapidocr_onnxruntime/models/*.onnx)")
@pytest.mark.parametrize("file", sorted(_RAPIDOCR))
def test_rapidocr_models_run_with_only_the_shapes_they_need(tmp_path, file):
    path = Path(os.environ["HARNESS_RAPIDOCR_DIR"]) / file
    for batch in (1, 2):
        r = _run_case(tmp_path, path.stem, model=[str(path)], shape=_RAPIDOCR[file], batch=batch)
        assert r.status == "passed", r.reason


@pytest.mark.skipif(not os.environ.get("HARNESS_RAPIDOCR_DIR"),
                    reason="HARNESS_RAPIDOCR_DIR unset (the folder of rapidocr_onnxruntime/models/*.onnx)")
@pytest.mark.parametrize("file", sorted(_RAPIDOCR))
def test_rapidocr_a_planted_real_error_still_fails_the_drift_check(tmp_path, file):
    """Random input leaves PP-OCRv4 det's probability map ~0 (rel_l2 there is float noise, passed by the
    floor); an error of a real size (outputs 0.1% off, plus noise of 1e-5) still fails every OCR model."""
    from harness.runtimes import register_runtime
    from harness.runtimes.onnxruntime import OrtCpu

    class Planted(OrtCpu):
        name = "ort-cpu-planted"
        description = "ort-cpu whose outputs are moved by a real amount (a test's wrong runtime)"

        def _infer(self, prepared):
            rng = np.random.default_rng(0)
            return {k: (np.asarray(v) * 1.001 + rng.standard_normal(np.shape(v)) * 1e-5).astype(np.float32)
                    for k, v in super()._infer(prepared).items()}

    register_runtime(Planted, replace=True)
    path = Path(os.environ["HARNESS_RAPIDOCR_DIR"]) / file
    r = _run_case(tmp_path, path.stem, runtime="ort-cpu-planted", model=[str(path)], shape=_RAPIDOCR[file],
                  batch=1)
    assert r.status == "failed" and "rel_l2=" in r.reason and not r.accuracy["notes"], r.reason
