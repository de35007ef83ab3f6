"""The runner passes the run's INT8 options to the runtime and records what ran as precision_recipe."""

from __future__ import annotations

import pytest

from harness.config import RunConfig
from harness.measure.timer import TimingPolicy
from harness.execution import CaseRunner
from harness.results.schema import CaseId, CaseResult


def config(tmp_path, **kw):
    return RunConfig.build(models=("mlp",), runtimes=("ort-cpu",), threads=1,
                     timing=TimingPolicy(min_time_s=0.01, min_iters=3, warmup_iters=1),
                     cache_dir=tmp_path / "cache", out_dir=tmp_path / "out", **kw)


@pytest.mark.e2e
def test_int8_options_reach_the_artifact_and_the_recipe_is_recorded(tmp_path):
    case = CaseId("mlp", "ort-cpu", "int8", 2, None, "cpu")
    dyn = CaseRunner().run(case, config(tmp_path, int8_method="dynamic"))
    assert dyn.status == "passed", dyn.reason
    assert dyn.precision_recipe.startswith("int8: ORT dynamic") and "3 MatMulInteger nodes" in dyn.precision_recipe
    pct = CaseRunner().run(case, config(tmp_path, int8_method="static", calibration_method="percentile"))
    assert "static QDQ" in pct.precision_recipe and "Percentile calibration" in pct.precision_recipe
    assert pct.artifact != dyn.artifact
    back = CaseResult.from_dict(pct.as_dict())  # the new fields survive the worker -> parent round trip
    assert back.precision_recipe == pct.precision_recipe and back.localization is None
