"""--feeds files, --input-value / --input-range: reading, checks against a model, a case's feed, real runs."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from harness.config import RunConfig
from harness.data import case_feed
from harness.errors import ModelError, UnsupportedModelError, UsageError
from harness.feeds import check_overrides, cut, load_feeds, parse_overrides, problems, seq_lens
from harness.model import BATCH, SEQ, ModelSpec, TensorSpec

TEXT = ModelSpec("text", inputs=(TensorSpec("input_ids", (BATCH, SEQ), "int64", 0, 3000),
                                 TensorSpec("attention_mask", (BATCH, SEQ), "int64", 0, 2, value=1)),
                 outputs=("y",), onnx_path="x.onnx")
IMAGE = ModelSpec("image", inputs=(TensorSpec("image", (BATCH, 1, 8, 8)),), outputs=("logits",),
                  onnx_path="x.onnx")


def config(tmp_path, **kw):
    return RunConfig.build(models=("text",), runtimes=("ort-cpu",), out_dir=tmp_path / "o", **kw)


# ------------------------------------------------------------------ reading
def test_an_npz_a_folder_of_npy_and_a_folder_of_sample_npz_read_alike(tmp_path):
    ids = np.arange(24, dtype=np.int64).reshape(3, 8)
    np.savez(tmp_path / "f.npz", input_ids=ids, attention_mask=np.ones_like(ids), labels=np.array([1, 2, 3]))
    (tmp_path / "npy").mkdir()
    np.save(tmp_path / "npy" / "input_ids.npy", ids)
    np.save(tmp_path / "npy" / "attention_mask.npy", np.ones_like(ids))
    (tmp_path / "samples").mkdir()
    for i in range(3):
        np.savez(tmp_path / "samples" / f"s{i:03d}.npz", input_ids=ids[i], attention_mask=np.ones(8, np.int64))
    for path in ("f.npz", "npy", "samples"):
        fs = load_feeds(tmp_path / path)
        assert (fs.arrays["input_ids"] == ids).all(), path
        assert problems(fs, TEXT) == [], path
    assert load_feeds(tmp_path / "f.npz").labels.tolist() == [1, 2, 3]


@pytest.mark.parametrize("make, message", [
    (lambda p: None, "no such file or folder"),
    (lambda p: p.write_bytes(b"\x00garbage" * 10), "not a readable .npz archive"),
    (lambda p: np.savez(p, x=np.array([{"a": 1}], dtype=object)), "cannot read"),
    (lambda p: np.savez(p, x=np.array(["text"])), "feeds are numeric or bool arrays"),
    (lambda p: np.savez(p, x=np.zeros(3), labels=np.zeros((3, 2))), "'labels' must be a 1-D integer array"),
    (lambda p: np.savez(p, labels=np.zeros(3, np.int64)), "holds no input arrays"),
])
def test_a_bad_feeds_file_is_a_usage_error_naming_it(tmp_path, make, message):
    p = tmp_path / "bad.npz"
    make(p)
    with pytest.raises(UsageError, match=message) as err:
        load_feeds(p)
    assert str(p) in str(err.value)


def test_folder_problems_are_named(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="holds no .npy or .npz files"):
        load_feeds(tmp_path / "empty")
    (tmp_path / "mixed").mkdir()
    np.save(tmp_path / "mixed" / "a.npy", np.zeros(2))
    np.savez(tmp_path / "mixed" / "b.npz", a=np.zeros(2))
    with pytest.raises(UsageError, match="mixes .npy and .npz"):
        load_feeds(tmp_path / "mixed")
    np.save(tmp_path / "one.npy", np.zeros(2))
    with pytest.raises(UsageError, match="a single .npy has no input name"):
        load_feeds(tmp_path / "one.npy")


# ------------------------------------------------------------------ checks against a model
def test_every_mismatch_is_one_message(tmp_path):
    np.savez(tmp_path / "f.npz", input_ids=np.zeros((4, 8), np.float32), image=np.zeros((4, 8)),
             attention_mask=np.ones((3, 8), np.int64))
    found = problems(load_feeds(tmp_path / "f.npz"), TEXT)
    assert found == [
        "input 'input_ids': dtype float32, the model takes int64",
        "array 'image' is not an input of model 'text' (inputs: attention_mask, input_ids)",
        "inputs hold different numbers of samples: input_ids 4, attention_mask 3",
    ]
    np.savez(tmp_path / "g.npz", image=np.zeros((4, 1, 7, 8), np.float32))
    assert problems(load_feeds(tmp_path / "g.npz"), IMAGE) == [
        "input 'image' axis 2: size 7, the model fixes it at 8"]
    np.savez(tmp_path / "h.npz", input_ids=np.zeros((2, 2, 8), np.int64))
    assert problems(load_feeds(tmp_path / "h.npz"), TEXT) == [
        "input 'input_ids': 3 axes [2, 2, 8], the model takes 2 ([batch, seq]), or 1 for one sample",
        "input 'attention_mask' (int64, shape [batch, seq]) is missing (give it, or --input-value/--input-range "
        "attention_mask=...)"]


def test_a_case_takes_its_batch_from_the_first_samples_repeated_when_fewer(tmp_path):
    ids = np.arange(24, dtype=np.int32).reshape(3, 8)  # int32 values fit the model's int64: converted
    np.savez(tmp_path / "f.npz", input_ids=ids, attention_mask=np.ones_like(ids))
    fs = load_feeds(tmp_path / "f.npz")
    feed, info = cut(fs, TEXT, {"batch": 2, "seq": 8})
    assert feed["input_ids"].dtype == np.int64 and (feed["input_ids"] == ids[:2]).all()
    assert info == {"path": str(tmp_path / "f.npz"), "samples": 3, "repeated": False}
    feed, info = cut(fs, TEXT, {"batch": 5, "seq": 8})
    assert feed["input_ids"][:, 0].tolist() == [0, 8, 16, 0, 8] and info["repeated"]
    with pytest.raises(UnsupportedModelError, match=r"8 positions on its sequence axis; sequence length 16 does "
                                                    r"not apply \(give --seq-lens 8, or --prompt-lens 8"):
        cut(fs, TEXT, {"batch": 1, "seq": 16})
    assert seq_lens(fs, [TEXT, IMAGE]) == (8,)
    np.savez(tmp_path / "bad.npz", input_ids=ids)
    with pytest.raises(ModelError, match=r"bad.npz: input 'attention_mask' .* is missing"):
        cut(load_feeds(tmp_path / "bad.npz"), TEXT, {"batch": 1, "seq": 8})


# ------------------------------------------------------------------ overrides
def test_override_options_parse_and_check():
    (v,) = parse_overrides("sr=16000", "input-value", ranged=False)
    assert v.value == 16000 and v.describe("int64") == "sr: int64 = 16000 (--input-value)"
    a, b = parse_overrides(["token_type_ids=0:2", "input_ids=5:10"], "input-range", ranged=True)
    assert (a.low, a.high, b.name) == (0, 2, "input_ids")
    for text, message in (("sr", "expected NAME=V"), ("sr=nan", "finite"), ("=3", "expected NAME=V")):
        with pytest.raises(UsageError, match=message):
            parse_overrides(text, "input-value", ranged=False)
    for text, message in (("x=3:1", "LO must be below HI"), ("x=3", "NAME=LO:HI"), ("x=0:1,x=0:2", "twice")):
        with pytest.raises(UsageError, match=message):
            parse_overrides(text, "input-range", ranged=True)
    with pytest.raises(UsageError, match=r"no model of this run has an input named 'sr' \(inputs: "
                                         r"attention_mask, input_ids\)"):
        check_overrides(parse_overrides("sr=1", "input-value", False), [TEXT])
    with pytest.raises(UsageError, match="input 'input_ids' is int64: input_ids=0.5 is not an integer"):
        check_overrides(parse_overrides("input_ids=0.5", "input-value", False), [TEXT])


def test_overrides_replace_the_generated_values_and_are_recorded(tmp_path):
    cfg = config(tmp_path, input_ranges=parse_overrides("input_ids=7:9", "input-range", True),
                 input_values=parse_overrides("attention_mask=0", "input-value", False))
    feed, info = case_feed(TEXT, {"batch": 4, "seq": 16}, cfg.inputs)
    assert set(np.unique(feed["input_ids"])) == {7, 8} and feed["input_ids"].dtype == np.int64
    assert (feed["attention_mask"] == 0).all()
    assert info == {"input_overrides": ["input_ids: int64 in [7, 9) (--input-range)",
                                        "attention_mask: int64 = 0 (--input-value)"]}
    again, _ = case_feed(TEXT, {"batch": 4, "seq": 16}, cfg.inputs)
    assert (again["input_ids"] == feed["input_ids"]).all()  # seeded


def test_parse_run_options_checks_input_options_and_takes_seq_lens_from_feeds(tmp_path):
    from harness.model_files import spec_from_onnx  # noqa: F401 - the path below registers a user model
    from harness.options import parse_run_options

    path = sample_rate_model(tmp_path / "vad.onnx")
    base = {"model": [str(path)], "runtimes": "ort-cpu", "out": str(tmp_path / "o")}
    with pytest.raises(UsageError, match="no model of this run has an input named 'rate'"):
        parse_run_options({**base, "input_value": ["rate=8000"]})
    with pytest.raises(UsageError, match="both name sr"):
        parse_run_options({**base, "input_value": ["sr=8000"], "input_range": ["sr=0:2"]})
    with pytest.raises(UsageError, match="--feeds .*nope.npz: no such file"):
        parse_run_options({**base, "feeds": str(tmp_path / "nope.npz")})
    cfg = parse_run_options({**base, "input_value": ["sr=8000"]})
    assert [o.name for o in cfg.inputs.input_values] == ["sr"] and cfg.inputs.input_values[0].value == 8000


# ------------------------------------------------------------------ real runs
def sample_rate_model(path):
    """A model that accepts only a sample rate below 8001 (it indexes a table of 8,001 rows with it)."""
    x = helper.make_tensor_value_info("audio", TensorProto.FLOAT, ["batch", 160])
    sr = helper.make_tensor_value_info("sr", TensorProto.INT64, [1])
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 160])
    table = numpy_helper.from_array(np.linspace(0, 1, 8001, dtype=np.float32).reshape(8001, 1), "rate_table")
    nodes = [helper.make_node("Gather", ["rate_table", "sr"], ["g"]), helper.make_node("Mul", ["audio", "g"], ["y"])]
    onnx.save(helper.make_model(helper.make_graph(nodes, "vad", [x, sr], [out], [table]),
                                opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


@pytest.mark.e2e
@pytest.mark.slow
def test_a_sample_rate_model_fails_naming_the_input_then_runs_with_input_value_and_feeds(tmp_path):
    """Fed 16000 by convention, the 8 kHz model dies in its Gather and the reason says how `sr` was fed;
    `--input-value sr=8000` with an .npz of audio measures it, and the drift is judged on those inputs."""
    from harness.results import load_results

    path = sample_rate_model(tmp_path / "vad8k.onnx")
    audio = np.random.default_rng(0).standard_normal((5, 160)).astype(np.float32)
    np.savez(tmp_path / "audio.npz", audio=audio)
    base = [sys.executable, "-m", "harness.cli", "run", "--model", str(path), "--runtimes", "ort-cpu",
            "--min-time", "0.05", "--min-iters", "3", "--repeats", "1"]
    subprocess.run(base + ["--batch-sizes", "1", "--out", str(tmp_path / "r1")], capture_output=True,
                   timeout=300)
    (bad,) = load_results(tmp_path / "r1" / "results.json").cases
    assert bad.status == "error" and "indices element out of data bounds" in bad.reason
    assert "[integer inputs fed: sr: int64 = 16000;" in bad.reason
    proc = subprocess.run(base + ["--batch-sizes", "1,8", "--input-value", "sr=8000", "--feeds",
                                  str(tmp_path / "audio.npz"), "--out", str(tmp_path / "r2")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    b1, b8 = load_results(tmp_path / "r2" / "results.json").cases
    assert b1.status == b8.status == "passed"
    assert b1.details["feeds"] == {"path": str(tmp_path / "audio.npz"), "samples": 5, "repeated": False}
    assert b8.details["feeds"]["repeated"] and b1.details["input_overrides"] == ["sr: int64 = 8000 (--input-value)"]
    from harness.data import feed_digest
    expected = {"audio": audio[:1], "sr": np.array([8000], np.int64)}
    assert b1.feed_sha256 == feed_digest(expected)  # the drift reference ran on exactly these inputs


def test_labels_in_the_feeds_make_task_accuracy_run_on_them(fakes, tmp_path):
    """fake-linear (y = 2x, classification) with 12 labelled samples: task accuracy is judged on the feeds,
    at the case's batch (5 does not divide 12: the last chunk is padded), against the reference's."""
    from harness.execution import CaseRunner
    from harness.measure.timer import TimingPolicy
    from harness.results.schema import CaseId

    x = np.random.default_rng(3).standard_normal((12, 8)).astype(np.float32)
    labels = x.argmax(axis=1)
    labels[:3] = (labels[:3] + 1) % 8  # three wrong labels: accuracy 0.75
    np.savez(tmp_path / "f.npz", x=x, labels=labels)
    cfg = RunConfig.build(models=("fake-linear",), runtimes=("fake-ok",), repeats=1, feeds=str(tmp_path / "f.npz"),
                    timing=TimingPolicy(min_time_s=0.01, min_iters=3, warmup_iters=1),
                    cache_dir=tmp_path / "cache", out_dir=tmp_path / "o")
    r = CaseRunner().run(CaseId("fake-linear", "fake-ok", "fp32", 5, None, "cpu"), cfg)
    assert r.status == "passed", r.reason
    task = r.accuracy["task"]
    assert task["accuracy"] == 0.75 and str(tmp_path / "f.npz") in str(task)
    assert r.details["feeds"]["samples"] == 12


@pytest.mark.e2e
@pytest.mark.slow
def test_a_torch_factory_runs_on_feeds_with_their_sequence_length_and_labels(tmp_path):
    """The docs' example factory (a text classifier) fed from an .npz of 6 samples of 20 tokens with
    labels: no --seq-lens, so the run takes 20 from the feeds; both runtimes measure on the feeds and judge
    task accuracy on their labels."""
    import os
    from pathlib import Path

    from harness.results import load_results

    rng = np.random.default_rng(0)
    ids = rng.integers(0, 1000, size=(6, 20))
    mask = np.ones((6, 20), np.int64)
    mask[3:, 12:] = 0
    np.savez(tmp_path / "text.npz", input_ids=ids, attention_mask=mask, labels=np.array([0, 1, 0, 1, 1, 0]))
    examples = Path(__file__).resolve().parents[1] / "docs" / "examples"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(examples), os.environ.get("PYTHONPATH", "")]),
           "HARNESS_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--model", "my_torch_model:make_model",
                           "--runtimes", "torch-cpu,ort-cpu", "--batch-sizes", "4", "--feeds",
                           str(tmp_path / "text.npz"), "--min-time", "0.05", "--min-iters", "3", "--repeats",
                           "1", "--out", str(tmp_path / "run")], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    cases = load_results(tmp_path / "run" / "results.json").cases
    assert [(c.case.runtime, c.case.seq, c.status) for c in cases] == [("torch-cpu", 20, "passed"),
                                                                        ("ort-cpu", 20, "passed")]
    for c in cases:
        assert c.details["feeds"]["samples"] == 6 and "text.npz" in c.accuracy["task"]["split"]


def test_generation_prompts_come_from_the_feeds(fakes, tmp_path):
    """--workload generate with --feeds: the prompt is the feeds' first rows, and without --prompt-lens
    the run takes the prompt length from them."""
    from harness.workloads.generate.workload import prompt_ids
    from harness.options import parse_run_options

    ids = np.arange(30, dtype=np.int64).reshape(3, 10)
    np.savez(tmp_path / "prompts.npz", input_ids=ids)
    cfg = parse_run_options({"models": "deepseek-tiny", "runtimes": "torch-cpu", "workload": "generate",
                             "feeds": str(tmp_path / "prompts.npz"), "out": str(tmp_path / "o")})
    assert cfg.generation.prompt_lens == (10,)
    from harness.model import get_model

    prompt = prompt_ids(get_model("deepseek-tiny"), 2, 10, cfg)
    assert (prompt == ids[:2]).all()


# ------------------------------------------------------------------ files that lie, values that cannot be fed
def _npy_bytes(shape, dtype="<f4") -> bytes:
    """An NPY 1.0 header declaring `shape`, followed by 16 bytes only."""
    import io

    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": dtype, "fortran_order": False, "shape": shape})
    return buf.getvalue() + b"\0" * 16


def test_an_npz_member_that_is_not_an_npy_array_is_one_line(tmp_path):
    import zipfile

    p = tmp_path / "f.npz"
    with zipfile.ZipFile(p, "w") as z:
        z.writestr("image.npy", np.lib.format.MAGIC_PREFIX + b"\x01\x00" + b"\x00" * 20)
    with pytest.raises(UsageError, match=r"f.npz: member 'image.npy' is not an NPY array"):
        load_feeds(p)
    with zipfile.ZipFile(p, "w") as z:
        z.writestr("image.txt", b"hello")
    with pytest.raises(UsageError, match=r"f.npz: member 'image.txt' is not an NPY array"):
        load_feeds(p)


@pytest.mark.parametrize("compressed", [False, True])
def test_an_npy_header_declaring_a_huge_shape_is_refused_before_allocating(tmp_path, compressed):
    import zipfile

    huge = (1 << 20, 1 << 20, 1 << 10)  # 4 PiB of float32 declared, 16 bytes stored
    p = tmp_path / "f.npz"
    with zipfile.ZipFile(p, "w", zipfile.ZIP_DEFLATED if compressed else zipfile.ZIP_STORED) as z:
        z.writestr("image.npy", _npy_bytes(huge))
    with pytest.raises(UsageError, match=r"f.npz: member 'image.npy': the header declares shape \[1048576, "
                                         r"1048576, 1024\] of float32 \(\d+ bytes\), more than the \d+ bytes "
                                         r"stored; refused"):
        load_feeds(p)
    (tmp_path / "npy").mkdir()
    (tmp_path / "npy" / "image.npy").write_bytes(_npy_bytes(huge))
    with pytest.raises(UsageError, match=r"image.npy: the header declares shape .* more than the \d+ bytes"):
        load_feeds(tmp_path / "npy")
    (tmp_path / "npy" / "image.npy").write_bytes(_npy_bytes((2, 8)))  # 64 bytes declared, 16 stored
    with pytest.raises(UsageError, match=r"image.npy: the header declares shape \[2, 8\]"):
        load_feeds(tmp_path / "npy")


def test_fortran_order_and_npy_folders_still_read(tmp_path):
    a = np.asfortranarray(np.arange(12, dtype=np.float32).reshape(3, 4))
    np.savez_compressed(tmp_path / "f.npz", image=a)
    assert (load_feeds(tmp_path / "f.npz").arrays["image"] == a).all()


@pytest.mark.parametrize("array, message", [
    (np.zeros((0, 1, 8, 8), np.float32), r"array 'image' has shape \[0, 1, 8, 8\]: zero samples"),
    (np.full((2, 1, 8, 8), np.nan, np.float32), r"array 'image' holds no finite value \(all NaN/inf\)"),
    (np.full((2, 1, 8, 8), np.inf, np.float32), r"array 'image' holds no finite value"),
])
def test_feeds_with_zero_samples_or_no_finite_value_are_refused(tmp_path, array, message):
    np.savez(tmp_path / "f.npz", image=array)
    with pytest.raises(UsageError, match=message) as err:
        load_feeds(tmp_path / "f.npz")
    assert "\n" not in str(err.value) and str(tmp_path / "f.npz") in str(err.value)


def test_a_float_override_the_dtype_cannot_hold_is_refused():
    with pytest.raises(UsageError, match=r"input 'image' is float32: image=1e\+39 does not fit \(it would feed "
                                         r"inf"):
        check_overrides(parse_overrides("image=1e39", "input-value", False), [IMAGE])
    with pytest.raises(UsageError, match=r"image=-1e\+39:0 does not fit"):
        check_overrides(parse_overrides("image=-1e39:0", "input-range", True), [IMAGE])
    half = ModelSpec("half", inputs=(TensorSpec("image", (BATCH, 4), "float16"),), outputs=("y",),
                     onnx_path="x.onnx")
    with pytest.raises(UsageError, match="is float16: image=70000 does not fit"):
        check_overrides(parse_overrides("image=70000", "input-value", False), [half])
    check_overrides(parse_overrides("image=3e38", "input-value", False), [IMAGE])  # fits float32


@pytest.mark.e2e
@pytest.mark.parametrize("command, status", [
    ([sys.executable, "-m", "harness.cli", "run", "--models", "digits-cnn", "--runtimes", "ort-cpu"], 2),
    ([sys.executable, "-m", "pytest", "suites", "-p", "no:cacheprovider", "--harness-models=digits-cnn",
      "--harness-runtimes=ort-cpu"], 4)])
def test_bad_feeds_and_overrides_are_one_line_from_run_and_plain_pytest(tmp_path, command, status):
    np.savez(tmp_path / "nan.npz", image=np.full((2, 1, 8, 8), np.nan, np.float32))
    pytest_form = "pytest" in command
    for option, value, message in (("feeds", str(tmp_path / "nan.npz"), "array 'image' holds no finite value"),
                                   ("input-value", "image=1e39", "image=1e+39 does not fit")):
        extra = [f"--harness-{option}={value}"] if pytest_form else [f"--{option}", value, "--out",
                                                                     str(tmp_path / "o")]
        proc = subprocess.run([*command, *extra], capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode == status, proc.stdout + proc.stderr
        lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if message in ln]
        assert len(lines) == 1 and "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr


@pytest.mark.parametrize("shape", [(-1024,), (2, -8), (-2, -8), (-1, 4, -1), (0, -3), (-16,)])
@pytest.mark.parametrize("container", ["npy", "npz"])
def test_an_npy_header_with_a_negative_dimension_names_it(shape, container, tmp_path):
    """A negative dimension, alone or paired so that the product is positive (and the bytes stored would
    match): refused as such, never 'truncated: 0 of the -1024 bytes' nor a reshape's traceback."""
    import zipfile

    raw = _npy_bytes(shape)
    if container == "npz":
        p = tmp_path / "f.npz"
        with zipfile.ZipFile(p, "w") as z:
            z.writestr("image.npy", raw)
    else:
        (tmp_path / "npy").mkdir()
        (tmp_path / "npy" / "image.npy").write_bytes(raw)
        p = tmp_path / "npy"
    first = next(d for d in shape if d < 0)
    with pytest.raises(UsageError, match=rf"image.npy.*: the header declares shape \[.*\], with a negative "
                                         rf"dimension {first}: not an array numpy writes; refused \(corrupt\)"):
        load_feeds(p)
