"""tools/fleet_real.py: the real-fleet measurement's table (detection, false flags, the smallest level found in
95% of trials) and its busy neighbour, pinned to a core, started and ended by pid."""

from __future__ import annotations

import importlib.util
import os
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location("fleet_real", ROOT / "tools" / "fleet_real.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _trial(level, slowed_place, dev, others=("ok", "ok", "ok")):
    places = {"n0": slowed_place, **{f"n{i + 1}": p for i, p in enumerate(others)}}
    return {"level": level, "slowed": "n0", "placements": places, "slowed_deviation_pct": dev}


def test_the_table_counts_detections_false_flags_and_the_smallest_level_found(tool):
    trials = ([_trial(0.0, "ok", 0.4, ("ok", "slow", "ok"))] * 10
              + [_trial(0.1, "slow", 6.0)] * 9 + [_trial(0.1, "ok", 3.0)]
              + [_trial(0.2, "slow", 12.0)] * 18 + [_trial(0.2, "not judged", 11.0, ("ok", "not judged", "lost"))]
              + [{"level": 0.2, "slowed": "?-n0", "placements": {}, "timed_out": "no result within 420 s"}]
              + [_trial(0.3, "slow", 20.0)] * 20)
    rows = tool.tabulate(trials, [0.0, 0.1, 0.2, 0.3, 0.5])
    assert [r["level"] for r in rows] == [0.0, 0.1, 0.2, 0.3]  # a level never measured is no row
    zero, low, mid, high = rows
    assert zero["others_flagged"] == 10 and zero["other_node_trials"] == 30  # on the identical fleet: false flags
    assert low["slowed_found"] == 9 and low["slowed_ok"] == 1 and low["slowed_deviation_pct_median"] == 6.0
    assert mid["slowed_found"] == 18 and mid["slowed_not_judged"] == 1 and mid["others_not_judged"] == 1
    assert mid["slowed_other"] == 1 and mid["timed_out"] == 1 and mid["others_lost"] == 1  # never dropped
    text = tool.table_text(rows, "neighbour")
    assert "| 0.1 | 10 | 9/10 (90%) | 0/10 (0%) | 1/10 (10%) | 0 | +6.0% | - | 0/30 | 0 | 0 | 0 |" in text
    assert "| 0.2 | 20 | 18/20 (90%) | 1/20 (5%) | 0/20 (0%) | 1 | +12.0% | - | 0/57 | 1 | 1 | 1 |" in text
    assert "| 0 | 10 | - | - | - | - | - | - | 10/30 | 0 | 0 | 0 |" in text
    assert text.endswith("smallest level found in 95% of trials: 0.3 (the slowed node's p50 +20.0% from its peers, "
                         "median)")
    assert tool.table_text(tool.tabulate(trials[:20], [0.0, 0.1]), "quota").endswith("none of those measured")


def test_the_partial_result_is_a_whole_file_after_every_trial(tool, tmp_path):
    import json

    trials = [dict(_trial(0.2, "slow", 12.0), trial=1)]
    tool.write_partial(tmp_path, {"means": "neighbour"}, trials, [0.0, 0.2], complete=False)
    doc = json.loads((tmp_path / "fleet-real.json").read_text())
    assert doc["complete"] is False and doc["trials"] == trials and doc["rows"][0]["slowed_found"] == 1
    assert not list(tmp_path.glob("*.tmp"))


def test_a_trial_past_its_time_limit_is_stopped(tool):
    hard = []
    t0 = time.monotonic()
    with pytest.raises(tool.TrialTimeout, match="no result within --trial-timeout 0.2 s"):
        with tool.time_limit(0.2, lambda: hard.append(1)):
            time.sleep(5)  # a stuck trial, interrupted by the alarm
    assert time.monotonic() - t0 < 4 and hard == []
    with tool.time_limit(5, lambda: hard.append(1)):
        pass  # a trial that ends in time leaves no alarm behind
    time.sleep(0.1)
    assert hard == []


def test_the_fleet_kills_what_it_started_by_pid(tool):
    import subprocess
    import sys

    import psutil

    fleet = tool.Fleet(4, [0])  # no cluster started: only this process's own children
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert child.pid in fleet.kill()
        assert child.wait(10) is not None
    finally:
        if psutil.pid_exists(child.pid) and child.poll() is None:
            child.kill()


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="CPU affinity is Linux's")
def test_the_neighbour_runs_on_its_core_and_is_ended(tool):
    import psutil

    core = sorted(os.sched_getaffinity(0))[-1]
    slower = tool.Slower("neighbour", 0.05, 10.0)  # 0.5 ms of each 10 ms: light enough for a test
    slower.start(core, [])
    try:
        proc = psutil.Process(slower.proc.pid)
        deadline = time.monotonic() + 10
        while proc.cpu_affinity() != [core] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.cpu_affinity() == [core]
    finally:
        pid = slower.proc.pid
        slower.close()
    assert slower.proc is None and not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie"
    nothing = tool.Slower("neighbour", 0.0, 10.0)
    nothing.start(core, [])
    assert nothing.proc is None  # level 0: the identical fleet, nothing slowed
