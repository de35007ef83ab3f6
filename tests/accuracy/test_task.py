"""Task accuracy: top-1 on a labelled split (padded last batch), the ratio rule, the runner's verdict."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pytest

from harness.accuracy.task import DEFAULT_MIN_TASK_RATIO, EvalSplit, judge, top1_accuracy
from harness.config import RunConfig
from harness.execution import CaseRunner
from harness.measure.timer import TimingPolicy
from harness.model import BATCH, ModelSpec, TensorSpec, register_model
from harness.precision import Precision, Tolerance
from harness.results.schema import CaseId
from harness.runtimes import register_runtime

FAST = TimingPolicy(min_time_s=0.01, min_iters=3, warmup_iters=1)


def _split(n: int = 50) -> EvalSplit:
    """Inputs whose arg-max is the label for 90 % of the samples: an identity 'model' scores 0.9."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, 4)).astype(np.float32)
    labels = x.argmax(1)
    labels[: n // 10] = (labels[: n // 10] + 1) % 4
    return EvalSplit({"x": x}, labels, description="fake split")


def test_top1_runs_in_batches_and_pads_the_last_one():
    split = _split(50)
    seen = []

    def infer(feed):
        seen.append(len(feed["x"]))
        return {"y": feed["x"] * 2}

    assert top1_accuracy(infer, split, 8, "y") == pytest.approx(0.9)
    assert seen == [8] * 7  # 50 = 6 x 8 + 2, the last chunk padded to 8
    assert top1_accuracy(lambda f: {"y": f["x"]}, split, 1, "y") == pytest.approx(0.9)


def test_split_checks_lengths():
    with pytest.raises(ValueError, match="has 3 samples, labels have 2"):
        EvalSplit({"x": np.zeros((3, 4))}, np.zeros(2))


def test_ratio_rule_defaults_to_mlperf_99_percent():
    ok = judge(0.891, 0.9, 50, 4, None)
    assert ok and ok.min_ratio == DEFAULT_MIN_TASK_RATIO == 0.99 and ok.ratio == pytest.approx(0.99)
    bad = judge(0.85, 0.9, 50, 4, None, "torch-cpu")
    assert not bad and "ratio 0.9444 < 0.99" in bad.message and "torch-cpu" in bad.message
    assert judge(0.85, 0.9, 50, 4, 0.9)  # a looser per-precision tolerance
    d = bad.as_dict()
    assert (d["metric"], d["passed"], d["n"]) == ("top1_accuracy", False, 50)
    assert set(d) >= {"accuracy", "reference_accuracy", "ratio", "min_ratio"}
    assert Tolerance(min_task_ratio=0.5).merged(Tolerance(atol=1.0)).min_task_ratio == 0.5


class _Identity(__import__("fakes").FakeOk):
    """Scores = 2x: the reference (and a runtime that keeps the task accuracy)."""

    name: ClassVar[str] = "task-ok"

    def _infer(self, prepared: Any) -> dict[str, np.ndarray]:
        return {"y": prepared["x"] * 2.0}


class _Degraded(_Identity):
    """Right on the drift feed's first rows, wrong on every 5th eval sample: task accuracy drops."""

    name: ClassVar[str] = "task-degraded"

    def _infer(self, prepared: Any) -> dict[str, np.ndarray]:
        y = prepared["x"] * 2.0
        if len(y) == 5:  # the eval split is run at batch 5; the drift feed too, but at batch 5 only here
            y = y.copy()
            y[0] = np.roll(y[0], 1)
        return {"y": y}


@pytest.fixture
def task_config(fakes, tmp_path):
    register_runtime(_Identity, replace=True)
    register_runtime(_Degraded, replace=True)
    register_model(ModelSpec(
        name="fake-task", build=lambda: None, inputs=(TensorSpec("x", (BATCH, 4)),), outputs=("y",),
        task="classification", reference_runtime="task-ok", eval_split=_split,
        tolerances={Precision.FP32: Tolerance(atol=10.0, rtol=10.0, max_rel_l2=10.0, min_cosine=-1.0,
                                              min_top1=0.0)},
    ), replace=True)
    return RunConfig.build(models=("fake-task",), runtimes=("task-ok",), timing=FAST, cache_dir=tmp_path / "cache",
                     out_dir=tmp_path / "out")


def test_runner_records_task_accuracy_and_fails_below_the_ratio(task_config):
    runner = CaseRunner()
    ok = runner.run(CaseId("fake-task", "task-ok", "fp32", 5, None, "cpu"), task_config)
    assert ok.status == "passed", ok.reason
    task = ok.accuracy["task"]
    assert task["accuracy"] == task["reference_accuracy"] == pytest.approx(0.9)
    assert task["ratio"] == 1.0 and task["min_ratio"] == 0.99 and task["passed"] and task["n"] == 50
    bad = runner.run(CaseId("fake-task", "task-degraded", "fp32", 5, None, "cpu"), task_config)
    assert bad.status == "failed"
    assert bad.accuracy["task"]["accuracy"] < 0.9 and not bad.accuracy["task"]["passed"]
    assert "task top1_accuracy" in bad.reason and "< 0.99" in bad.reason
    assert bad.accuracy["task"]["reference_runtime"] == "task-ok"
    assert bad.samples_ns  # measured all the same


def test_models_without_an_eval_split_record_no_task(config_plain):
    r = CaseRunner().run(CaseId("fake-linear", "fake-ok", "fp32", 2, None, "cpu"), config_plain)
    assert r.status == "passed" and "task" not in r.accuracy


@pytest.fixture
def config_plain(fakes, tmp_path):
    return RunConfig.build(models=("fake-linear",), runtimes=("fake-ok",), timing=FAST, cache_dir=tmp_path / "cache",
                     out_dir=tmp_path / "out")
