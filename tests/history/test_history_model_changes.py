"""A case's history across a model change: stored results of two model fingerprints under one case id are one series
marked at the run where the fingerprint changed, and a change point there is the model's ("model changed"), never a
regression (fakes and synthetic runs only)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from gating_synth import CASES, ENV, make_run

from harness.cli import main
from harness.history import open_history
from harness.history.confirm import MODEL_CHANGED, Confirmation, apply_confirmation
from harness.history.store import Point, model_changes
from harness.history.text import changes_markdown, changes_rows, findings, show_lines
from harness.results import write_results
from harness.results.stored import RunEnvironmentRecord

ORT = sorted(c.id for c in CASES if c.runtime == "ort-cpu")
OLD, NEW = "a" * 64, "b" * 64


def _record(tmp_path: Path, url: str, fingerprints: list[str | None], levels: list[float]) -> None:
    """Runs i = 0.. with the ort-cpu cases at levels[i] and their model fingerprint fingerprints[i] (the torch-cpu
    cases keep theirs); each stored as results.json and recorded from it."""
    h = open_history(url)
    try:
        for i, (fp, level) in enumerate(zip(fingerprints, levels)):
            run = make_run(i, n=60, scale={"ort-cpu": level})
            run.run_id = f"run-{i:02d}"
            run.started_at = f"2026-11-01T{i:02d}:00:00+00:00"
            run.environment = RunEnvironmentRecord.from_dict({**ENV, "machine_fingerprint": "m1", "git": {"commit": f"c{i:039d}", "dirty": False}})
            for c in run.cases:
                if c.case.runtime == "ort-cpu":
                    c.model_fingerprint = fp
            write_results(run, tmp_path / f"r{i}")
            h.add(run, str(tmp_path / f"r{i}" / "results.json"))
    finally:
        h.close()


def _args(**kw) -> argparse.Namespace:
    base = {"metric": "p50", "max_pvalue": None, "min_change": None, "last": None, "confirm": False}
    return argparse.Namespace(**(base | kw))


def test_the_run_where_the_fingerprint_changed_is_marked_and_its_step_is_the_models(db_url: str, tmp_path) -> None:
    """12 runs of one model file, then 5 of another 30% slower: one series per case (the case id is the same), the
    change marked at run 12 with both fingerprints, and the +30% step there reported "model changed", not a
    regression. The same step with one fingerprint throughout is a regression (the control)."""
    _record(tmp_path, db_url, [OLD] * 12 + [NEW] * 5, [1.0] * 12 + [1.3] * 5)
    h = open_history(db_url)
    try:
        series = {s.case: s for s in h.series(None, "p50")}
        for key in ORT:
            s = series[key]
            assert [(m.index, m.before, m.after) for m in s.model_changes] == [(12, OLD, NEW)]
            assert [p.model for p in s.points] == [OLD] * 12 + [NEW] * 5
            assert [c.index for c in s.changes if c.kind == "level"] == [12]
            text = "\n".join(show_lines(s))
            assert "2 model fingerprints, changed at 1 run (marked)" in text
            assert "run-12" in text and f"(model changed); model changed: fingerprint {OLD[:12]} -> {NEW[:12]}" in text
        assert not any(s.model_changes for k, s in series.items() if k not in ORT)
        rows = changes_rows(h, _args())
        moved = [r for r in rows if r["case"] in ORT]
        assert moved and {r["reported"] for r in moved} == {MODEL_CHANGED}
        assert all(r["direction"] == "regression" and r["model_changed"]["before"] == OLD
                   and r["model_changed"]["first_run"] == "run-12" for r in moved)
        md = changes_markdown(rows, "p50")
        assert f"(model changed: worse, fingerprint {OLD[:12]} -> {NEW[:12]})" in md
        assert all(f["reported"] == [MODEL_CHANGED] for f in findings(rows))
    finally:
        h.close()


def test_the_same_step_with_one_model_is_a_regression(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    _record(tmp_path, url, [OLD] * 17, [1.0] * 12 + [1.3] * 5)
    h = open_history(url)
    try:
        rows = [r for r in changes_rows(h, _args()) if r["case"] in ORT]
        assert rows and {r["reported"] for r in rows} == {"regression"}
        assert not any("model_changed" in r for r in rows)
    finally:
        h.close()


def test_history_changes_and_show_say_it_and_fail_on_regression_does_not_count_it(tmp_path, capsys) -> None:
    """Through the CLI: `show` marks the run, `changes` lists the step as "model changed" with a Model changes
    section; --fail-on regression exits 0 (no regression), --fail-on any 1 (a change point there is)."""
    url = f"sqlite:///{tmp_path / 'h.db'}"
    _record(tmp_path, url, [OLD] * 12 + [NEW] * 5, [1.0] * 12 + [1.3] * 5)
    assert main(["history", "show", ORT[0], "--history", url]) == 0
    out = capsys.readouterr().out
    assert f"model changed: fingerprint {OLD[:12]} -> {NEW[:12]}" in out
    assert main(["history", "changes", "--history", url, "--fail-on", "regression"]) == 0
    out = capsys.readouterr().out
    assert "Model changes: 4" in out and "model changed" in out and "(regression)" not in out
    assert main(["history", "changes", "--history", url, "--fail-on", "any"]) == 1
    capsys.readouterr()
    assert main(["history", "show", ORT[0], "--history", url, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)[0]
    assert shown["model_changes"] == [{"run": "run-12", "before": OLD, "after": NEW}]
    assert shown["changes"][0]["model_changed"]["after"] == NEW


def test_a_model_change_without_a_step_is_marked_and_noise_is_measured_on_the_new_model(tmp_path) -> None:
    """The model changed and its speed did not: the run is marked, no change point is made up, and the smallest
    detectable step is read from the runs of the current model."""
    from harness.history.store import detectable

    url = f"sqlite:///{tmp_path / 'h.db'}"
    _record(tmp_path, url, [OLD] * 12 + [NEW] * 6, [1.0] * 18)
    h = open_history(url)
    try:
        s = next(s for s in h.series([ORT[0]]))
        assert [m.index for m in s.model_changes] == [12] and s.changes == []
        assert detectable(s)["level_runs"] == 6
        assert changes_rows(h, _args()) == []
    finally:
        h.close()


def test_runs_without_a_fingerprint_are_never_a_change_and_widen_the_span() -> None:
    """Unknown (None: recorded before fingerprints were) is never a change; a step anywhere between the last run of
    the old model and the first of the new one is attributed to the change."""
    pts = [Point(f"r{i}", "", None, 1.0, fp) for i, fp in enumerate([None, OLD, OLD, None, None, NEW, None, NEW])]
    (m,) = model_changes(pts)
    assert (m.since, m.index, m.before, m.after) == (3, 5, OLD, NEW)
    assert [i for i in range(8) if m.covers(i)] == [3, 4, 5]
    assert model_changes([Point("r", "", None, 1.0, None)] * 3) == []


def test_a_model_changed_slowdown_still_asks_the_confirmer_and_stays_the_models() -> None:
    """--confirm re-measures the two model files of a model-changed slowdown (that A/B is the change itself); what
    it says goes in the confirmation, and the row stays "model changed" either way."""
    row = {"case": "c", "direction": "regression", "before_run": "a", "after_run": "b",
           "model_changed": {"before": OLD, "after": NEW}}
    asked: list[str] = []
    out = apply_confirmation([row], lambda r: asked.append(r["case"]) or Confirmation("confirmed", "A/B: regressed"))
    assert asked == ["c"] and out[0]["reported"] == MODEL_CHANGED and out[0]["confirmation"] == "confirmed"
    faster = apply_confirmation([{**row, "direction": "improvement"}], lambda r: pytest.fail("not asked"))
    assert faster[0]["reported"] == MODEL_CHANGED


def test_an_in_place_model_change_says_its_old_file_cannot_be_re_measured(tmp_path) -> None:
    from harness.history.confirm import AbConfirmer

    model = tmp_path / "m.onnx"
    model.write_bytes(b"B")
    for i in (0, 1):
        (tmp_path / f"r{i}").mkdir()
        (tmp_path / f"r{i}" / "results.json").write_text(json.dumps(
            {"cases": [{"case": {"model": "m", "runtime": "ort-cpu", "precision": "fp32", "batch": 1, "seq": None,
                                 "device": "cpu"}, "artifact": str(model)}]}))
    from harness.results.schema import CaseId

    key = CaseId("m", "ort-cpu", "fp32", 1, None, "cpu").id
    confirmer = AbConfirmer({"a": str(tmp_path / "r0"), "b": str(tmp_path / "r1")},
                            {key: ("m", "ort-cpu", "fp32", 1, None)}, runner=lambda cmd: pytest.fail("not run"))
    c = confirmer({"case": key, "before_run": "a", "after_run": "b", "model_changed": {"before": OLD, "after": NEW}})
    assert c.state == "unconfirmed" and "changed in place" in c.reason and OLD[:12] in c.reason


def test_the_migration_fills_the_fingerprints_of_runs_recorded_before_it(tmp_path) -> None:
    """A history recorded before migration 0002 (no fingerprint column): the upgrade reads each run's results.json
    (runs.source) for its cases' fingerprints, so the old runs' model change is marked too; a run whose file is
    gone keeps none (unknown, never a change)."""
    import sqlalchemy as sa
    from alembic import command
    from alembic.config import Config

    from harness.history.store import MIGRATIONS

    url = f"sqlite:///{tmp_path / 'h.db'}"
    _record(tmp_path, url, [OLD] * 12 + [NEW] * 5, [1.0] * 12 + [1.3] * 5)
    (tmp_path / "r0" / "results.json").unlink()
    engine = sa.create_engine(url)
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0001")
    with engine.connect() as conn:
        assert "model_fingerprint" not in {c["name"] for c in sa.inspect(conn).get_columns("case_results")}
    engine.dispose()
    h = open_history(url)  # upgraded to head again: the column back, filled from the files
    try:
        s = next(s for s in h.series([ORT[0]]))
        assert [p.model for p in s.points] == [None] + [OLD] * 11 + [NEW] * 5
        assert [m.index for m in s.model_changes] == [12]
    finally:
        h.close()
