"""Change points: a 10% step in a 24-run history is found at the right run; a flat history has none."""

from __future__ import annotations

import numpy as np
import pytest

from harness.history import change_points


def _history(seed: int, step: float = 0.0, at: int = 12, n: int = 24, noise: float = 0.01) -> list[float]:
    x = 10.0 * (1 + noise * np.random.default_rng(seed).standard_normal(n))
    x[at:] *= 1 + step
    return list(x)


@pytest.mark.parametrize("seed", range(10))
def test_a_10_percent_step_is_found_at_its_run_and_nothing_without_it(seed: int) -> None:
    found = change_points(_history(seed, 0.10))
    assert [c.index for c in found] == [12]
    assert found[0].change == pytest.approx(0.10, abs=0.02) and found[0].pvalue < 1e-4
    assert change_points(_history(seed)) == []


def test_steps_at_other_places_and_two_steps() -> None:
    assert [c.index for c in change_points(_history(1, 0.10, at=5))] == [5]
    assert [c.index for c in change_points(_history(2, -0.10, at=18))] == [18]
    x = _history(3, 0.10, at=8, n=30)
    x[20:] = [v * 0.8 for v in x[20:]]
    assert [c.index for c in change_points(x)] == [8, 20]


def test_false_alarms_are_rare_and_min_magnitude_filters() -> None:
    flat = sum(bool(change_points(_history(seed))) for seed in range(100, 200))
    assert flat <= 2  # measured: 1 in 300 flat 24-run histories at 1% noise (docs/history.md)
    assert change_points(_history(0, 0.10), min_magnitude=0.2) == []


def test_short_or_degenerate_series() -> None:
    assert change_points([1.0, 2.0, 3.0]) == []
    assert change_points([5.0] * 30) == []
    assert change_points([1.0] * 12 + [float("nan")] * 12) == []
    assert [c.index for c in change_points([1.0] * 12 + [1.1] * 12)] == [12]


@pytest.mark.parametrize("back", [1, 2, 3])
def test_a_step_that_held_then_came_back_is_two_change_points(back: int) -> None:
    """A +30% step over 5 runs, then `back` runs at the old level: the step and the recovery both stay."""
    x = _history(4, 0.0, n=17 + back)
    x[12:17] = [v * 1.3 for v in x[12:17]]
    found = change_points(x)
    assert [c.index for c in found] == [12, 17]
    assert found[0].change == pytest.approx(0.30, abs=0.03) and found[1].change == pytest.approx(-0.23, abs=0.03)
    assert [c.index for c in change_points(x[:17])] == [12]  # before it came back: the step alone


def test_one_odd_newest_run_in_a_flat_history_is_no_change_point() -> None:
    for seed in range(20):
        x = _history(seed)
        x[-1] *= 1.3
        assert change_points(x) == [], seed
