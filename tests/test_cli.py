"""The CLI end to end on real models: run twice (the second reuses the ONNX export), report, models, env."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import main
from harness.results import load_results

README = Path(__file__).resolve().parents[1] / "README.md"


def cli(*args, env=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], capture_output=True, text=True,
                          env=env, timeout=timeout)


@pytest.mark.e2e
def test_run_twice_reuses_the_onnx_export_and_writes_every_output(fake_env, tmp_path):
    args = ["run", "--models", "mlp", "--runtimes", "torch-cpu,ort-cpu", "--batch-sizes", "1,2",
            "--min-time", "0.05", "--min-iters", "5"]
    first = cli(*args, "--out", str(tmp_path / "a"), env=fake_env)
    assert first.returncode == 0, first.stdout + first.stderr
    second = cli(*args, "--out", str(tmp_path / "b"), env=fake_env)
    assert second.returncode == 0, second.stdout + second.stderr
    a, b = load_results(tmp_path / "a"), load_results(tmp_path / "b")
    ort_a = [c for c in a.cases if c.case.runtime == "ort-cpu"]
    ort_b = [c for c in b.cases if c.case.runtime == "ort-cpu"]
    assert [c.artifact_cache_hit for c in ort_a] == [False, False]  # exported once, reused for batch 2
    assert [c.artifact_cache_hit for c in ort_b] == [True, True]
    assert ort_a[0].artifact == ort_b[0].artifact
    assert all(c.status == "passed" for c in a.cases + b.cases)
    # identical feeds across runtimes, drift within the FP32 tolerance
    by_shape = {}
    for c in a.cases:
        by_shape.setdefault(c.case.batch, set()).add(c.feed_sha256)
    assert all(len(v) == 1 for v in by_shape.values())
    assert max(c.accuracy["rel_l2"] for c in a.cases) < 1e-4
    env = a.environment.as_dict()  # the run's snapshot (a RunEnvironmentRecord) as stored
    for key in ("cpu_model", "cpu_cores_logical", "memory_total_gb", "os", "python", "libraries", "git",
                "threads", "harness_overhead"):
        assert env.get(key) is not None, key
    assert a.environment.libraries["torch"] and a.environment.libraries["onnx"]
    csv = (tmp_path / "a" / "results.csv").read_text().splitlines()
    assert csv[0].startswith("model,runtime,precision,batch,seq,device,status,latency_p50_ms")
    assert len(csv) == 5
    html = (tmp_path / "a" / "report.html").read_text()
    assert "ort-cpu vs torch-cpu" in html and "Latency p50" in html and "Throughput" in html
    assert not re.search(r"<script[^>]*src|<link|<img|https?://", html)  # self-contained: nothing loaded
    bench = json.loads((tmp_path / "a" / "benchmark.json").read_text())
    assert len(bench["benchmarks"]) == 4 and bench["benchmarks"][0]["stats"]["rounds"] >= 5


@pytest.mark.e2e
def test_pytest_benchmark_compare_reads_our_json(fake_env, tmp_path):
    out = tmp_path / "run"
    res = cli("run", "--models", "fake-linear", "--runtimes", "fake-ok", "--batch-sizes", "1",
              "--min-time", "0.01", "--out", str(out), env=fake_env)
    assert res.returncode == 0, res.stdout
    cmp = subprocess.run([sys.executable, "-c", "from pytest_benchmark.cli import main; main()", "compare",
                          str(out / "benchmark.json")],
                         capture_output=True, text=True)
    assert cmp.returncode == 0, cmp.stderr
    assert "fake-linear-fake-ok-fp32-b1" in cmp.stdout


@pytest.mark.e2e
def test_report_rerenders_and_rejects_bad_files(fake_env, tmp_path, capsys):
    out = tmp_path / "run"
    assert cli("run", "--models", "fake-linear", "--runtimes", "fake-ok", "--batch-sizes", "1",
               "--min-time", "0.01", "--out", str(out), env=fake_env).returncode == 0
    (out / "report.html").unlink()
    assert main(["report", str(out / "results.json"), "-o", str(tmp_path / "re")]) == 0
    assert (tmp_path / "re" / "report.html").is_file()
    (tmp_path / "bad.json").write_text('{"schema_version": 1, "run_')
    assert main(["report", str(tmp_path / "bad.json")]) == 2
    assert "bad.json: line 1 column 23: not valid JSON (truncated?)" in capsys.readouterr().err


def test_usage_errors_exit_2_and_list_valid_names(capsys):
    assert main(["run", "--runtimes", "torch-cpu,nope"]) == 2
    assert "unknown runtime 'nope'; valid runtimes: torch-cpu, ort-cpu" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main(["run", "--no-such-option"])
    assert info.value.code == 2


def test_models_runtimes_env(capsys):
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert "mlp" in out and "resnet18" in out
    assert main(["runtimes"]) == 0
    assert re.search(r"ort-cpu\s+device=cpu.*available", capsys.readouterr().out)
    assert main(["variants"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^opt=  disabled, basic, extended or all\n.*\n    runtimes: ort-cpu, ", out, re.M)
    assert re.search(r"^prune=.*\n.*\n    runtimes: every runtime$", out, re.M)
    assert main(["snapshot"]) == 0
    captured = capsys.readouterr()
    env = json.loads(captured.out)
    assert env["harness_overhead"]["overhead_p50_ns"] > 0 and env["cpu_cores_logical"] >= 1
    assert captured.err == ""


def test_readme_documents_install_main_job_and_tests():
    text = README.read_text()
    assert 'pip install -c constraints/cpu.txt -e ".[dev]"' in text
    assert "harness run --quick" in text and "pytest tests" in text
    ci = (README.parent / ".ci" / "run").read_text().replace("pip install -q ", "pip install ")  # -q: quieter only
    assert 'pip install -c constraints/cpu.txt -e ".[dev]"' in ci and "pytest tests" in ci
    assert "harness run --quick" in ci


@pytest.mark.e2e
def test_report_merges_runs_from_two_thread_settings_side_by_side(fake_env, tmp_path):
    for threads in ("1", "2"):
        res = cli("run", "--models", "fake-linear", "--runtimes", "fake-ok,fake-ok-b", "--batch-sizes", "1,2",
                  "--min-time", "0.01", "--threads", threads, "--out", str(tmp_path / f"t{threads}"), env=fake_env)
        assert res.returncode == 0, res.stdout + res.stderr
    res = cli("report", str(tmp_path / "t1" / "results.json"), str(tmp_path / "t2"), env=fake_env)
    assert res.returncode == 2 and "-o DIR" in res.stderr
    res = cli("report", str(tmp_path / "t1" / "results.json"), str(tmp_path / "t2"), "-o", str(tmp_path / "m"),
              env=fake_env)
    assert res.returncode == 0, res.stdout + res.stderr
    html = (tmp_path / "m" / "report.html").read_text()
    host = load_results(tmp_path / "t1").environment.hostname
    for label in (f"{host} 1t", f"{host} 2t"):
        assert f"fake-ok @ {label}" in html and f"fake-ok-b @ {label} vs fake-ok @ {label}" in html
    assert "threads=1" in html and "threads=2" in html
    csv = (tmp_path / "m" / "results.csv").read_text().splitlines()
    assert len(csv) == 1 + 2 * 4 and csv[0].endswith(",source")
    md = (tmp_path / "m" / "summary.md").read_text()
    assert "### Measured cases" in md and f"{host} 1t" in md and f"{host} 2t" in md


@pytest.mark.e2e
def test_report_with_a_baseline_shows_verdicts(fake_env, tmp_path):
    from harness.gating.scale import scaled_copy
    from harness.results.store import write_results

    out = tmp_path / "base"
    res = cli("run", "--models", "fake-linear", "--runtimes", "fake-slow,fake-ok", "--batch-sizes", "1",
              "--min-time", "0.3", "--min-iters", "10", "--out", str(out), env=fake_env)
    assert res.returncode == 0, res.stdout + res.stderr
    slowed = scaled_copy(load_results(out), 1.5, lambda c: c.case.runtime == "fake-slow")
    write_results(slowed, tmp_path / "slow")
    res = cli("report", str(tmp_path / "slow" / "results.json"), "--baseline", str(out / "results.json"),
              "-o", str(tmp_path / "rep"), env=fake_env)
    assert res.returncode == 0, res.stdout + res.stderr
    html = (tmp_path / "rep" / "report.html").read_text()
    assert "Verdicts against the baseline" in html and 'class="l v-regressed">regressed' in html
    assert "fake-linear-fake-slow-fp32-b1" in html
    assert "This gate: not measured on this machine" in html  # no gate-check figures in the default config
    md = (tmp_path / "rep" / "summary.md").read_text()
    assert "regressed" in md


def _commands():
    """Every command and subcommand of the CLI, as argv prefixes: [], ["run"], ["cache", "ls"], ..."""
    import argparse

    from harness.cli import _parser

    out, todo = [], [([], _parser())]
    while todo:
        prefix, parser = todo.pop()
        out.append(prefix)
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo += [(prefix + [name], sub) for name, sub in action.choices.items()]
    return sorted(out)


def test_every_command_is_one_module_and_one_registry_entry():
    """cli.py dispatches from one registry: each command module of harness/commands/ (one with COMMANDS; the
    shared helpers, common and gate_config, have none) is one family in it, every command its parsers add has a
    run there, and no two families claim a name."""
    from pathlib import Path

    from harness import cli
    from harness.commands import common

    folder = Path(common.__file__).parent
    modules = {p.stem for p in folder.glob("*.py") if "\nCOMMANDS" in p.read_text()}
    assert {p.stem for p in folder.glob("*.py")} - modules == {"__init__", "common", "gate_config"}
    assert {f.__name__.rsplit(".", 1)[1] for f in cli.FAMILIES} == modules
    assert sum(len(f.COMMANDS) for f in cli.FAMILIES) == len(cli.COMMANDS)
    top = [c for c in _commands() if len(c) == 1]
    assert sorted(cli.COMMANDS) == sorted(c[0] for c in top)


@pytest.mark.parametrize("argv", _commands(), ids=lambda a: " ".join(["harness", *a]))
def test_every_help_page_renders(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith("usage: harness") and "Traceback" not in text
    if argv == ["run"]:
        assert "median:10%" in text  # the % of an option's help text is shown, not a format error


def test_pytest_help_with_the_plugin_loaded(tmp_path):
    """In another project's folder: the installed plugin (entry point pytest11) is loaded by every pytest."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "--help"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "--harness-gate=SPEC" in proc.stdout and "median:10%" in proc.stdout


@pytest.mark.parametrize("args, message", [
    (["--out", "{file}"], "--out {file}: is a file"),
    (["--out", "{file}/sub"], "--out {file}/sub: cannot be created: {file} is a file, not a folder"),
    (["--model", "{tmp}/no-such.onnx"], "--model {tmp}/no-such.onnx: no such file"),
    (["--models", "no-such-model"], "unknown model 'no-such-model'"),
])
def test_usage_errors_are_one_line_and_exit_2_before_anything_runs(args, message, tmp_path, capsys):
    file = tmp_path / "a-file"
    file.write_text("x")
    fill = {"file": str(file), "tmp": str(tmp_path)}
    argv = ["run", "--runtimes", "ort-cpu", *[a.format(**fill) for a in args]]
    if "--out" not in args:
        argv += ["--out", str(tmp_path / "run")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message.format(**fill) in err and "Traceback" not in err, err
    assert not (tmp_path / "run").exists()


def _closed_reader(argv: list[str], **kw) -> subprocess.CompletedProcess:
    """Run `harness ARGV | (reader that has already gone away)`: stdout is a pipe closed before it is read."""
    proc = subprocess.Popen([sys.executable, "-m", "harness.cli", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)
    proc.stdout.close()
    err = proc.stderr.read()
    proc.wait(timeout=120)
    return subprocess.CompletedProcess(argv, proc.returncode, "", err)


@pytest.mark.e2e
def test_commands_piped_into_a_reader_that_quits_end_quietly(tmp_path):
    """`harness env | head`, `harness compare A B | head`: no BrokenPipeError, exit 141 (128 + SIGPIPE)."""
    sys.path.insert(0, str(Path(__file__).parent / "gating"))


def test_a_command_option_is_parsed_by_its_group_one_line_naming_it(capsys):
    """The options commands used to declare by hand are option groups (harness/options/) whose parser is the
    argparse type: a bad value is one line naming the option once, exit 2."""
    for argv, words in ((["history", "changes", "--last", "0"], "--last: 0 is below the minimum 1"),
                        (["history", "show", "--metric", "p5"], "--metric 'p5': valid figures: p50, p99, throughput"),
                        (["gate-check", "--rounds", "1"], "--rounds: 1 is below the minimum 2"),
                        (["ceilings", "--threads", "0"], "--threads: 0 is below the minimum 1")):
        with pytest.raises(SystemExit) as info:
            main(argv)
        err = capsys.readouterr().err.strip().splitlines()
        assert info.value.code == 2 and err[-1].endswith(f"error: {words}"), (argv, err)
    from harness.cli import _parser

    args = _parser().parse_args(["gate-check"])  # a default text parsed as a given one
    assert args.levels == (0.05, 0.10, 0.15, 0.20, 0.30) and args.rounds == 6

