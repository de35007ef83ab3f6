"""Hostile stored files: every command that reads one exits 2 with one line naming the file and the place."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from gating.gating_synth import make_run

from harness.cli import main
from harness.errors import ResultsError
from harness.results import write_results
from harness.results.stored import MAX_DEPTH, MAX_INT_DIGITS, read_json_object, read_toml

REPO = Path(__file__).resolve().parents[2]
SPEC = REPO / "specs" / "cpu-2core.toml"


def good_doc() -> dict[str, Any]:
    return json.loads(make_run(1, n=20).to_json())


def _case(d: dict[str, Any], i: int = 0) -> dict[str, Any]:
    return d["cases"][i]


def _mutate(change: Callable[[dict[str, Any]], Any]) -> Callable[[], bytes]:
    def build() -> bytes:
        d = good_doc()
        change(d)
        return json.dumps(d).encode()
    return build


def _text(change: Callable[[str], str]) -> Callable[[], bytes]:
    return lambda: change(json.dumps(good_doc())).encode()


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """Set a dotted path (integers index lists) in the document."""
    def change(d: dict[str, Any]) -> None:
        *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
        for p in parents:
            d = d[p]
        d[last] = value
    return change


def _deep(n: int) -> Any:
    v: Any = 1
    for _ in range(n):
        v = [v]
    return v


def _duplicate(d: dict[str, Any]) -> None:
    d["cases"].append(json.loads(json.dumps(d["cases"][1])))


def _all_samples(value: int) -> Callable[[dict[str, Any]], None]:
    def change(d: dict[str, Any]) -> None:
        for c in d["cases"]:
            c["samples_ns"] = [value] * len(c["samples_ns"])
    return change


# (name, bytes of the file, what the one error line must say: the place and the problem)
HOSTILE: list[tuple[str, Callable[[], bytes], str]] = [
    ("deep nesting, bare", lambda: b"[" * 200_000 + b"]" * 200_000, f"nested more than {MAX_DEPTH} levels"),
    ("deep nesting, inside", _text(lambda t: t.replace('"config": {', '"config": {"x": ' + "[" * 5000 + "]" * 5000
                                                       + ", ", 1)), "nested more than"),
    ("huge integer, 5000 digits", _text(lambda t: t.replace('"samples_ns": [', '"samples_ns": [' + "9" * 5000 + ", ",
                                                            1)), "line 1 column 635: a number of 5,000 digits"),
    ("huge integer, just over", _text(lambda t: t.replace('"batch": 1', '"batch": 1' + "0" * MAX_INT_DIGITS, 1)),
     "cases[0].case.batch: input should be less than or equal to 1000000000"),
    ("huge sample", _mutate(_set("cases.6.samples_ns.7", 10**30)),
     "cases[6].samples_ns[7]: input should be less than or equal to 100000000000000"),
    ("latin-1", lambda: json.dumps(good_doc(), ensure_ascii=False).replace('"synthetic-1"', '"caf\u00e9"')
     .encode("latin-1"), "not UTF-8 text"),
    ("utf-16", lambda: json.dumps(good_doc()).encode("utf-16"), "not UTF-8 text"),
    ("binary garbage", lambda: random.Random(7).randbytes(4096), "not UTF-8 text"),
    ("torch checkpoint", lambda: b"PK\x03\x04\x00\x00\x08\x00" + bytes(range(256)) * 8, "a binary file"),
    ("NUL in text", lambda: b'{"schema_version": 1, "run_id": "a\x00b"}', "NUL character"),
    ("not json", lambda: b"model,runtime\nmlp,ort-cpu\n", "line 1 column 1: not valid JSON"),
    ("truncated", lambda: json.dumps(good_doc()).encode()[:300], "not valid JSON (truncated?)"),
    ("a list", lambda: b"[1, 2, 3]", "expected a JSON object"),
    ("batch a string", _mutate(_set("cases.0.case.batch", "4")), "cases[0].case.batch: input should be a valid integer"),
    ("samples a string", _mutate(_set("cases.2.samples_ns", "fast")), "cases[2].samples_ns: input should be a valid list"),
    ("cases an object", _mutate(_set("cases", {})), "cases: input should be a valid list"),
    ("status a number", _mutate(_set("cases.1.status", 5)), "cases[1].status: input should be"),
    ("complete a string", _mutate(_set("complete", "yes")), "complete: input should be a valid boolean"),
    ("precision unknown", _mutate(_set("cases.0.case.precision", "fp64")), "cases[0].case.precision: input should be"),
    ("environment a list", _mutate(_set("environment", [1])), "environment: input should be a valid dictionary"),
    ("NaN sample token", _text(lambda t: t.replace('"samples_ns": [', '"samples_ns": [NaN, ', 1)),
     "NaN is not a JSON number"),
    ("Infinity token", _text(lambda t: t.replace('"p50_ms": ', '"p50_ms": -Infinity, "x": ', 1)),
     "-Infinity is not a JSON number"),
    ("1e999 overflows", _text(lambda t: t.replace('"p50_ms": ', '"p50_ms": 1e999, "x": ', 1)),
     "1e999 overflows to infinity"),
    ("inf sample string", _mutate(_set("cases.0.samples_ns.3", "inf")), "cases[0].samples_ns[3]: input should be a valid integer"),
    ("negative sample", _mutate(_set("cases.1.samples_ns.4", -5)), "cases[1].samples_ns[4]: -5 ns: a latency sample must be positive"),
    ("zero sample", _mutate(_set("cases.0.samples_ns.0", 0)), "cases[0].samples_ns[0]: 0 ns"),
    ("float sample", _mutate(_set("cases.0.samples_ns.0", 1.5)), "cases[0].samples_ns[0]: input should be a valid integer"),
    ("all-zero samples", _mutate(_all_samples(0)), "cases[0].samples_ns[0]: 0 ns"),
    ("-inf p50 string", _mutate(_set("cases.3.latency.p50_ms", "-inf")), "cases[3].latency.p50_ms: input should be a number (an integer or a float); found '-inf'"),
    ("negative p50", _mutate(_set("cases.3.latency.p50_ms", -1.0)), "cases[3].latency.p50_ms: -1.0: a latency must be positive"),
    ("p50 not the median", _mutate(_set("cases.2.latency.p50_ms", 0.001)), "cases[2].latency.p50_ms: 0.001 ms but the samples"),
    ("p99 lies", _mutate(_set("cases.4.latency.p99_ms", 0.5)), "cases[4].latency.p99_ms: 0.5 ms but the samples"),
    ("cv lies", _mutate(_set("cases.4.latency.cv", 0.0)), "cases[4].latency.cv: 0 but the samples"),
    ("iterations lie", _mutate(_set("cases.2.latency.iterations", 5000)), "cases[2].latency.iterations: 5000 but samples_ns holds 20"),
    ("throughput nan string", _mutate(_set("cases.0.throughput_sps", "nan")), "cases[0].throughput_sps: input should be a valid number"),
    ("throughput zero", _mutate(_set("cases.0.throughput_sps", 0)), "cases[0].throughput_sps: 0.0: must be positive"),
    ("measured, no samples", _mutate(_set("cases.5.samples_ns", [])), "cases[5].samples_ns: status passed but no latency samples"),
    ("duplicate case ids", _mutate(_duplicate), "cases[8]: duplicate case id 'mlp-torch-cpu-fp32-b4@cpu' (first at cases[1])"),
    ("no cases", _mutate(_set("cases", [])), "cases: the run holds no cases"),
    ("duplicate key", _text(lambda t: t.replace('"p50_ms": ', '"p50_ms": 1.0, "p50_ms": ', 1)),
     "cases[0].latency: key 'p50_ms' appears twice"),
    ("duplicate top key", _text(lambda t: t.replace('{', '{"run_id": "other", ', 1)), "the document: key 'run_id' appears twice"),
    ("no schema version", _mutate(lambda d: d.pop("schema_version")), "no integer schema_version"),
    ("newer schema", _mutate(_set("schema_version", 99)), "schema_version 99 is newer"),
]
IDS = [h[0] for h in HOSTILE]


@pytest.fixture
def good(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_BASELINE_DIR", str(tmp_path / "baselines"))
    return write_results(make_run(1, n=20), tmp_path / "good")


def _bad(tmp_path: Path, content: bytes, name: str = "bad.json") -> Path:
    p = tmp_path / name
    p.write_bytes(content)
    return p


def _commands(bad: Path, good: Path, tmp_path: Path) -> dict[str, list[str]]:
    out = str(tmp_path / "out")
    return {
        "report": ["report", str(bad), "-o", out],
        "report --baseline": ["report", str(good), "--baseline", str(bad), "-o", out],
        "compare, bad baseline": ["compare", str(bad), str(good)],
        "compare, bad current": ["compare", str(good), str(bad)],
        "baseline save": ["baseline", "save", str(bad), "--name", "main"],
        "run --baseline": ["run", "--baseline", str(bad), "--models", "mlp", "--runtimes", "ort-cpu", "--out", out],
        "qualify --results": ["qualify", str(SPEC), "--results", str(bad), "--out", out],
    }


COMMANDS = list(_commands(Path("b"), Path("g"), Path("t")))


def _one_clean_line(capsys, rc: int, bad: Path, expect: str) -> str:
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert rc == 2, captured.err
    assert len(lines) == 1, captured.err
    assert str(bad) in lines[0] and expect in lines[0], lines[0]
    assert "Traceback" not in captured.err + captured.out
    return lines[0]


@pytest.mark.parametrize("name, content, expect", HOSTILE, ids=IDS)
def test_the_reader_names_the_file_the_place_and_the_problem(tmp_path, name, content, expect):
    from harness.results import load_results

    bad = _bad(tmp_path, content())
    with pytest.raises(ResultsError) as info:
        load_results(bad)
    message = str(info.value)
    assert message.startswith(f"{bad}: ") and expect in message and "\n" not in message


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("name, content, expect", HOSTILE, ids=IDS)
def test_every_command_exits_2_with_one_line(tmp_path, good, capsys, command, name, content, expect):
    bad = _bad(tmp_path, content())
    argv = _commands(bad, good, tmp_path)[command]
    _one_clean_line(capsys, main(argv), bad, expect)
    assert not (tmp_path / "baselines" / "main.json").exists()
    assert not (tmp_path / "out" / "report.html").exists()


@pytest.mark.parametrize("command", ["report", "compare, bad baseline", "compare, bad current", "baseline save",
                                     "qualify --results"])
def test_the_good_file_passes_every_command(tmp_path, good, capsys, command):
    """The control: the same commands on the unmutated file do not exit 2."""
    rc = main(_commands(good, good, tmp_path)[command])
    assert rc in (0, 1), capsys.readouterr().err


def test_a_pt_name_and_a_run_folder_are_read_the_same_way(tmp_path, good, capsys):
    bad = _bad(tmp_path, random.Random(3).randbytes(1000), "model.pt")
    _one_clean_line(capsys, main(["report", str(bad), "-o", str(tmp_path / "o")]), bad, "not UTF-8 text")
    folder = tmp_path / "run"
    folder.mkdir()
    bad = _bad(folder, b"\xff\xfe" + b"\x00" * 10, "results.json")
    _one_clean_line(capsys, main(["compare", str(good), str(folder)]), bad, "not UTF-8 text")


def test_oversized_files_are_refused_before_reading(tmp_path, good, capsys, monkeypatch):
    from harness.results import stored

    monkeypatch.setattr(stored, "MAX_JSON_BYTES", 1000)
    _one_clean_line(capsys, main(["report", str(good), "-o", str(tmp_path / "o")]), good,
                    "bytes, over the 1,000 a results file may have")


# ---- a baseline must hold a measured case; a bundle is checked run by run ------------------------------------

def _skipped_only(d: dict[str, Any]) -> None:
    for c in d["cases"]:
        c.update(status="skipped", samples_ns=[], latency=None, throughput_sps=None, reason="no GPU")


def test_an_empty_baseline_is_refused_not_gate_ok(tmp_path, good, capsys):
    bad = _bad(tmp_path, _mutate(_skipped_only)())
    for argv in (["compare", str(bad), str(good)], ["baseline", "save", str(bad), "--name", "main"]):
        line = _one_clean_line(capsys, main(argv), bad, "cases: no case was measured")
        assert "Gate: OK" not in line
    # as a current run it is fine to report (every case skipped is something to show)
    assert main(["report", str(bad), "-o", str(tmp_path / "o")]) == 0


IN_BUNDLE = ["batch a string", "inf sample string", "negative sample", "zero sample", "-inf p50 string",
             "p50 not the median", "throughput zero", "duplicate case ids", "no cases"]


@pytest.mark.parametrize("name, content, expect", [h for h in HOSTILE if h[0] in IN_BUNDLE], ids=IN_BUNDLE)
def test_a_bad_run_inside_a_baseline_bundle_is_named_by_its_index(tmp_path, good, capsys, name, content, expect):
    assert main(["baseline", "save", str(good), str(good), "--name", "main"]) == 0
    capsys.readouterr()
    stored = tmp_path / "baselines" / "main.json"
    bundle = json.loads(stored.read_text())
    bundle["runs"][1] = json.loads(content())
    stored.write_text(json.dumps(bundle))
    _one_clean_line(capsys, main(["compare", "main", str(good)]), stored, f"runs[1].{expect}")


@pytest.mark.parametrize("flags, rc", [([], 2), (["--allow-incomplete"], 0)])
@pytest.mark.parametrize("state", [{"complete": False}, {"interrupted": True},
                                   {"complete": False, "interrupted": True}])
def test_baseline_save_refuses_an_incomplete_or_interrupted_run(tmp_path, capsys, monkeypatch, state, flags, rc):
    monkeypatch.setenv("HARNESS_BASELINE_DIR", str(tmp_path / "baselines"))
    run = make_run(2, n=20)
    for k, v in state.items():
        setattr(run, k, v)
    path = write_results(run, tmp_path / "r")
    assert main(["baseline", "save", str(path), "--name", "main", *flags]) == rc
    err = capsys.readouterr().err
    if rc:
        key = "interrupted: true" if state.get("interrupted") else "complete: false"
        assert err.count("\n") == 1 and f"{path}: {key}: the run is incomplete" in err
    assert (tmp_path / "baselines" / "main.json").exists() == (rc == 0)


# ---- TOML: gate configs and qualification specs ----------------------------------------------------------------

HOSTILE_TOML: list[tuple[str, bytes, str]] = [
    ("deep arrays", b"gates = " + b"[" * 3000 + b"]" * 3000, f"line 1 column {9 + MAX_DEPTH}: nested more than"),
    ("deep tables", ("x = " + "{a = " * 100 + "1" + "}" * 100).encode(), "line 1 column 325: nested more than"),
    ("deep dotted keys", ("x" + ".a" * 100 + " = 1").encode(), "x" + ".a" * 64 + ": nested more than 64"),
    ("huge integer", b"seed = " + b"9" * 5000, "line 1 column 8: a number of 5,000 digits"),
    ("long integer", b"\nseed = 1_" + b"9" * 60, "line 2 column 8: a number of 61 digits"),
    ("latin-1", 'gates = ["m\u00e9dian:10%"]'.encode("latin-1"), "not UTF-8 text"),
    ("binary", bytes(range(256)), "not UTF-8 text"),
    ("NUL", b'gates = ["median:10%"]\x00', "NUL character"),
    ("not toml", b"{\"gates\": 1}", "not valid TOML"),
]


@pytest.mark.parametrize("name, content, expect", HOSTILE_TOML, ids=[h[0] for h in HOSTILE_TOML])
def test_hostile_gate_configs_and_specs(tmp_path, good, capsys, name, content, expect):
    bad = _bad(tmp_path, content, "bad.toml")
    with pytest.raises(Exception) as info:
        read_toml(bad)
    assert str(bad) in str(info.value) and expect in str(info.value)
    _one_clean_line(capsys, main(["compare", str(good), str(good), "--gate-config", str(bad)]), bad, expect)
    _one_clean_line(capsys, main(["qualify", str(bad), "--results", str(good)]), bad, expect)


def test_wrong_types_in_a_gate_config_name_the_key(tmp_path, good, capsys):
    bad = _bad(tmp_path, b"gates = 5\n", "gates.toml")
    _one_clean_line(capsys, main(["compare", str(good), str(good), "--gate-config", str(bad)]), bad,
                    "gates must be a list of strings")
    bad.write_text("confidence = \"high\"\n")
    _one_clean_line(capsys, main(["compare", str(good), str(good), "--gate-config", str(bad)]), bad,
                    "confidence = 'high' is not a number")


def test_the_depth_scan_ignores_brackets_inside_strings(tmp_path):
    d = good_doc()
    d["config"]["note"] = "[" * 10_000
    p = _bad(tmp_path, json.dumps(d).encode())
    assert read_json_object(p)["config"]["note"] == "[" * 10_000


def test_the_documented_examples_are_what_the_cli_prints(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    d = good_doc()
    d["cases"][3]["samples_ns"][0] = -5
    Path("results.json").write_text(json.dumps(d, indent=1))
    Path("model.pt").write_bytes(b"PK\x03\x04\x00\x00\x08\x00\x80\x81")
    assert main(["report", "results.json"]) == 2
    assert main(["compare", "model.pt", "results.json"]) == 2
    page = (REPO / "docs" / "stored-files.md").read_text()
    for line in capsys.readouterr().err.splitlines():
        assert line in page, line


GATES_TOML = ('gates = ["median:10%"]\nconfidence = 0.99\nresamples = 2000\nseed = 1\ndrift = true\nrun_sigma = 0.04\n'
              '[run_sigma_cases]\n"mlp-ort-cpu-fp32-b1" = 0.2\n[models.mlp]\ngates = ["median:5%"]\n'
              '[gate_check]\ncases = 3\nfalse_alarm_rate = 0.01\npower = {"10%" = 0.9}\n')
WRONG = ['"x"', "[1, \"a\"]", "{a = 1}", "true", "nan", "-inf", "1e400"]


def _toml_variants(text: str) -> list[tuple[str, str]]:
    """Every `key = value` line of `text` with its value replaced by each of WRONG (a wrong type or a
    non-finite number), as (id, new text)."""
    out = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        key = line.split(" = ", 1)[0] if " = " in line and not line.startswith("#") else None
        for repl in WRONG if key else ():
            out.append((f"{key}={repl}", "\n".join([*lines[:i], f"{key} = {repl}", *lines[i + 1:]])))
    return out


@pytest.mark.parametrize("variant", _toml_variants(GATES_TOML), ids=lambda v: v[0])
def test_a_gate_config_with_a_wrong_value_anywhere_is_one_line(tmp_path, good, capsys, variant):
    key, text = variant
    bad = _bad(tmp_path, text.encode(), "gates.toml")
    rc = main(["compare", str(good), str(good), "--gate-config", str(bad)])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    if rc == 2:
        assert captured.err.count("\n") == 1 and str(bad) in captured.err
    else:  # a value of another type that still means something (e.g. drift = true kept)
        assert key.startswith(("drift=true", "strict")), (key, rc, captured.err)


@pytest.mark.parametrize("variant", [v for v in _toml_variants(SPEC.read_text()) if not v[0].startswith("#")][::3],
                         ids=lambda v: v[0])
def test_a_spec_with_a_wrong_value_anywhere_is_one_line(tmp_path, good, capsys, variant):
    key, text = variant
    bad = _bad(tmp_path, text.encode(), "spec.toml")
    rc = main(["qualify", str(bad), "--results", str(good), "--out", str(tmp_path / "o")])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    assert rc in (1, 2) or key.split("=")[0] in ("description", "drift_within_tolerance"), (key, rc)
    if rc == 2:
        assert captured.err.count("\n") == 1 and str(bad) in captured.err


@pytest.mark.parametrize("n", [1, 2, 3, 10, 101, 2000])
def test_the_statistics_check_agrees_with_latency_stats(n):
    """Whatever the harness itself derives from samples passes; a p50 moved by one part in 10^4 does not."""
    from harness.results.schema import check_results_doc
    from harness.results.stats import latency_stats

    rng = random.Random(n)
    d = good_doc()
    ns = [rng.randint(1, 10**10) for _ in range(n)]
    d["cases"][0].update(samples_ns=ns, latency=latency_stats(ns).as_dict())
    check_results_doc(d, "r.json")
    d["cases"][0]["latency"]["p50_ms"] *= 1.0001
    with pytest.raises(ResultsError, match=r"r.json: cases\[0\].latency.p50_ms: .* but the samples"):
        check_results_doc(d, "r.json")


def test_results_json_rewrites_take_at_most_their_share_of_the_run_and_the_end_writes_every_case(tmp_path,
                                                                                                monkeypatch):
    """A run of many millisecond cases (conformance) does not rewrite its whole results.json after each one: a row
    waits while the last write is more recent than its duration / SAVE_SHARE; an unconditional save (the run's
    end, a signal's orderly stop) writes every case. Fake clock and fake writes: only the rule is tested."""
    from harness.results import load_results
    from harness.results import store

    now = [0.0]
    written: list[int] = []

    def slow_write(run, out_dir):  # each write "takes" 1 ms per case in the file (a growing file)
        now[0] += 0.001 * len(run.cases)
        written.append(len(run.cases))
        return real_write(run, out_dir)

    real_write = store.write_results
    monkeypatch.setattr(store, "write_results", slow_write)
    writer = store.ResultsWriter(tmp_path, clock=lambda: now[0])
    from harness.results.schema import CaseId

    run = make_run(0, n=5, cases=[CaseId(f"m{i}", "ort-cpu", "fp32", 1, None, "cpu") for i in range(60)])
    cases, run.cases = list(run.cases), []
    for case in cases:
        run.cases.append(case)
        now[0] += 0.002  # each case takes 2 ms
        writer.save(run, every=False)
    assert written[0] == 1  # the first row is written at once
    assert len(written) < len(cases) / 3  # not after every case: the writes grew to 60 ms, the cases stayed 2 ms
    spent = sum(0.001 * n for n in written)
    assert spent <= store.SAVE_SHARE * now[0] * 1.5  # about SAVE_SHARE of the run's time, not 15x the cases'
    assert len(load_results(tmp_path / "results.json").cases) < len(cases)  # the last rows wait ...
    assert writer.save(run)  # ... until the end writes them all
    assert len(load_results(tmp_path / "results.json").cases) == len(cases)
    # cases slower than 1 / SAVE_SHARE of a write: each is written as it arrives
    slow = store.ResultsWriter(tmp_path / "slow", clock=lambda: now[0])
    written.clear()
    for i in range(5):
        now[0] += 1.0
        assert slow.save(run, every=False)
    assert len(written) == 5
