"""The burn-in's trend test (harness.gating.burnin) in seeded trials: later rounds slower found, flat rounds not."""

from __future__ import annotations

import numpy as np
import pytest

from harness.gating.burnin import trend


def test_later_rounds_slower_are_found_in_95_percent_of_trials():
    rng = np.random.default_rng(54)
    trials = 200
    found = sum(trend(10.0 * (1 + 0.01 * np.arange(8)) * np.exp(rng.normal(0, 0.005, 8)), "p50").found
                for _ in range(trials))  # 1% slower per round over 8 rounds (+7%), 0.5% noise
    assert found >= 0.95 * trials


def test_flat_rounds_are_not_flagged_in_99_percent_of_trials():
    rng = np.random.default_rng(55)
    trials = 500
    flagged = sum(trend(10.0 * np.exp(rng.normal(0, 0.02, 8)), "p50").found for _ in range(trials))
    assert flagged <= 0.01 * trials


def test_too_few_rounds_and_a_faster_trend():
    t = trend([1.0, 2.0, 3.0, 4.0, 5.0], "p50")
    assert not t.found and t.tau is None and "at least 6" in t.text
    faster = trend([10.0, 9.0, 8.0, 7.0, 6.0, 5.0], "p50")
    assert not faster.found and "better" in faster.text  # a figure that improves is named, not flagged


@pytest.mark.slow  # the e2e tier: four qualify rounds in a subprocess
@pytest.mark.alone  # the planted warming's trend over rounds (pytest -n 2 at load 6-10: "no trend" once)
def test_burn_in_names_a_machine_whose_later_rounds_are_slower(fake_env, tmp_path, fakes):
    import json
    import subprocess
    import sys

    spec = tmp_path / "spec.toml"
    spec.write_text('name = "burn"\n[measure]\nmin_time = 0.1\nmin_iters = 10\n[defaults.require]\n'
                    'p50_ms_max = 1000\n[[case]]\nmodel = "fake-linear"\nruntime = "fake-warming"\nbatch = 1\n')
    out = tmp_path / "q"
    res = subprocess.run([sys.executable, "-m", "harness.cli", "qualify", str(spec), "--burn-in", "1s", "--out",
                          str(out)], capture_output=True, text=True, timeout=600,
                         env={**fake_env, "FAKE_ROUND_FILE": str(tmp_path / "rounds")})
    assert res.returncode == 1, res.stdout + res.stderr
    assert "burn-in round 6" in res.stdout and "a trend, worse over the burn-in" in res.stdout
    assert (out / "certificate.json").is_file(), res.stdout[-3000:] + res.stderr[-3000:]
    doc = json.loads((out / "certificate.json").read_text())
    row = next(r for r in doc["requirements"] if r["requirement"] == "burn_in_stable")
    assert row["status"] == "FAIL" and "latency p50" in row["reason"]
    assert doc["burn_in"]["rounds"] == 6 and len(doc["burn_in"]["machine"]) == 6
    assert doc["burn_in"]["machine"][0]["start"]["cpu_freq_mhz"] is None or doc["burn_in"]["machine"][0]["start"][
        "cpu_freq_mhz"] > 0
    assert "Burn-in: 6 rounds" in (out / "certificate.html").read_text()
