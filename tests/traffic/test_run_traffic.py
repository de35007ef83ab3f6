"""`harness run --traffic FILE [--rate R]` (#58): every case of the matrix replayed with that traffic, open-loop,
its tails and send-time error in results.json, summary.md and the report; and the traffic readers bounded at
their root (every path checked by stat, every size, count, rate and timestamp bounded)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.errors import UsageError
from harness.execution import CaseRunner
from harness.options import OPTIONS, parse_run_options
from harness.results.schema import CaseId, CaseResult
from harness.traffic import spec as spec_mod
from harness.traffic import trace as trace_mod
from harness.traffic.spec import load_traffic

CASE = CaseId("fake-linear", "fake-ok", "fp32", 2, None, "cpu")


def _config(tmp_path: Path, **extra: str):
    raw = {o.dest: None for o in OPTIONS}
    raw.update(models="fake-linear", runtimes="fake-ok", batch_sizes="2", min_time="0.01", min_iters="3",
               warmup="1", threads="1", cache_dir=str(tmp_path / "c"), out=str(tmp_path / "o"))
    raw.update(extra)
    return parse_run_options(raw)


def _traffic(tmp_path: Path, body: str, name: str = "t.toml") -> Path:
    path = tmp_path / name
    path.write_text(body)
    return path


POISSON = "requests = 120\n[arrival]\nprocess = \"poisson\"\nrate = 2000\n"


def test_each_case_replays_the_traffic_and_keeps_its_tails(tmp_path, fakes):
    path = _traffic(tmp_path, POISSON)
    r = CaseRunner().run(CASE, _config(tmp_path, traffic=str(path)))
    t = r.traffic
    assert t is not None and t.error is None and t.requests == 120 and t.calls == 120 and t.mean_batch == 1.0
    assert t.rate == 2000.0 and t.source == str(path) and t.traffic == "Poisson, 120 requests, seed 0"
    assert set(t.latency_ms) == {"p50", "p90", "p99", "p99.9", "max"} and t.latency_ms["p50"] > 0
    assert t.latency_ms["p50"] <= t.latency_ms["p99"] <= t.latency_ms["max"]
    assert set(t.send_error_ms) <= {"p50", "p99", "max"}
    assert t.dims == "batch 2 (the case's)"  # the traffic gives no shapes: the case's rows per request
    again = CaseResult.from_dict(r.as_dict())  # stored and read back
    assert again.traffic == t


def test_rate_and_batcher_shape_the_replay(tmp_path, fakes):
    path = _traffic(tmp_path, POISSON + "[shapes.batch]\n1 = 1\n3 = 1\n")
    r = CaseRunner().run(CASE, _config(tmp_path, traffic=str(path), rate="4000", batcher="max=4,wait=1"))
    t = r.traffic
    assert t.rate == 4000.0 and t.batcher == "max=4,wait=1" and t.calls <= t.requests
    assert t.dims == "batch from the traffic"
    assert abs(t.offered_rps - 4000) / 4000 < 0.3  # the schedule's own mean over 120 requests


def test_rate_without_traffic_and_a_bad_traffic_file_are_usage_errors(tmp_path, fakes):
    with pytest.raises(UsageError, match="--rate 50 is the rate of --traffic FILE's replay"):
        _config(tmp_path, rate="50")
    fifo = tmp_path / "t.toml"
    os.mkfifo(fifo)
    with pytest.raises(UsageError, match=r"t\.toml: is a FIFO \(named pipe\), not a regular file; refused"):
        _config(tmp_path, traffic=str(fifo))
    with pytest.raises(UsageError, match="--rate: 1e\\+12 is above the maximum"):
        _config(tmp_path, traffic=str(_traffic(tmp_path, POISSON, "ok.toml")), rate="1e12")


def test_a_traffic_dimension_the_model_lacks_is_the_replays_error_not_the_cases(tmp_path, fakes):
    path = _traffic(tmp_path, POISSON + "[shapes.seq]\n16 = 1\n")
    r = CaseRunner().run(CASE, _config(tmp_path, traffic=str(path)))
    assert r.status == "passed" and r.traffic.requests == 0 and "dimension(s) 'seq'" in r.traffic.error


def test_the_report_and_summary_show_the_replay(tmp_path, fakes):
    from harness.report.render import render_html, render_markdown
    from harness.results.schema import RunResults

    path = _traffic(tmp_path, POISSON)
    r = CaseRunner().run(CASE, _config(tmp_path, traffic=str(path)))
    run = RunResults(run_id="x", started_at="", cases=[r], complete=True)
    html = render_html(run)
    assert 'id="traffic"' in html and "Poisson, 120 requests, seed 0" in html and "no coordinated omission" in html
    md = render_markdown(run)
    assert "### Traffic replay (--traffic)" in md and "| fake-linear-fake-ok-fp32-b2 |" in md


# ------------------------------------------------------------------ the readers, bounded at their root
@pytest.mark.parametrize("body, name, says", [
    ("[shapes.batch]\n100000000 = 1\n", "t.toml", "above the maximum 1048576"),
    ("requests = 1000000000000\n", "t.toml", "requests must be a whole number from 1 to 10,000,000"),
    ("[arrival]\nprocess = \"gamma\"\ncv = 1e300\n", "t.toml", "cv = 1e+300 is outside [0.001, 1000]"),
    ("[arrival]\nprocess = \"gamma\"\ncv = 1e-300\n", "t.toml", "cv = 1e-300 is outside"),
    ("[arrival]\nprocess = \"onoff\"\non_s = 1e-300\n", "t.toml", "on_s = 1e-300 is outside"),
    ("[arrival]\nrate = 1e300\n", "t.toml", "rate = 1e+300 is outside"),
    ("timestamp,batch\n0,1\n1e308,1\n", "t.csv", "is not a timestamp this replay can hold"),
    ("timestamp,batch\n0,1\n", "t.csv", "a rate needs at least two"),
    ("timestamp,batch\n", "t.csv", "no requests"),
    ("timestamp,batch\n0,1\n5000000000,1\n", "t.csv", "over 30 days"),
])
def test_traffic_files_beyond_the_bounds_are_refused_naming_the_file(tmp_path, body, name, says):
    path = _traffic(tmp_path, body, name)
    with pytest.raises(UsageError) as info:
        load_traffic(path)
    assert str(path) in str(info.value) and says in str(info.value), str(info.value)


def test_paths_are_checked_by_stat_and_text_must_be_utf8(tmp_path, monkeypatch):
    with pytest.raises(UsageError, match="is a device, not a regular file"):
        load_traffic("/dev/zero.csv") if Path("/dev/zero.csv").exists() else trace_mod.read_trace("/dev/zero")
    with pytest.raises(UsageError, match="is a directory"):
        load_traffic(tmp_path)
    bad = tmp_path / "t.csv"
    bad.write_bytes(b"timestamp,batch\n0,1\n1,\xff\n")
    with pytest.raises(UsageError, match=r"not UTF-8 text \(byte 22"):
        load_traffic(bad)
    bom = tmp_path / "bom.csv"
    bom.write_bytes(b"\xef\xbb\xbftimestamp,batch\n0,1\n10,2\n")  # a spreadsheet's CSV
    assert len(load_traffic(bom).trace) == 2
    monkeypatch.setattr(spec_mod, "MAX_SPEC_BYTES", 10)
    with pytest.raises(UsageError, match="over the 0 MiB a traffic file may hold"):
        load_traffic(_traffic(tmp_path, POISSON))


def test_a_trace_outside_the_traffic_files_folder_is_refused(tmp_path):
    outside = tmp_path / "secret.csv"
    outside.write_text("timestamp,batch\n0,1\n1,1\n")
    (tmp_path / "spec").mkdir()
    path = _traffic(tmp_path / "spec", "[arrival]\nprocess = \"trace\"\n[trace]\nfile = \"../secret.csv\"\n")
    with pytest.raises(UsageError, match="outside the traffic file's folder"):
        load_traffic(path)
    (tmp_path / "spec" / "here.csv").write_text("timestamp,batch\n0,1\n1,1\n")
    ok = _traffic(tmp_path / "spec", "[arrival]\nprocess = \"trace\"\n[trace]\nfile = \"here.csv\"\n", "ok.toml")
    assert len(load_traffic(ok).trace) == 2


def test_a_trace_over_the_record_bound_is_refused_before_it_is_held(tmp_path, monkeypatch):
    monkeypatch.setattr(trace_mod, "MAX_TRACE_RECORDS", 5)
    path = _traffic(tmp_path, "".join(f'{{"timestamp": {i}, "batch": 1}}\n' for i in range(50)), "t.jsonl")
    with pytest.raises(UsageError, match="over 5 requests"):
        load_traffic(path)


def test_a_shape_mix_on_a_runtime_that_sets_up_per_shape_is_refused_in_the_record(tmp_path, fakes, monkeypatch):
    from harness.runtimes import get_runtime

    monkeypatch.setattr(get_runtime("fake-ok"), "sets_up_per_shape", lambda self: True)
    mixed = _traffic(tmp_path, POISSON + "[shapes.batch]\n1 = 1\n3 = 1\n")
    r = CaseRunner().run(CASE, _config(tmp_path, traffic=str(mixed)))
    assert r.status == "passed" and r.traffic.requests == 0 and "sets its model up per input shape" in r.traffic.error
    one = _traffic(tmp_path, POISSON, "one.toml")  # one shape: replayed
    assert CaseRunner().run(CASE, _config(tmp_path, traffic=str(one))).traffic.requests == 120
