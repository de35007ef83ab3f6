"""Audits inside the timed run and golden outputs (harness.workloads.forward.audit) on fake runtimes: a caching
runtime, one that returns stale outputs when timed, one that flips an output element in 1 of K calls; honest
runtimes pass."""

from __future__ import annotations

import numpy as np
import pytest

from harness.data import make_feed
from harness.model import get_model
from harness.precision import Precision
from harness.runtimes import RuntimeOptions, get_runtime
from harness.workloads.forward import audit
from harness.results.stored import BlockContention


def _runtime(name: str):
    rt = get_runtime(name)(get_model("fake-linear"), Precision.FP32, RuntimeOptions(threads=1))
    rt.__enter__()
    return rt


def _feed(seed: int = 0):
    return make_feed(get_model("fake-linear"), {"batch": 4}, seed)


def _audit(name: str):
    rt = _runtime(name)
    feed = _feed()
    last = [None]
    call = audit.keep_last(rt.bind(feed), last)
    for _ in range(3):
        call()
    try:
        return audit.run_audits(rt, feed, lambda i: _feed(1 + i), last[0])
    finally:
        rt.__exit__(None, None, None)


def _by_name(result):
    return {c["name"]: c for c in result["checks"]}


def test_an_honest_runtime_passes_every_audit(fakes):
    for name in ("fake-ok", "fake-2ms"):
        result = _audit(name)
        checks = _by_name(result)
        assert result["passed"], result
        assert set(checks) == {"timed output", "caching", "timed outputs on distinct inputs"}
        assert result["rule"] == "bitwise" and "bound +10%" in checks["caching"]["detail"]


def test_a_runtime_that_caches_repeated_inputs_is_found_in_every_trial(fakes):
    trials = 20
    found = 0
    for _ in range(trials):
        result = _audit("fake-cache")
        found += not result["passed"] and _by_name(result)["caching"]["passed"] is False
    assert found >= 0.95 * trials
    assert "caching suspected" in _by_name(result)["caching"]["detail"]


def test_a_runtime_that_returns_stale_outputs_when_timed_is_found(fakes):
    result = _audit("fake-stale")
    checks = _by_name(result)
    assert not result["passed"] and checks["timed outputs on distinct inputs"]["passed"] is False
    assert "stale or skipped" in checks["timed outputs on distinct inputs"]["detail"]
    assert checks["timed output"]["passed"]  # on the case's own input the stale answer happens to be right


def test_first_difference_names_output_index_and_magnitude():
    a = {"y": np.arange(6, dtype=np.float32).reshape(2, 3)}
    b = {"y": a["y"].copy()}
    assert audit.first_difference(a, b, {}) is None
    b["y"][1, 2] += 0.5
    d = audit.first_difference(b, a, {})
    assert (d.output, d.index, d.magnitude) == ("y", (1, 2), 0.5)
    assert "y[1, 2] = 5.5, expected 5" in d.text()
    assert audit.first_difference(b, a, {"y": 0.6}) is None  # inside a measured band
    assert audit.first_difference({"y": a["y"].astype(np.float64)}, a, {}).magnitude == float("inf")


def test_golden_recorded_then_a_flipping_node_found_in_95_percent_of_trials(fakes, tmp_path, monkeypatch):
    monkeypatch.delenv("FAKE_FLIP_K", raising=False)
    rt = _runtime("fake-flip")
    record = audit.record_golden(rt, _feed(), tmp_path)
    rt.__exit__(None, None, None)
    assert record["rule"] == "bitwise" and (tmp_path / f"{record['sha256']}.npz").is_file()
    golden = audit.load_golden(tmp_path, record)
    monkeypatch.setenv("FAKE_FLIP_K", "10")  # one element wrong in 1 of 10 calls
    trials, found = 40, 0
    for seed in range(trials):
        monkeypatch.setenv("FAKE_FLIP_SEED", str(seed))
        rt = _runtime("fake-flip")
        result = audit.check_golden(rt, _feed(), golden, record)
        rt.__exit__(None, None, None)
        if result["passed"] is False:
            found += 1
            assert result["difference"]["index"][-1] == 3 and result["difference"]["magnitude"] == pytest.approx(1.0, rel=1e-6)
            assert result["kind"] in ("transient", "persistent") and "y[" in result["detail"]
    assert found >= 0.95 * trials
    monkeypatch.setenv("FAKE_FLIP_K", "0")
    rt = _runtime("fake-flip")
    assert audit.check_golden(rt, _feed(), golden, record)["passed"] is True
    assert audit.check_golden(rt, _feed(5), golden, record)["passed"] is None  # another feed: not compared
    rt.__exit__(None, None, None)
    (tmp_path / f"{record['sha256']}.npz").write_bytes(b"edited")
    with pytest.raises(ValueError, match="sha256 differs"):
        audit.load_golden(tmp_path, record)


def test_generation_audit_checks_first_token_counts_and_timed_tokens():
    from harness.workloads.generate.loop import Generation

    tokens = np.array([[5, 7, 9, 2]])
    good = Generation(tokens.copy(), 10, [1, 1, 1])
    result = audit.generation_audit(good, [Generation(tokens.copy(), 9, [1, 1, 1]) for _ in range(3)], 1, 4)
    assert result["passed"] and [c["name"] for c in result["checks"]] == ["first token", "token count", "timed tokens"]
    wrong_first = Generation(np.array([[6, 7, 9, 2]]), 9, [1, 1, 1])
    short = Generation(np.array([[5, 7, 9]]), 9, [1, 1])
    stale = Generation(np.array([[5, 7, 1, 1]]), 9, [1, 1, 1])
    for bad, name, text in ((wrong_first, "first token", "first token [6] differs from the untimed [5]"),
                            (short, "token count", "shape [1, 3] in 2 steps; counted 1 x 4"),
                            (stale, "timed tokens", "at position 2")):
        result = audit.generation_audit(good, [good, bad], 1, 4)
        failed = [c for c in result["checks"] if c["passed"] is False]
        assert not result["passed"] and failed[0]["name"] == name and text in failed[0]["detail"], failed


def test_a_caching_flag_in_contended_rounds_is_not_judged(fakes):
    class Contended:
        def start(self):
            pass

        def stop(self):
            return BlockContention(contended=True, cause="run-queue wait 60%")

    rt = _runtime("fake-cache")
    try:
        result = audit.run_audits(rt, _feed(), lambda i: _feed(1 + i), None, probe=Contended())
    finally:
        rt.__exit__(None, None, None)
    caching = _by_name(result)["caching"]
    assert caching["passed"] is None and "not judged, the rounds were contended (run-queue wait 60%)" in caching["detail"]
    assert result["passed"]  # not judged is not a failure of the case; qualify's audit row says INCONCLUSIVE
