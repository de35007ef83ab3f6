"""A change point is reported as a regression only when an interleaved A/B of both sides agrees (fakes only)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest
from gating_synth import CASES, ENV, make_run

from harness.history import open_history
from harness.history.confirm import (
    CONFIRMED,
    DISAGREES,
    UNCONFIRMED,
    AbConfirmer,
    Confirmation,
    apply_confirmation,
    case_artifact,
)
from harness.history.text import changes_markdown, changes_rows
from harness.results import write_results
from harness.results.stored import RunEnvironmentRecord

ORT = sorted(c.id for c in CASES if c.runtime == "ort-cpu")


def _history(tmp_path: Path, artifacts: dict[int, str] | None = None):
    """12 runs at 1.0, then 5 with the ort-cpu cases 30% slower; run i's cases name artifacts[i] as model file."""
    url = f"sqlite:///{tmp_path / 'h.db'}"
    h = open_history(url)
    for i, level in enumerate([1.0] * 12 + [1.3] * 5):
        run = make_run(i, n=60, scale={"ort-cpu": level})
        run.run_id = f"run-{i:02d}"
        run.started_at = f"2026-11-01T{i:02d}:00:00+00:00"
        run.environment = RunEnvironmentRecord.from_dict({**ENV, "machine_fingerprint": "m1", "git": {"commit": f"c{i:039d}", "dirty": False}})
        for c in run.cases:
            c.artifact = (artifacts or {}).get(i)
        write_results(run, tmp_path / f"r{i}")
        h.add(run, str(tmp_path / f"r{i}" / "results.json"))
    return h


def _args(**kw) -> argparse.Namespace:
    base = {"metric": "p50", "max_pvalue": None, "min_change": None, "last": None, "confirm": False}
    return argparse.Namespace(**(base | kw))


def _row(direction: str = "regression") -> dict:
    return {"case": "m-ort-cpu-fp32-b1", "direction": direction, "before_run": "a", "after_run": "b"}


def test_an_ab_that_disagrees_makes_it_unconfirmed_not_a_regression(tmp_path) -> None:
    h = _history(tmp_path)
    try:
        asked: list[str] = []

        def disagrees(row):
            asked.append(row["case"])
            return Confirmation(DISAGREES, "A/B: pass")

        rows = changes_rows(h, _args(), confirmer=disagrees)
    finally:
        h.close()
    regress = [r for r in rows if r["direction"] == "regression"]
    assert sorted(r["case"] for r in regress) == ORT and sorted(asked) == ORT  # every regression was asked
    assert {(r["reported"], r["confirmation"], r["confirmation_reason"]) for r in regress} == \
        {("unconfirmed", UNCONFIRMED, "A/B: pass")}
    md = changes_markdown(rows, "p50")
    assert "(regression)" not in md and "(unconfirmed)" in md and "unconfirmed: A/B: pass" in md


def test_an_ab_that_agrees_confirms_it_and_one_that_cannot_run_leaves_it_unconfirmed(tmp_path) -> None:
    h = _history(tmp_path)
    try:
        agreed = changes_rows(h, _args(), confirmer=lambda row: Confirmation(CONFIRMED, "A/B: regressed"))
        cannot = changes_rows(h, _args(), confirmer=lambda row: Confirmation(UNCONFIRMED, "no model files"))
        default = changes_rows(h, _args())
    finally:
        h.close()
    assert {(r["reported"], r["confirmation"]) for r in agreed} == {("regression", CONFIRMED)}
    assert {(r["reported"], r["confirmation"]) for r in cannot} == {("regression", UNCONFIRMED)}
    assert {r["confirmation"] for r in default} == {UNCONFIRMED}
    assert all("not re-measured" in r["confirmation_reason"] for r in default)


def test_only_regressions_ask_and_a_failing_confirmer_costs_nothing() -> None:
    def broken(row):
        raise OSError("disk gone")

    rows = apply_confirmation([_row("improvement"), _row("noisier"), _row()], broken)
    assert [(r["reported"], r["confirmation"]) for r in rows] == \
        [("improvement", None), ("noisier", None), ("regression", UNCONFIRMED)]
    assert "the A/B failed: OSError: disk gone" in rows[2]["confirmation_reason"]


def test_fail_on_regression_does_not_count_an_unconfirmed_one(tmp_path, capsys, monkeypatch) -> None:
    from harness.history import text

    h = _history(tmp_path)
    args = _args(history_command="changes", json=True, markdown=None, fail_on="regression")
    monkeypatch.setattr(text, "not_remeasured", lambda row: Confirmation(DISAGREES, "A/B: pass"))
    try:
        assert text.history_command(h, args) == 0
        monkeypatch.setattr(text, "not_remeasured", lambda row: Confirmation(UNCONFIRMED, "cannot"))
        assert text.history_command(h, args) == 1  # a regression of the history nobody could re-measure
    finally:
        h.close()
    capsys.readouterr()


def _fake_ab(verdict: str | None, commands: list[list[str]]):
    """A runner that writes what `harness ab --out DIR` writes: results.json with the case's A/B verdict."""

    def runner(cmd):
        commands.append(cmd)
        out = Path(cmd[cmd.index("--out") + 1])
        out.mkdir(parents=True)
        if verdict is not None:
            case = {"case": {"model": "a"}, "status": "passed", "ab": {"verdict": verdict, "reason": "B/A 1.31"}}
            (out / "results.json").write_text(json.dumps({"cases": [case]}))
        return 1 if verdict == "regressed" else 0

    return runner


def test_ab_confirmer_runs_harness_ab_on_the_two_model_files(tmp_path) -> None:
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    a.write_bytes(b"A")
    b.write_bytes(b"B")
    h = _history(tmp_path, {i: str(a if i < 12 else b) for i in range(17)})
    try:
        sources = {r["run_id"]: r["source"] for r in h.runs()}
        parts = h.case_parts()
        for verdict, reported, state, why in (
                ("regressed", "regression", CONFIRMED, "regressed (B/A 1.31)"),
                ("pass", "unconfirmed", UNCONFIRMED, "pass (B/A 1.31)"),
                ("noise", "unconfirmed", UNCONFIRMED, "noise"),
                ("inconclusive", "regression", UNCONFIRMED, "could not judge: inconclusive"),
                (None, "regression", UNCONFIRMED, "left no verdict (`harness ab` exit 0)")):
            commands: list[list[str]] = []
            rows = changes_rows(h, _args(), confirmer=AbConfirmer(sources, parts, _fake_ab(verdict, commands),
                                                                  workdir=tmp_path))
            regress = [r for r in rows if r["direction"] == "regression"]
            assert {(r["reported"], r["confirmation"]) for r in regress} == {(reported, state)}, verdict
            assert all(why in r["confirmation_reason"] for r in regress), regress[0]["confirmation_reason"]
            assert len(commands) == len(ORT)
            cmd = commands[0]
            assert cmd[:6] == [sys.executable, "-m", "harness.cli", "ab", str(a), str(b)]
            assert cmd[cmd.index("--runtimes") + 1] == "ort-cpu" and "--models" not in cmd
        assert not list(tmp_path.glob("harness-confirm-*"))  # the A/B's folders are removed
    finally:
        h.close()


def test_ab_confirmer_says_why_it_cannot_re_measure(tmp_path) -> None:
    a = tmp_path / "a.onnx"
    a.write_bytes(b"A")
    h = _history(tmp_path, {i: str(a) for i in range(17)})  # the same file on both sides
    try:
        confirmer = AbConfirmer({r["run_id"]: r["source"] for r in h.runs()}, h.case_parts(),
                                runner=lambda cmd: (_ for _ in ()).throw(AssertionError("must not run")))
        rows = [r for r in changes_rows(h, _args(), confirmer=confirmer) if r["direction"] == "regression"]
        assert rows and all("same model file" in r["confirmation_reason"] for r in rows)
        assert {r["reported"] for r in rows} == {"regression"}
    finally:
        h.close()
    gone = tmp_path / "r3" / "results.json"
    data = json.loads(gone.read_text())
    data["cases"][0]["artifact"] = str(tmp_path / "deleted.onnx")
    gone.write_text(json.dumps(data))
    from harness.results.schema import CaseId

    cid = CaseId.from_dict(data["cases"][0]["case"]).id
    assert case_artifact(str(gone), cid) == (None, f"its model file {tmp_path / 'deleted.onnx'} is no longer on disk")
    assert case_artifact(None, cid)[1] == "the run was recorded without its results.json path"
    assert "no result of the case" in case_artifact(str(gone), "nope-b1")[1]
    data["cases"].insert(0, {**data["cases"][0], "case": {**data["cases"][0]["case"], "batch": "4"}})
    gone.write_text(json.dumps(data))  # a case id the reader refuses is passed over, never an error
    assert case_artifact(str(gone), cid) == (None, f"its model file {tmp_path / 'deleted.onnx'} is no longer on disk")


def _relu(path: Path) -> None:
    """A one-node ONNX model, x [batch, 8] -> y: what the fake runtimes feed and answer."""
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), path)


@pytest.mark.e2e
@pytest.mark.alone  # the signal must land while the A/B runs (a few seconds of a fake-slow A/A)
@pytest.mark.parametrize("sig, code", [("SIGTERM", 143), ("SIGINT", 130)])
def test_a_signal_stops_confirm_ends_its_ab_child_and_removes_its_folder(tmp_path: Path, fake_env, sig: str,
                                                                         code: int) -> None:
    """SIGTERM to `history changes --confirm` orphaned its `harness ab` child for 58 s and left a 70 MB temporary
    folder. Now it stops as `harness run` does: the signal passed on to the A/B (which ends its worker), every
    process of it gone, its folder removed, the change points printed and written with what was re-measured
    (here nothing: "interrupted"), exit 143 (130 for SIGINT)."""
    import os
    import signal
    import subprocess
    import time

    import psutil

    from harness.results.schema import CaseId

    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    _relu(a)
    _relu(b)
    case = CaseId("a", "fake-slow", "fp32", 1, None, "cpu")  # 50 ms a call: the A/B runs for a while
    url = f"sqlite:///{tmp_path / 'h.db'}"
    h = open_history(url)
    try:
        for i, level in enumerate([1.0] * 12 + [1.3] * 5):
            run = make_run(i, n=60, scale={"fake-slow": level}, cases=[case])
            run.run_id, run.started_at = f"run-{i:02d}", f"2026-11-01T{i:02d}:00:00+00:00"
            run.environment = RunEnvironmentRecord.from_dict({**ENV, "machine_fingerprint": "m1", "git": {"commit": f"c{i:039d}", "dirty": False}})
            run.cases[0].artifact = str(a if i < 12 else b)
            write_results(run, tmp_path / f"r{i}")
            h.add(run, str(tmp_path / f"r{i}" / "results.json"))
    finally:
        h.close()
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    md = tmp_path / "changes.md"
    proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "history", "changes", "--confirm", "--history", url,
                             "--markdown", str(md), "--fail-on", "regression"],
                            env=dict(fake_env, TMPDIR=str(tmp)), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    family: list[psutil.Process] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        # the A/B has started its worker: a child with a child of its own, and its folder in $TMPDIR
        family = psutil.Process(proc.pid).children(recursive=True)
        if len(family) >= 2 and list(tmp.glob("harness-confirm-*")):
            break
        time.sleep(0.2)
    assert len(family) >= 2 and proc.poll() is None, "the A/B did not start"
    time.sleep(0.2)  # its worker started (its handlers are in place); a quiet machine finishes this A/A in ~1 s
    family = psutil.Process(proc.pid).children(recursive=True)
    os.kill(proc.pid, getattr(signal, sig))
    stdout, stderr = proc.communicate(timeout=90)
    assert proc.returncode == code, (proc.returncode, stdout[-2000:], stderr[-2000:])
    assert "Traceback" not in stderr, stderr[-3000:]
    assert f"history changes: interrupted by {sig}: 0 of 1 regression(s) re-measured" in stderr
    assert f"not re-measured: interrupted by {sig}" in stdout and f"not re-measured: interrupted by {sig}" in md.read_text()
    gone, alive = psutil.wait_procs(family, timeout=10)
    assert not alive, [p.cmdline() for p in alive]
    assert not list(tmp.glob("harness-confirm-*")), list(tmp.iterdir())
