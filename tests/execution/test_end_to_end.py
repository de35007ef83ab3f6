"""End-to-end latency: a model's pre/post steps around the runtime, timed beside the model-only loop."""

from __future__ import annotations

import time

import numpy as np
import pytest

from harness.config import RunConfig
from harness.execution import CaseRunner
from harness.measure.end_to_end import measure_end_to_end
from harness.measure.timer import Timer, TimingPolicy
from harness.model import BATCH, ModelSpec, Pipeline, TensorSpec, register_model
from harness.results.schema import CaseId

PRE_S, POST_S = 0.004, 0.002


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _pre(raw, dims):
    _spin(PRE_S)
    return {"x": np.frombuffer(raw, dtype=np.float32).reshape(int(dims["batch"]), 8).copy()}


def _post(outputs, feed):
    _spin(POST_S)
    return outputs["y"].sum(axis=-1)


PIPE = Pipeline(raw=lambda dims, seed: np.ones((int(dims["batch"]), 8), np.float32).tobytes(), pre=_pre,
                post=_post, steps="decode bytes -> model -> sum")


@pytest.fixture
def config(fakes, tmp_path):
    register_model(ModelSpec("fake-e2e", build=lambda: None, inputs=(TensorSpec("x", (BATCH, 8)),),
                             outputs=("y",), pipeline=lambda: PIPE, reference_runtime="fake-ok"), replace=True)
    return RunConfig.build(models=("fake-e2e",), runtimes=("fake-ok",), repeats=1,
                     timing=TimingPolicy(min_time_s=0.05, min_iters=10, warmup_iters=1, warmup_time_s=0.0),
                     cache_dir=tmp_path / "cache", out_dir=tmp_path / "out")


def test_a_model_with_steps_reports_end_to_end_beside_model_only(config):
    r = CaseRunner().run(CaseId("fake-e2e", "fake-ok", "fp32", 2, None, "cpu"), config)
    assert r.status == "passed", r.reason
    e2e = r.end_to_end
    assert e2e.steps == "decode bytes -> model -> sum" and len(e2e.samples_ns) >= 10
    # the steps' own medians: the spin times (lower bounds; a busy machine only adds)
    assert e2e.pre_p50_ms >= PRE_S * 1e3 and e2e.post_p50_ms >= POST_S * 1e3
    assert e2e.latency.p50_ms >= (PRE_S + POST_S) * 1e3 > r.latency.p50_ms
    assert e2e.throughput_sps == pytest.approx(2 / (e2e.latency.p50_ms / 1e3), rel=1e-3)  # batch / p50


def test_end_to_end_timing_with_a_fake_clock_is_exact():
    """Each call costs 5 ticks of a fake clock: the timed samples are exactly 5 ns."""
    ticks = iter(range(0, 10**9, 5))
    timer = Timer(clock=lambda: next(ticks))
    pipe = Pipeline(raw=lambda d, s: b"", pre=lambda r, d: {"x": np.zeros((1, 8), np.float32)},
                    post=lambda o, f: None, steps="none")
    out = measure_end_to_end(pipe, lambda f: {"y": f["x"]}, (TensorSpec("x", (BATCH, 8)),), {"batch": 1}, 0,
                             timer, TimingPolicy(min_time_s=0.0, min_iters=7, warmup_iters=2, warmup_time_s=0.0),
                             lambda: None, 0.1)
    assert out.samples_ns == [5] * 7 and out.warmup_iters == 2
    assert list(out.as_dict())[:5] == ["steps", "samples_ns", "warmup_iters", "latency", "throughput_sps"]


def test_a_pre_step_that_makes_the_wrong_feed_is_an_error_naming_it(config):
    bad = Pipeline(raw=lambda d, s: None, pre=lambda r, d: {"x": np.zeros((1, 3), np.float64)},
                   post=lambda o, f: None, steps="broken pre")
    register_model(ModelSpec("fake-e2e-bad", build=lambda: None, inputs=(TensorSpec("x", (BATCH, 8)),),
                             outputs=("y",), pipeline=lambda: bad, reference_runtime="fake-ok"), replace=True)
    r = CaseRunner().run(CaseId("fake-e2e-bad", "fake-ok", "fp32", 2, None, "cpu"), config)
    assert r.status == "error" and r.phase == "end-to-end"
    assert "pre-processing (broken pre) made input 'x' float64[1, 3]; the model takes float32[2, 8]" in r.reason


@pytest.mark.e2e
def test_the_zoo_pipelines_make_the_models_feeds():
    """digits-cnn: PGM bytes decode to exactly the model-only feed; bert-mini: tokenised texts padded to seq."""
    from harness_zoo import bert_mini, digits_cnn

    pipe = digits_cnn.pipeline()
    raw = pipe.raw({"batch": 3}, 0)
    assert all(b.startswith(b"P5\n8 8\n16\n") for b in raw)
    feed = pipe.pre(raw, {"batch": 3})
    assert np.array_equal(feed["image"], digits_cnn.make_feed({"batch": 3}, 0)["image"])
    assert pipe.post({"logits": np.eye(10)[[3, 1, 4]]}, feed).tolist() == [3, 1, 4]
    text = bert_mini.BERT_MINI.pipeline()
    feed = text.pre(text.raw({"batch": 2, "seq": 32}, 0), {"batch": 2, "seq": 32})
    assert feed["input_ids"].shape == (2, 32) and feed["input_ids"].dtype == np.int64
    assert (feed["input_ids"][:, 0] == 2).all()  # [CLS]
    emb = text.post({"last_hidden_state": np.ones((2, 32, 4), np.float32)}, feed)
    assert np.allclose(np.linalg.norm(emb, axis=-1), 1.0)
