"""A change point is reported as a regression only when an interleaved A/B of both sides agrees (fakes only)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

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

ORT = sorted(c.id for c in CASES if c.runtime == "ort-cpu")


def _history(tmp_path: Path, artifacts: dict[int, str] | None = None):
    """12 runs at 1.0, then 5 with the ort-cpu cases 30% slower; run i's cases name artifacts[i] as model file."""
    url = f"sqlite:///{tmp_path / 'h.db'}"
    h = open_history(url)
    for i, level in enumerate([1.0] * 12 + [1.3] * 5):
        run = make_run(i, n=60, scale={"ort-cpu": level})
        run.run_id = f"run-{i:02d}"
        run.started_at = f"2026-11-01T{i:02d}:00:00+00:00"
        run.environment = {**ENV, "machine_fingerprint": "m1", "git": {"commit": f"c{i:039d}", "dirty": False}}
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
