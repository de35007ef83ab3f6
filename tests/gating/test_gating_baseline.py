"""Named baselines: save, list, load by name or path; bad baselines are clear errors naming the file."""

from __future__ import annotations

from pathlib import Path

import json

import pytest
from gating_synth import make_run

from harness.cli import main
from harness.errors import ResultsError
from harness.gating import baseline_dir, list_baselines, load_baseline, save_baseline
from harness.results import write_results


@pytest.fixture
def results(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_BASELINE_DIR", str(tmp_path / "baselines"))
    return write_results(make_run(1, n=50), tmp_path / "run")


def test_save_list_load_by_name_and_path(results, tmp_path):
    stored = save_baseline(results, "main").path
    assert stored == tmp_path / "baselines" / "main.json" and baseline_dir() == tmp_path / "baselines"
    assert load_baseline("main").run_id == "synthetic-1"
    assert load_baseline(str(results)).run_id == "synthetic-1"
    assert load_baseline(results.parent).run_id == "synthetic-1"  # a run folder
    [info] = list_baselines()
    assert info.name == "main" and info.measured == 8 and not info.problem


def test_unknown_name_lists_the_saved_ones(results, tmp_path):
    save_baseline(results, "main")
    with pytest.raises(ResultsError, match=r"nope.json: no baseline named 'nope' in .*\(saved: main\)"):
        load_baseline("nope")


def test_bad_names_and_incomplete_runs_are_refused(results, tmp_path):
    with pytest.raises(Exception, match="baseline name '../x'"):
        save_baseline(results, "../x")
    run = make_run(1, n=20)
    run.complete = False
    p = write_results(run, tmp_path / "killed")
    with pytest.raises(ResultsError, match="incomplete"):
        save_baseline(p, "main")
    assert save_baseline(p, "main", allow_incomplete=True).path.is_file()


def _doc(results):
    return json.loads(results.read_text())


@pytest.mark.parametrize("mutate, message", [
    (lambda p, d: p.unlink(), "no such results file"),
    (lambda p, d: p.write_text(p.read_text()[: len(p.read_text()) // 2]), "not valid JSON (truncated?)"),
    (lambda p, d: p.write_text(""), "not valid JSON"),
    (lambda p, d: p.write_text(json.dumps({**d, "schema_version": 99})), "schema_version 99 is newer"),
    (lambda p, d: p.write_text(json.dumps({**d, "schema_version": "one"})), "no integer schema_version"),
    (lambda p, d: p.write_text(json.dumps(d).replace('"samples_ns": [', '"samples_ns": [NaN, ', 1)),
     "NaN is not a JSON number"),
    (lambda p, d: p.write_text(json.dumps(d).replace('"samples_ns": [', '"samples_ns": ["nan", ', 1)),
     "cases[0].samples_ns[0]: input should be a valid integer; found 'nan'"),
    (lambda p, d: p.write_text(json.dumps(d).replace('"p50_ms": ', '"p50_ms": "nan", "x": ', 1)),
     "cases[0].latency.p50_ms: input should be a number (an integer or a float); found 'nan'"),
    (lambda p, d: p.write_text(json.dumps(d).replace('"samples_ns": [', '"samples_ns": [], "x": [', 1)),
     "no latency samples"),
    (lambda p, d: p.write_text(json.dumps({k: v for k, v in d.items() if k != "run_id"})), "run_id: field required"),
])
def test_bad_baselines_name_the_file(results, mutate, message, capsys):
    mutate(results, _doc(results))
    with pytest.raises(ResultsError) as info:
        load_baseline(str(results))
    assert str(results) in str(info.value) and message in str(info.value)
    # the CLI: exit status 2 and the same message, never a traceback or a silent pass
    assert main(["compare", str(results), str(results)]) == 2
    err = capsys.readouterr().err
    assert "harness compare: error:" in err and message in err and "Traceback" not in err


def test_baseline_cli_save_and_ls(results, capsys):
    assert main(["baseline", "save", str(results), "--name", "nightly"]) == 0
    assert "saved baseline 'nightly'" in capsys.readouterr().out
    assert main(["baseline", "ls"]) == 0
    assert "nightly" in capsys.readouterr().out
    assert main(["baseline", "ls", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["name"] == "nightly"
    assert main(["baseline", "save", str(results) + ".missing", "--name", "x"]) == 2


def test_multi_run_baselines_save_append_keep(results, tmp_path, capsys):
    from harness.gating.baseline import load_baseline_runs

    more = [write_results(make_run(s, n=50), tmp_path / f"run{s}") for s in (2, 3, 4)]
    stored = save_baseline([results, more[0]], "main").path
    assert [r.run_id for r in load_baseline_runs("main")] == ["synthetic-1", "synthetic-2"]
    assert load_baseline("main").run_id == "synthetic-2"  # the newest run
    save_baseline(more[1:], "main", append=True, keep=3)
    assert [r.run_id for r in load_baseline_runs(stored)] == ["synthetic-2", "synthetic-3", "synthetic-4"]
    [info] = list_baselines()
    assert info.runs == 3 and info.run_id == "synthetic-4"
    # append to a name that does not exist yet starts it; a plain results file is a one-run baseline
    save_baseline(results, "fresh", append=True)
    assert len(load_baseline_runs("fresh")) == 1 and len(load_baseline_runs(results)) == 1
    with pytest.raises(Exception, match="keep at least one run"):
        save_baseline(results, "main", keep=0)
    # the CLI: several files, --append --keep, and compare against the bundle
    assert main(["baseline", "save", str(results), str(more[0]), "--name", "two"]) == 0
    assert "2 runs: synthetic-1, synthetic-2" in capsys.readouterr().out
    assert main(["baseline", "save", str(more[2]), "--name", "two", "--append", "--keep", "2"]) == 0
    assert "2 runs: synthetic-2, synthetic-4" in capsys.readouterr().out
    assert main(["baseline", "ls"]) == 0
    assert "2 runs, newest synthetic-4" in capsys.readouterr().out
    assert main(["compare", "two", str(more[1])]) == 0
    assert "baseline of 2 runs" in capsys.readouterr().out


@pytest.mark.parametrize("mutate, message", [
    (lambda d: {**d, "baseline_schema": 7}, "baseline_schema: 7 is not one this harness reads"),
    (lambda d: {**d, "runs": []}, "runs: list should have at least 1 item"),
    (lambda d: {**d, "runs": "x"}, "runs: input should be a valid list"),
    (lambda d: {**d, "runs": [{**d["runs"][0], "schema_version": 99}]}, "runs[0]: schema_version 99 is newer"),
    (lambda d: {**d, "runs": [d["runs"][0], {**d["runs"][0], "run_id": None, "cases": [
        {**d["runs"][0]["cases"][0], "samples_ns": ["nan"]}]}]}, "runs[1].run_id: input should be a valid string"),
])
def test_bad_baseline_bundles_name_the_file_and_the_run(results, mutate, message, capsys):
    from harness.gating.baseline import load_baseline_runs

    stored = save_baseline(results, "main").path
    stored.write_text(json.dumps(mutate(json.loads(stored.read_text()))))
    with pytest.raises(ResultsError) as info:
        load_baseline_runs("main")
    assert str(stored) in str(info.value) and message in str(info.value)
    assert main(["compare", "main", str(results)]) == 2
    assert message in capsys.readouterr().err


def test_a_stored_name_wins_over_a_folder_of_that_name_here(results, tmp_path, monkeypatch):
    """`harness gate quick` beside a run folder ./quick read the run folder (no artifacts stored: every case fell
    back to the stored figures); the stored baseline's name now wins, and ./quick still reaches the folder."""
    from harness.gating.baseline import resolve_baseline

    save_baseline(results, "quick")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "quick").mkdir()
    assert resolve_baseline("quick") == tmp_path / "baselines" / "quick.json"
    assert resolve_baseline("./quick") == Path("./quick")
