"""The smallest step a case's own history can show (min_detectable_step), in `history changes` and the trend."""

from __future__ import annotations

import numpy as np
import pytest
from gating_synth import CASES, ENV, make_run

from harness.cli import main
from harness.history.changes import detect, min_detectable_step
from harness.results import write_results
from harness.results.stored import RunEnvironmentRecord


def _noisy(seed: int, n: int, sigma: float) -> np.ndarray:
    return 1.0 + np.random.default_rng(seed).normal(0, sigma, n)


def test_it_grows_with_the_noise_and_shrinks_with_more_runs_after() -> None:
    quiet, loud = _noisy(1, 20, 0.01), _noisy(1, 20, 0.03)
    assert min_detectable_step(loud, 5) == pytest.approx(3 * min_detectable_step(quiet, 5), rel=0.01)
    steps = [min_detectable_step(quiet, n) for n in (3, 5, 10, 20)]
    assert steps == sorted(steps, reverse=True) and steps[-1] < steps[0] / 4
    assert min_detectable_step(quiet[:2], 5) is None and min_detectable_step(quiet, 2) is None
    assert min_detectable_step([0.0] * 10, 5) is None  # no positive median: no relative step


def test_a_step_of_that_size_is_found_most_of_the_time_and_half_of_it_less_often() -> None:
    history = _noisy(7, 20, 0.01)
    step = min_detectable_step(history, 5)
    assert 0.02 < step < 0.15  # 1% noise, 20 runs, 5 after

    def found(size: float, trials: int = 40) -> int:
        hits = 0
        for seed in range(trials):
            x = np.concatenate([_noisy(100 + seed, 20, 0.01), _noisy(500 + seed, 5, 0.01) + size])
            hits += any(c.kind == "level" and abs(c.index - 20) <= 3 for c in detect(x))
        return hits

    full, half = found(step), found(step / 2)
    assert full >= 30, f"a {100 * step:.1f}% step found in {full} of 40 histories"
    assert half < full


def test_history_changes_prints_it_and_the_trend_shows_it(tmp_path, capsys) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    paths = []
    for i in range(12):
        run = make_run(i, n=60)
        run.run_id = f"run-{i:02d}"
        run.started_at = f"2026-11-01T{i:02d}:00:00+00:00"
        run.environment = RunEnvironmentRecord.from_dict({**ENV, "machine_fingerprint": "m1"})
        write_results(run, tmp_path / f"r{i}")
        paths.append(str(tmp_path / f"r{i}" / "results.json"))
    assert main(["history", "add", *paths, "--history", url]) == 0
    capsys.readouterr()
    md = tmp_path / "changes.md"
    assert main(["history", "changes", "--history", url, "--markdown", str(md)]) == 0
    out = capsys.readouterr().out
    assert "Smallest step each case's history can show" in out and "| after 5 runs | after 10 runs |" in out
    lines = [ln for ln in out.splitlines() if ln.startswith("| ") and "| 12 (12) |" in ln]
    assert len(lines) == len(CASES) and all(ln.count("%") == 3 for ln in lines)  # noise, after 5, after 10
    assert "Smallest step" in md.read_text()
    assert main(["report", paths[-1], "--history", url, "-o", str(tmp_path / "rep")]) == 0
    html = (tmp_path / "rep" / "report.html").read_text()
    assert html.count("p50 step after 5 more") == len(CASES)


def test_under_autocorrelated_noise_it_counts_effective_runs() -> None:
    """AR(1) noise (phi 0.8): ten correlated runs after a step say little more than five, so the step a history can
    show after 10 is not much smaller than after 5, and a step of that size is found about 9 times in 10 (from
    the successive differences, as before be9954b, it said 2.5% after 10 runs where 7.5% after 5: found in 1 of
    30; under the model fitted on the history alone, before #53c, 7.6%: found in 16 of 30)."""
    def ar1(rng, n: int, phi: float = 0.8, cv: float = 0.02) -> np.ndarray:
        e = rng.standard_normal(n) * cv * (1 - phi**2) ** 0.5
        x = np.empty(n)
        x[0] = rng.standard_normal() * cv
        for t in range(1, n):
            x[t] = phi * x[t - 1] + e[t]
        return 100 * (1 + x)

    hits = 0
    for seed in range(8):
        x = ar1(np.random.default_rng(seed), 70)
        five, ten = min_detectable_step(x[:60], 5), min_detectable_step(x[:60], 10)
        assert 0.6 * five < ten <= five, seed
        y = x.copy()
        y[60:] *= 1 + ten
        hits += any(c.kind == "level" and abs(c.index - 60) <= 3 for c in detect(y))
    assert hits >= 7, f"a step of the size it said found in {hits} of 8 histories"


def test_the_detectable_benchmark_says_and_counts(tmp_path, capsys) -> None:
    """harness_suites.benchmarks.detectable (docs/history.md's table): per runs-after the median step said and the
    trials that found it; bad options exit 2."""
    import json

    from harness_suites.benchmarks import detectable

    out = tmp_path / "d.json"
    assert detectable.main(["--phi", "0", "--history", "20", "--after", "5", "--trials", "2", "--json",
                            str(out)]) == 0
    rows = json.loads(out.read_text())
    assert [(r["after"], r["trials"]) for r in rows] == [(5, 2)] and 0 <= rows[0]["found"] <= 2
    assert rows[0]["median_step"] > 0 and "found in" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        detectable.main(["--after", "2"])
    assert e.value.code == 2
