"""Our change-point detector on a fixed subset of otava-test-data's labelled patterns (generated here from the
package, seeds 0-5, nothing stored): its recall and false change points may not get worse than the figures
measured when this test was written (2026-11-27, docs/history.md; the full comparison is
`python -m harness_suites.benchmarks.changepoints`)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from harness.history.changes import detect

SEEDS = range(6)
MARGIN = 5
GROUPS = {
    "steps": ("step_function", "multiple_changes", "regression_fix"),
    "variance": ("variance_change", "multiple_variance_changes"),
    "flat": ("noise_normal", "noise_uniform", "banding", "banding_clean", "outlier", "multiple_outliers"),
}
# measured 2026-11-27: true change points found (of all), series with a false change point (of all)
TODAY = {"steps": (36, 36), "variance": (14, 24), "flat_series_with_false": (0, 36)}


def _bench():
    """suites/benchmarks/changepoints.py of this checkout (else the installed harness_suites')."""
    path = Path(__file__).resolve().parents[2] / "suites" / "benchmarks" / "changepoints.py"
    if not path.is_file():
        from harness_suites.benchmarks import changepoints

        return changepoints
    if "changepoints_bench" not in sys.modules:
        spec = importlib.util.spec_from_file_location("changepoints_bench", path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
    return sys.modules["changepoints_bench"]


@pytest.fixture(scope="module")
def found() -> dict[str, list[tuple[list[int], list[int]]]]:
    bench = _bench()
    out: dict[str, list[tuple[list[int], list[int]]]] = {}
    for group, patterns in GROUPS.items():
        out[group] = []
        for p in patterns:
            for s in SEEDS:
                lab = bench.generate(p, s)
                out[group].append((lab.truth, [c.index for c in detect(lab.values)]))
    return out


@pytest.mark.parametrize("group", ["steps", "variance"])
def test_recall_is_no_worse_than_today(found, group: str) -> None:
    bench = _bench()
    hits = sum(bench.match(truth, det, MARGIN) for truth, det in found[group])
    total = sum(len(truth) for truth, _ in found[group])
    want, want_total = TODAY[group]
    assert total == want_total  # the package still generates the same labelled series
    assert hits >= want, f"{group}: found {hits} of {total} true change points, {want} before"
    false = sum(len(det) - bench.match(truth, det, MARGIN) for truth, det in found[group])
    assert false <= 1, f"{group}: {false} detections match no true change point"


def test_false_change_points_on_flat_series_are_no_more_than_today(found) -> None:
    series = found["flat"]
    assert all(truth == [] for truth, _ in series) and len(series) == TODAY["flat_series_with_false"][1]
    bad = [det for _, det in series if det]
    assert len(bad) <= TODAY["flat_series_with_false"][0], f"false change points in {len(bad)} flat series: {bad}"


def test_the_scoring_counts_a_hit_within_the_margin_once() -> None:
    bench = _bench()
    assert bench.match([50], [52, 48], 5) == 1  # one true change point, two detections near it: one hit
    assert bench.match([50, 100], [56, 100], 5) == 1  # 6 points off is outside a margin of 5
    assert bench.match([], [10], 5) == 0
