"""Inputs valid by construction for user ONNX files: Gather tables, name conventions, what was fed."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from harness.data import make_feed
from harness.model_files import index_bounds, spec_from_onnx


def bert_like(path, vocab=3000, type_vocab=2, positions=64, hidden=8):
    """An encoder-style graph: word, token-type and position embeddings (Gather on initializers), the mask
    multiplying the sum; token_type_ids reaches its Gather through a Cast."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((n, hidden)).astype(np.float32), name)
             for name, n in (("word", vocab), ("ttype", type_vocab), ("pos", positions))]
    nodes = [
        helper.make_node("Gather", ["word", "input_ids"], ["w"]),
        helper.make_node("Cast", ["token_type_ids"], ["tt64"], to=TensorProto.INT64),
        helper.make_node("Gather", ["ttype", "tt64"], ["t"]),
        helper.make_node("Gather", ["pos", "position_ids"], ["p"]),
        helper.make_node("Add", ["w", "t"], ["wt"]),
        helper.make_node("Add", ["wt", "p"], ["emb"]),
        helper.make_node("Cast", ["attention_mask"], ["maskf"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["maskf", "axes"], ["mask3"]),
        helper.make_node("Mul", ["emb", "mask3"], ["out"]),
    ]
    inits.append(numpy_helper.from_array(np.array([-1], dtype=np.int64), "axes"))
    ins = [helper.make_tensor_value_info(n, t, ["batch", "seq"]) for n, t in (
        ("input_ids", TensorProto.INT64), ("token_type_ids", TensorProto.INT32),
        ("position_ids", TensorProto.INT64), ("attention_mask", TensorProto.INT64))]
    out = helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", "seq", hidden])
    model = helper.make_model(helper.make_graph(nodes, "bertlike", ins, [out], inits),
                              opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, path)
    return path


def test_gather_tables_and_name_conventions_bound_the_inputs(tmp_path):
    model = onnx.load(bert_like(tmp_path / "enc.onnx"))
    assert index_bounds(model) == {"input_ids": 3000, "token_type_ids": 2, "position_ids": 64}
    spec = spec_from_onnx(tmp_path / "enc.onnx")
    by = {t.name: t for t in spec.inputs}
    assert (by["input_ids"].low, by["input_ids"].high) == (0, 3000)
    assert (by["token_type_ids"].low, by["token_type_ids"].high) == (0, 2)
    assert by["position_ids"].fill == "arange" and by["attention_mask"].value == 1
    feed = make_feed(spec, {"batch": 2, "seq": 16}, seed=0)
    assert feed["input_ids"].max() < 3000 and feed["input_ids"].max() >= 100  # the whole vocabulary is used
    assert set(np.unique(feed["token_type_ids"])) <= {0, 1}
    assert (feed["position_ids"] == np.arange(16)).all() and (feed["attention_mask"] == 1).all()
    assert by["input_ids"].describe() == "input_ids: int64 in [0, 3000)"


def test_a_sample_rate_input_gets_16000(tmp_path):
    x = helper.make_tensor_value_info("audio", TensorProto.FLOAT, ["batch", 160])
    sr = helper.make_tensor_value_info("sr", TensorProto.INT64, [1])
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 160])
    nodes = [helper.make_node("Cast", ["sr"], ["srf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["audio", "srf"], ["y"])]
    onnx.save(helper.make_model(helper.make_graph(nodes, "vad", [x, sr], [out]),
                                opset_imports=[helper.make_opsetid("", 17)], ir_version=8), tmp_path / "vad.onnx")
    spec = spec_from_onnx(tmp_path / "vad.onnx")
    assert make_feed(spec, {"batch": 1}, seed=0)["sr"].tolist() == [16000]


@pytest.mark.e2e
@pytest.mark.slow
def test_a_bert_style_encoder_with_a_large_vocabulary_runs_with_no_feeds_and_no_options(fake_env, tmp_path):
    """A vocabulary of 3,000 rows and token_type_ids with 2: fed from [0, 100) token types used to die in a
    Gather ("indices element out of data bounds"); now both runtimes' cases are measured."""
    import subprocess
    import sys

    from harness.results import load_results

    path = bert_like(tmp_path / "enc.onnx")
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--model", str(path), "--runtimes",
                           "ort-cpu", "--batch-sizes", "2", "--seq-lens", "16", "--min-time", "0.02",
                           "--min-iters", "3", "--repeats", "1", "--out", str(out)],
                          env=fake_env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (case,) = load_results(out).cases
    assert case.status == "passed" and case.latency.p50_ms > 0


def test_an_error_that_blames_input_values_names_the_inputs_and_their_ranges(fakes, tmp_path):
    """An error whose text blames input values (ORT's Gather bound check) gets a note naming each integer
    input and how it was fed; other errors get none."""
    from harness.config import RunConfig
    from harness.workloads.forward.workload import fed_inputs_note
    from harness.model import register_model

    spec = spec_from_onnx(bert_like(tmp_path / "enc.onnx"), name="enc-note")
    register_model(spec, replace=True)
    cfg = RunConfig.build()  # a run without --feeds or overrides
    note = fed_inputs_note("Fail in phase warmup: indices element out of data bounds, idx=7", "enc-note", cfg)
    assert "input_ids: int64 in [0, 3000)" in note and "token_type_ids: int32 in [0, 2)" in note
    assert "position_ids: int64 positions 0..n-1" in note and "attention_mask: int64 = 1" in note
    assert fed_inputs_note("RuntimeError: something else", "enc-note", cfg) == ""


@pytest.mark.e2e
@pytest.mark.slow
def test_a_real_bert_encoder_with_token_types_and_a_4000_row_vocabulary_runs_with_no_options(tmp_path):
    """transformers' BertModel (vocabulary 4,000, 2 token types) exported by torch.onnx: with no feeds and
    no options both its ids and its token types are fed inside their tables, and the case is measured."""
    import subprocess
    import sys

    import torch
    from transformers import BertConfig, BertModel

    from harness.results import load_results

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=4000, type_vocab_size=2, hidden_size=32, num_hidden_layers=1,
                     num_attention_heads=2, intermediate_size=64, max_position_embeddings=64)
    bert = BertModel(cfg).eval()

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask, token_type_ids):
            out = self.bert(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
            return out.last_hidden_state, out.pooler_output

    ids = torch.ones(2, 16, dtype=torch.int64)
    path = tmp_path / "bert.onnx"
    torch.onnx.export(Encoder().eval(), (ids, torch.ones_like(ids), torch.zeros_like(ids)), str(path),
                      input_names=["input_ids", "attention_mask", "token_type_ids"],
                      output_names=["last_hidden_state", "pooler_output"], dynamo=False,
                      dynamic_axes={n: {0: "batch", 1: "seq"} for n in ("input_ids", "attention_mask",
                                                                         "token_type_ids")})
    spec = spec_from_onnx(path)
    assert {t.name: (t.low, t.high) for t in spec.inputs if t.value is None} == {
        "input_ids": (0, 4000), "token_type_ids": (0, 2)}
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--model", str(path), "--runtimes",
                           "ort-cpu", "--batch-sizes", "2", "--seq-lens", "16", "--min-time", "0.02",
                           "--min-iters", "3", "--repeats", "1", "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (case,) = load_results(out).cases
    assert case.status == "passed" and case.latency.p50_ms > 0
