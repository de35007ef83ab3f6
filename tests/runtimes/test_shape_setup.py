"""Runtime._setup_shape: once per new input shape, outside the timed call, its time part of setup_s."""

from __future__ import annotations

import time

import numpy as np

from harness.model import get_model
from harness.precision import Precision
from harness.runtimes import Runtime, RuntimeOptions
from harness.workloads import get_workload


class PerShape(Runtime):
    name = "per-shape-test"

    def _activate(self):
        time.sleep(0.01)
        self.compiled_for: list[tuple[int, ...]] = []

    def _setup_shape(self, feed):
        time.sleep(0.02)
        self.compiled_for.append(feed["x"].shape)

    def _infer(self, prepared):
        assert self.compiled_for[-1] == prepared["x"].shape, "ran a shape that was not set up"
        return {"logits": prepared["x"][:, :10]}


def test_setup_shape_runs_once_per_shape_and_joins_setup_s():
    x1, x4 = np.ones((1, 256), np.float32), np.ones((4, 256), np.float32)
    with PerShape(get_model("mlp"), Precision.FP32, RuntimeOptions(threads=1)) as rt:
        assert rt.shape_setup_s is None and rt.setup_s == rt.activation_s >= 0.01
        rt.infer({"x": x1})
        call = rt.bind({"x": x1})
        for _ in range(3):
            call()  # the timed callable never sets up again
        assert rt.compiled_for == [(1, 256)]
        assert rt.shape_setup_s >= 0.02 and rt.setup_s == rt.activation_s + rt.shape_setup_s
        rt.bind({"x": x4})()
        assert rt.compiled_for == [(1, 256), (4, 256)]
        details = rt.details()
        assert details["activation_s"] >= 0.01 and details["shape_setup_s"] >= 0.02
    with rt:  # a fresh activation sets the first shape up again
        rt.infer({"x": x4})
    assert rt.compiled_for == [(4, 256)]


def test_case_runner_records_shape_setup_in_setup_s(fakes, tmp_path):
    from harness.options import parse_run_options
    from harness.execution.worker import CaseRunner
    from harness.runtimes import register_runtime

    class FakePerShape(fakes.FakeOk):
        name = "fake-per-shape"

        def _setup_shape(self, feed):
            time.sleep(0.05)

    register_runtime(FakePerShape, replace=True)
    config = parse_run_options({"models": "fake-linear", "runtimes": "fake-per-shape", "batch_sizes": "1,2",
                                     "min_time": "0", "min_iters": "2", "warmup": "0",
                                     "cache_dir": str(tmp_path), "out": str(tmp_path / "out")})
    runner = CaseRunner()
    try:
        results = [runner.run(case, config) for case in get_workload(config.workload).cases(config)]
    finally:
        runner.close()
    assert [r.status for r in results] == ["passed", "passed"]
    for r in results:
        assert r.setup_s >= 0.05 and r.details["shape_setup_s"] >= 0.05
    assert results[1].details["activation_reused"]


def test_an_adapter_without_shape_setup_keeps_setup_s_as_its_activation_time():
    class Plain(Runtime):
        name = "plain-test"

        def _activate(self):
            pass

        def _infer(self, prepared):
            return {"logits": prepared["x"]}

    with Plain(get_model("mlp"), Precision.FP32, RuntimeOptions(threads=1)) as rt:
        before = rt.setup_s
        rt.infer({"x": np.ones((2, 256), np.float32)})
        assert rt.setup_s == before and rt.shape_setup_s is None and "shape_setup_s" not in rt.details()
