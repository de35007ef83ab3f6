"""CaseRunner in-process with fake runtimes: statuses, reuse of activations and references, phases."""

from __future__ import annotations

import pytest

from harness.config import RunConfig
from harness.measure.timer import TimingPolicy
from harness.execution import CaseRunner
from harness.results.schema import CaseId


@pytest.fixture
def config(fakes, tmp_path):
    return RunConfig.build(models=("fake-linear",), runtimes=("fake-ok",), repeats=1,
                     timing=TimingPolicy(min_time_s=0.01, min_iters=5, warmup_iters=1),
                     cache_dir=tmp_path / "cache", out_dir=tmp_path / "out")


def case(runtime="fake-ok", batch=2, precision="fp32"):
    return CaseId("fake-linear", runtime, precision, batch, None, "cpu")


def test_measured_case_has_samples_stats_drift_and_identity(config):
    phases = []
    r = CaseRunner().run(case(), config, on_phase=phases.append)
    assert r.status == "passed", r.reason
    assert phases == ["load", "warmup", "run", "accuracy"]
    assert len(r.samples_ns) >= 5 and r.latency.iterations == len(r.samples_ns)
    assert r.throughput_sps > 0 and r.scenario == "offline" and r.timing_scope == "host_to_host"
    assert r.accuracy["passed"] and r.accuracy["max_abs"] == 0.0
    assert r.reference_runtime == "fake-ok" and r.feed_sha256 and r.model_fingerprint


def test_drift_over_tolerance_is_failed_with_figures(config):
    r = CaseRunner().run(case("fake-drift"), config)
    assert r.status == "failed"
    assert "rel_l2=" in r.reason and "elements exceed" in r.reason
    assert r.samples_ns  # still measured


def test_skips_carry_reasons(config):
    r = CaseRunner().run(case("fake-unavailable"), config)
    assert r.status == "skipped" and "FakeAcceleratorProvider not available" in r.reason
    r = CaseRunner().run(case("fake-ok", precision="int8"), config)
    assert r.status == "skipped" and "does not run int8" in r.reason


def test_a_runtime_that_cannot_take_the_model_is_a_skip_with_its_reason(config):
    r = CaseRunner().run(case("fake-unsupported"), config)
    assert r.status == "skipped" and "importer lacks an op" in r.reason and r.phase == "load"


def test_exception_is_an_error_row_and_the_runner_goes_on(config):
    runner = CaseRunner()
    bad = runner.run(case("fake-raises"), config)
    assert bad.status == "error" and "model file is garbage" in bad.reason and bad.phase == "load"
    assert "ValueError" in bad.stderr_tail
    assert runner.run(case("fake-ok"), config).status == "passed"


def test_activation_is_reused_across_batch_sizes_and_references_per_shape(config):
    runner = CaseRunner()
    a = runner.run(case("fake-ok-b", batch=1), config)
    b = runner.run(case("fake-ok-b", batch=4), config)
    assert a.details["activation_reused"] is False and b.details["activation_reused"] is True
    assert a.setup_s == b.setup_s
    c = runner.run(case("fake-ok-c", batch=4), config)
    assert c.details["activation_reused"] is False
    assert a.feed_sha256 != b.feed_sha256 and b.feed_sha256 == c.feed_sha256  # identical inputs per shape


def test_repeats_measure_in_blocks_each_after_a_fresh_activation(config, fakes):

    from harness.runtimes import get_runtime

    cls = get_runtime("fake-ok-d")
    made = []
    original = cls._activate

    def counting(self):
        made.append(self)
        original(self)

    cls._activate = counting
    try:
        r = CaseRunner().run(case("fake-ok-d", batch=2), config.replace(repeats=3))
    finally:
        cls._activate = original
    assert r.status == "passed", r.reason
    assert len(made) == 3 and len({id(m) for m in made}) == 3  # three activations, three sessions
    sizes = [b.samples for b in r.blocks]
    assert len(sizes) == 3 and sum(sizes) == len(r.samples_ns) and min(sizes) >= 2  # ceil(5 / 3) each
    assert [b.reactivated for b in r.blocks] == [False, True, True] and all(b.p50_ms > 0 for b in r.blocks)
    assert r.setup_s == made[0].setup_s  # the case's setup is its first activation's


def test_a_runtimes_caveat_is_the_cases_reason_details_and_case_line(config, fakes):
    """A runtime that declares a caveat (TVM untuned: its figures are an untuned build's floor) has it said with
    every measured case: reason, details["caveat"], the case line; one without says nothing."""
    from harness.report.progress import case_line
    from harness.runtimes import register_runtime

    words = "untuned: the default pipeline applies no schedule; tune with --variants tune=N"

    class Caveated(fakes.FakeOk):
        name = "fake-caveated"

        def caveat(self):
            return words

    register_runtime(Caveated, replace=True)
    r = CaseRunner().run(case("fake-caveated"), config)
    assert r.status == "passed" and r.reason == words and r.details["caveat"] == words
    assert case_line(r).endswith(f"  [{words}]")
    plain = CaseRunner().run(case("fake-ok"), config)
    assert not plain.reason and "caveat" not in plain.details and "  [" not in case_line(plain).split("rcv")[1]


def test_tvm_says_untuned_unless_tune_is_given():
    import dataclasses

    from harness.model import get_model
    from harness.precision import Precision
    from harness.runtimes import RuntimeOptions, get_runtime

    cls = get_runtime("tvm-cpu")
    untuned = cls(get_model("mlp"), Precision.FP32, RuntimeOptions(threads=1))
    assert untuned.caveat() == ("untuned: TVM's default Relax pipeline applies no schedule; tune with --variants "
                                "tune=N")
    tuned = cls(get_model("mlp"), Precision.FP32, dataclasses.replace(RuntimeOptions(threads=1), tuning_trials=8))
    assert tuned.caveat() is None
