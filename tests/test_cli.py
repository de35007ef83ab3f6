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
    env = a.environment
    for key in ("cpu_model", "cpu_cores_logical", "memory_total_gb", "os", "python", "libraries", "git",
                "threads", "harness_overhead"):
        assert key in env, key
    assert env["libraries"]["torch"] and env["libraries"]["onnx"]
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
    assert main(["env"]) == 0
    env = json.loads(capsys.readouterr().out)
    assert env["harness_overhead"]["overhead_p50_ns"] > 0 and env["cpu_cores_logical"] >= 1


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
    host = load_results(tmp_path / "t1").environment["hostname"]
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
    from gating_synth import make_run

    from harness.results import write_results

    write_results(make_run(0), tmp_path / "a")
    write_results(make_run(1), tmp_path / "b")
    for argv in (["env"], ["compare", str(tmp_path / "a"), str(tmp_path / "b")], ["models"]):
        done = _closed_reader(argv)
        assert done.returncode == 141 and done.stderr == "", (argv, done.returncode, done.stderr)
    assert _closed_reader(["--help"]).stderr == ""  # argparse's own exit: quiet too


def test_an_interrupt_before_the_session_exists_is_one_line_exit_130(monkeypatch, capsys):
    from harness import cli
    from harness.commands import conform, run

    def interrupted(*_a, **_k):
        raise KeyboardInterrupt

    for module in (conform, run):  # Ctrl-C while options are read (imports)
        monkeypatch.setattr(module, "parse_run_options", interrupted)
    for argv in (["conform", "--runtimes", "ort-cpu"], ["run", "--models", "mlp"]):
        assert cli.main(argv) == 130
        assert capsys.readouterr().err == f"harness {argv[0]}: interrupted\n"


@pytest.mark.e2e
def test_ctrl_c_at_any_moment_of_conform_is_exit_130_without_a_traceback(tmp_path):
    import signal
    import time

    for delay in (0.3, 1.5, 4.0):  # while importing, while reading options, while running cases
        proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "conform", "--runtimes", "ort-cpu",
                                 "--out", str(tmp_path / f"c{delay}")], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True,
                                # a runner started in the background (`cmd &` without job control) ignores
                                # SIGINT, and an ignored SIGINT is inherited: Python would install no handler
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
        if proc.returncode == 0:  # finished before the signal: nothing to check
            continue
        assert proc.returncode == 130, (delay, proc.returncode, out[-2000:], err[-2000:])
        assert "Traceback" not in err + out, (delay, err[-3000:])


@pytest.mark.parametrize("where", ["start", "snapshot", "executor"])
def test_an_interrupt_while_the_session_starts_is_one_line_exit_130(where, monkeypatch, capsys, tmp_path):
    """Ctrl-C inside the session's start (the environment snapshot, the worker's launch), before its own
    signal handlers: one line and 130, never an assertion's traceback (`harness ab` in its first 1.5 s)."""
    from harness import cli
    from harness.execution import session as session_module

    def interrupted(*_a, **_k):
        raise KeyboardInterrupt

    target = {"start": (session_module.HarnessSession, "start"), "snapshot": (session_module, "snapshot"),
              "executor": (session_module, "IsolatedExecutor")}[where]
    monkeypatch.setattr(*target, interrupted)
    for argv in (["ab", "base", "threads=2", "--models", "mlp", "--out", str(tmp_path / "ab")],
                 ["conform", "--runtimes", "ort-cpu", "--out", str(tmp_path / "c")]):
        assert cli.main(argv) == 130
        err = capsys.readouterr().err
        assert "Traceback" not in err, err
        if where != "executor":  # else the run exists: written and reported as stopped, as a later Ctrl-C
            assert err.endswith(f"harness {argv[0]}: interrupted\n"), err


def test_ctrl_c_in_the_first_seconds_of_ab_is_exit_130_without_a_traceback(tmp_path):
    import signal
    import time

    for delay in (0.2, 0.7, 1.0, 1.3, 1.6, 2.5):
        proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "ab", "base", "opt=basic", "--models", "mlp",
                                 "--runtimes", "ort-cpu", "--ab-pairs", "4", "--out", str(tmp_path / f"a{delay}")],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
        if proc.returncode == 0:
            continue
        assert proc.returncode == 130, (delay, proc.returncode, err[-2000:])  # not -2, a death by SIGINT
        assert "Traceback" not in err + out and err.strip().count("\n") <= 1, (delay, err[-3000:])


# ------------------------------------------------------------------ "did you mean" (difflib) on every name
def _typo(word: str) -> str:
    """A near miss of `word`: two neighbouring letters swapped in its longest part."""
    i = max(1, len(word) // 2)
    return word[:i - 1] + word[i] + word[i - 1] + word[i + 1:]


def test_a_mistyped_option_of_every_command_gets_did_you_mean(capsys):
    from harness.cli import _parser

    parser = _parser()
    sub = next(a for a in parser._actions if a.choices and "run" in a.choices)
    checked = 0
    for command, cp in sub.choices.items():
        longs = [o for a in cp._actions for o in a.option_strings if o.startswith("--") and len(o) > 7]
        for option in longs[:4]:
            typo = "--" + _typo(option[2:])
            if typo == option or any(o.startswith(typo) for o in longs):  # argparse takes unique prefixes
                continue
            with pytest.raises(SystemExit) as info:
                parser.parse_args([command, *(["x", "y"] if command in ("ab",) else []), typo, "1"])
            assert info.value.code == 2
            err = capsys.readouterr().err
            if "unrecognized arguments" in err:
                assert f"{typo} (did you mean " in err and f"'{option}'" in err, (command, typo, err)
                checked += 1
    assert checked >= 20


@pytest.mark.parametrize("argv, hint", [
    (["rnu"], "(did you mean 'run'?)"),
    (["cache", "lss"], "(did you mean 'ls'?)"),
    (["run", "--bach-sizes", "1"], "--bach-sizes (did you mean '--batch-sizes'"),
])
def test_mistyped_commands_and_options(argv, hint, capsys):
    from harness.cli import main

    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2 and hint in capsys.readouterr().err


def test_mistyped_runtimes_models_precisions_and_variant_kinds_get_did_you_mean():
    from harness.errors import UsageError
    from harness.model import get_model, model_names
    from harness.precision import Precision
    from harness.runtimes import get_runtime, runtime_names
    from harness.variants.registry import KINDS, parse_variant

    for name in runtime_names():
        if len(name) >= 5:
            with pytest.raises(UsageError, match=f"unknown runtime '{_typo(name)}' \\(did you mean [^)]*'{name}'"):
                get_runtime(_typo(name))
    with pytest.raises(UsageError, match=r"unknown runtime 'ort-cup' \(did you mean 'ort-cpu'"):
        get_runtime("ort-cup")
    for name in model_names():
        if len(name) >= 5 and _typo(name) not in model_names():
            with pytest.raises(UsageError, match=f"did you mean [^)]*'{name}'"):
                get_model(_typo(name))
    for kind in KINDS:
        if len(kind) >= 4 and _typo(kind) not in KINDS:
            with pytest.raises(UsageError, match=f"unknown kind '{_typo(kind)}' \\(did you mean [^)]*'{kind}'"):
                parse_variant(f"{_typo(kind)}=1")
    with pytest.raises(ValueError, match=r"'fp61' \(did you mean 'fp16'"):
        Precision.parse("fp61")
    with pytest.raises(UsageError, match=r"valid runtimes") as info:  # nothing near: no guess, the list
        get_runtime("zzzzzz")
    assert "did you mean" not in str(info.value)


@pytest.mark.parametrize("action", ["ls", "clear"])
def test_cache_with_an_unknown_kind_is_exit_2_naming_the_kinds(action, tmp_path, capsys):
    from harness.artifacts.cache import ArtifactCache
    from harness.cli import main

    (tmp_path / "onnx" / "mlp-0123").mkdir(parents=True)
    (tmp_path / "plugin-kind").mkdir()
    assert main(["cache", action, "--kind", "bogus", "--cache-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("harness cache: error: --kind 'bogus': no such kind") and "kinds: onnx, " in err
    assert main(["cache", action, "--kind", "onxx", "--cache-dir", str(tmp_path)]) == 2
    assert "(did you mean 'onnx'" in capsys.readouterr().err
    for kind in ("onnx", "tvm-tuned", "plugin-kind"):  # known, or present in this cache: taken
        assert main(["cache", "ls", "--kind", kind, "--cache-dir", str(tmp_path)]) == 0
    assert (tmp_path / "onnx" / "mlp-0123").is_dir() and ArtifactCache(tmp_path).kinds()[-1] == "plugin-kind"


def test_the_known_cache_kinds_are_those_the_builds_write():
    """Every literal kind given to get_or_build in harness/ and models/ is in KNOWN_KINDS (f-string kinds: each
    of their values), so `cache ls --kind` never refuses a kind the harness writes."""
    import re

    from harness.artifacts.cache import KNOWN_KINDS
    from harness.artifacts.transform import TRANSFORMS
    from harness.profile.ceilings import CEILINGS_KIND

    root = Path(__file__).resolve().parents[1]
    literal = set()
    for f in [*root.glob("harness/**/*.py"), *root.glob("models/*.py")]:
        literal |= set(re.findall(r"get_or_build\(\s*\"([a-z0-9-]+)\"", f.read_text()))
    assert literal and literal <= set(KNOWN_KINDS), literal - set(KNOWN_KINDS)
    assert {f"onnx-{t}" for t in TRANSFORMS} | {CEILINGS_KIND} <= set(KNOWN_KINDS)


@pytest.mark.parametrize("argv", [["run", "--precision", "int8"], ["run", "--model", "mlp", "--runtime", "ort-cpu"],
                                  ["gate", "main", "--ab-pair", "4"], ["ab", "base", "opt=basic", "--detec", "5"]])
def test_an_abbreviated_option_is_refused_not_taken_for_another(argv, capsys):
    """`--precision int8` was read as `--precisions int8` (argparse's allow_abbrev) and ran a whole matrix."""
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert f"unrecognized arguments: {argv[-2]}" in err or f"unrecognized arguments: {argv[1]}" in err, err
    assert "did you mean" in err


def test_harness_runtimes_columns_line_up(capsys):
    """`torch-compile-cpu` and `ort-cuda-h2h` pushed their rows' columns out of line."""
    assert main(["runtimes"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if " device=" in line]
    assert len(lines) > 5
    for word in ("device=", "precisions="):
        assert len({line.index(word) for line in lines}) == 1, word
    starts = {re.match(r"\S+\s+device=\S+\s+precisions=\S+\s+", line).end() for line in lines}
    assert len(starts) == 1  # every state starts in one column


def test_a_ctrl_c_an_extension_turned_into_a_case_error_still_exits_130(monkeypatch, capsys):
    """Under load, a Ctrl-C in the first seconds of `harness ab` landed inside an extension's import, which turned
    it into an error of its own: the case became an error row and the command exited 1 as if a case had broken.
    A Ctrl-C seen before the session took over makes the command's exit 130, whatever the command returned."""
    from harness import cli
    from harness.commands.common import Command

    def swallowed(args):
        cli._SIGINTS.append(2)  # what _on_sigint records before raising inside the extension's import
        return 1  # the command went on: one case errored

    monkeypatch.setitem(cli.COMMANDS, "models", Command(swallowed, plugins=False))
    assert cli.main(["models"]) == 130
    assert capsys.readouterr().err.strip() == "harness models: interrupted"
