"""The history database on SQLite and a real PostgreSQL server: migrations, add, list, series, refusals."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa
from gating_synth import CASES, ENV, make_run

from harness.cli import main
from harness.history import open_history
from harness.history.store import HistoryError, default_url, history_url
from harness.results import write_results
from harness.results.stored import RunEnvironmentRecord


def _run(i: int, factor: float = 1.0, machine: str = "m1"):
    run = make_run(i, n=60, scale={"ort-cpu": factor})
    run.run_id = f"run-{i:02d}"
    run.started_at = f"2026-11-{1 + i // 24:02d}T{i % 24:02d}:00:00+00:00"
    run.environment = RunEnvironmentRecord.from_dict({**ENV, "machine_fingerprint": machine, "git": {"commit": f"c{i:039d}", "dirty": False}})
    return run


def test_migrations_create_the_schema_on_an_empty_database(db_url: str) -> None:
    h = open_history(db_url)
    try:
        insp = sa.inspect(h.engine)
        assert {"runs", "cases", "case_results", "alembic_version"} <= set(insp.get_table_names())
        with h.engine.connect() as c:
            assert c.execute(sa.text("select version_num from alembic_version")).scalar() == "0002"
        assert h.runs() == []
    finally:
        h.close()
    open_history(db_url).close()  # a second open finds the database at head and changes nothing


def test_add_list_and_series(db_url: str) -> None:
    h = open_history(db_url)
    try:
        for i in range(3):
            assert h.add(_run(i), f"r{i}.json") == len(CASES)
        h.add(_run(0, machine="m2"), "other.json")  # the same run id on another machine is another run
        runs = h.runs()
        assert [r["run_id"] for r in runs] == ["run-00", "run-00", "run-01", "run-02"]
        assert runs[-1]["commit"] == f"c{2:039d}" and runs[-1]["measured"] == len(CASES)
        series = h.series([CASES[0].id], "p50")
        assert {s.fingerprint for s in series} == {"m1", "m2"}
        m1 = next(s for s in series if s.fingerprint == "m1")
        assert [p.run_id for p in m1.points] == ["run-00", "run-01", "run-02"]
        assert m1.points[0].value == pytest.approx(_run(0).cases[0].latency.p50_ms)
        thr = h.series([CASES[0].id], "throughput")[0]
        assert thr.points[0].value == pytest.approx(_run(0).cases[0].throughput_sps)
        with pytest.raises(HistoryError, match="already recorded"):
            h.add(_run(1), "again.json")
        assert len(h.runs()) == 4  # the refused run left nothing behind
    finally:
        h.close()


def test_broken_cases_are_recorded_without_figures(db_url: str) -> None:
    from gating_synth import case_result

    run = _run(5)
    run.cases[1] = case_result(CASES[1], status="crashed")
    h = open_history(db_url)
    try:
        h.add(run)
        assert h.runs()[0]["measured"] == len(CASES) - 1
        assert h.series([CASES[1].id]) == []
    finally:
        h.close()


def test_urls(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.delenv("HARNESS_HISTORY", raising=False)
    assert default_url().startswith("sqlite:///") and default_url().endswith("/harness/history.db")
    assert history_url(None) == default_url()
    monkeypatch.setenv("HARNESS_HISTORY", "postgresql+psycopg://u:secret@db/h")
    assert history_url(None) == "postgresql+psycopg://u:secret@db/h"
    assert history_url(str(tmp_path / "h.db")) == f"sqlite:///{tmp_path / 'h.db'}"
    with pytest.raises(HistoryError, match=r"u:\*\*\*@127.0.0.1:1/h: cannot open") as err:
        open_history("postgresql+psycopg://u:secret@127.0.0.1:1/h")  # nothing listens: one line, no password
    assert "secret" not in str(err.value) and "\n" not in str(err.value)


def test_cli_add_ls_show_changes(db_url: str, tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = []
    for i in range(24):
        write_results(_run(i, 1.10 if i >= 12 else 1.0), tmp_path / f"r{i}")
        paths.append(str(tmp_path / f"r{i}" / "results.json"))
    assert main(["history", "add", *paths, "--history", db_url]) == 0
    assert capsys.readouterr().out.count("recorded run") == 24
    assert main(["history", "ls", "--history", db_url, "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 24
    case = next(c for c in CASES if c.runtime == "ort-cpu").id
    assert main(["history", "show", case, "--history", db_url]) == 0
    out = capsys.readouterr().out
    assert "24 runs" in out and "<- change +" in out
    assert main(["history", "changes", "--history", db_url, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["case"] for r in rows} == {c.id for c in CASES if c.runtime == "ort-cpu"}
    for r in rows:
        assert (r["before_run"], r["after_run"]) == ("run-11", "run-12")
        assert r["change_percent"] == pytest.approx(10.0, abs=2.0) and r["direction"] == "regression"
    assert main(["report", paths[-1], "--history", db_url, "-o", str(tmp_path / "rep")]) == 0
    html = (tmp_path / "rep" / "report.html").read_text()
    assert html.count("p50 and p99 over 24 recorded runs</title>") == len(CASES)
    assert html.count("change point: +") == len(rows)
    md = tmp_path / "changes.md"
    assert main(["history", "changes", "--history", db_url, "--last", "3", "--markdown", str(md)]) == 0
    assert "No change points" in capsys.readouterr().out and "No change points" in md.read_text()
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema_version": 2, "run_id": "x"')
    assert main(["history", "add", paths[0], str(bad), "--history", db_url]) == 2  # checked before recording
    assert f"harness history: error: {bad}:" in capsys.readouterr().err
    assert main(["history", "show", "nope-b1", "--history", db_url]) == 2
    assert "no measured figures of case 'nope-b1'" in capsys.readouterr().err


def _stepped_runs(tmp_path, levels):
    paths = []
    for i, level in enumerate(levels):
        write_results(_run(i, level), tmp_path / f"r{i}")
        paths.append(str(tmp_path / f"r{i}" / "results.json"))
    return paths


def test_changes_fail_on_a_recent_regression_and_survive_a_recovery(tmp_path, capsys) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    paths = _stepped_runs(tmp_path, [1.0] * 12 + [1.3] * 5)
    assert main(["history", "add", *paths, "--history", url]) == 0
    assert main(["history", "changes", "--history", url, "--last", "5", "--fail-on", "regression"]) == 1
    err = capsys.readouterr().err
    assert "1 finding with a regression in the newest 5 runs" in err  # the cases moved at one run: one finding
    assert main(["history", "changes", "--history", url, "--last", "5", "--fail-on", "improvement"]) == 0
    assert main(["history", "changes", "--history", url, "--last", "4", "--fail-on", "regression"]) == 0
    assert main(["history", "changes", "--history", url]) == 0  # without --fail-on: always 0
    back = tmp_path / "back"
    write_results(_run(17, 1.0), back)
    assert main(["history", "add", str(back / "results.json"), "--history", url]) == 0
    capsys.readouterr()
    assert main(["history", "changes", "--history", url, "--json", "--last", "6", "--fail-on", "regression"]) == 1
    rows = json.loads(capsys.readouterr().out)
    ort = {c.id for c in CASES if c.runtime == "ort-cpu"}
    assert {(r["case"], r["after_run"], r["direction"]) for r in rows} == \
        {(c, "run-12", "regression") for c in ort} | {(c, "run-17", "improvement") for c in ort}


def test_ls_has_a_header_and_cases_are_listed(tmp_path, capsys) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    assert main(["history", "add", *_stepped_runs(tmp_path, [1.0, 1.0]), "--history", url]) == 0
    capsys.readouterr()
    assert main(["history", "ls", "--history", url]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["run", "started", "commit", "measured", "machine"] and len(lines) == 3
    for argv in (["history", "cases"], ["history", "show"]):
        assert main([*argv, "--history", url]) == 0
        out = capsys.readouterr().out
        assert f"{len(CASES)} cases recorded" in out and all(f"  {c.id}" in out for c in CASES)
    assert main(["history", "cases", "--history", url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == sorted(c.id for c in CASES)


def test_a_read_only_database_is_one_line_exit_2(tmp_path, capsys) -> None:
    db = tmp_path / "h.db"
    paths = _stepped_runs(tmp_path, [1.0, 1.0])
    assert main(["history", "add", paths[0], "--history", str(db)]) == 0
    capsys.readouterr()
    read_only = f"sqlite:///file:{db}?mode=ro&uri=true"  # read-only even for root (file modes are not)
    assert main(["history", "add", paths[1], "--history", read_only]) == 2
    err = capsys.readouterr().err
    assert err.startswith("harness history: error: history sqlite:///file") and len(err.strip().splitlines()) == 1
    assert "h.db?mode=ro&uri=true: cannot record run run-01: OperationalError: attempt to write a readonly " \
        "database" in err


@pytest.mark.e2e
def test_run_checks_the_history_before_it_starts(tmp_path) -> None:
    import subprocess
    import sys

    db = tmp_path / "h.db"
    assert main(["history", "ls", "--history", str(db)]) == 0  # creates and migrates it
    for url, message in ((f"sqlite:///file:{db}?mode=ro&uri=true", "cannot record runs"),
                         ("postgresql+psycopg://u:pw@127.0.0.1:1/h", "cannot open"),
                         ("nosuchdialect://x/y", "cannot open")):
        proc = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--models", "mlp", "--runtimes",
                               "torch-cpu", "--out", str(tmp_path / "o"), "--history", url],
                              capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "harness run: error: --history: history " in proc.stderr and message in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and "pw" not in proc.stderr
        assert not (tmp_path / "o").exists()  # nothing ran
