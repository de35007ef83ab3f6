"""`harness run | report | models | runtimes | variants | env | envs | bisect | ceilings | cache | baseline | compare |
gate | gate-check | qualify | history | conform | ab`: thin commands over the library and the pytest suites."""

from __future__ import annotations

import sys

try:  # Ctrl-C while these load (about a second: the config pulls numpy, platform probes) is one line, 130
    import argparse
    import importlib.util
    import json
    import signal
    import time
    from importlib.metadata import entry_points
    from pathlib import Path
    from typing import TYPE_CHECKING, Any, Sequence

    from harness.commands import gate as gate_command
    from harness.display import visible
    from harness.errors import HarnessError, UsageError
    from harness.options import (
        AB,
        BUILD,
        CONFORMANCE,
        FORWARD,
        INPUTS,
        MODELS,
        OUTPUTS,
        PROCESS,
        RUN_GROUPS,
        RUNTIMES,
        TIMING,
        OptionGroup,
        add_options,
        parse_run_options,
    )
except KeyboardInterrupt:
    # Nothing has run yet: one line and 130, ending the process here. A SystemExit raised from a module being
    # imported by runpy (python -m harness.cli) could still end as a death by SIGINT (exit -2): seen in CI.
    import os

    print("harness: interrupted", file=sys.stderr)
    sys.stderr.flush()
    os._exit(130)

if TYPE_CHECKING:
    from harness.config import RunConfig
    from harness.results.schema import CaseId

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
EXIT_BROKEN_PIPE = 128 + 13  # SIGPIPE


class _Parser(argparse.ArgumentParser):
    """argparse with "did you mean" (difflib) for a mistyped option or command (`--bach-sizes`, `rnu`); its
    subcommands' parsers are of this class too (add_subparsers makes them of the parser's own type)."""

    def error(self, message: str) -> Any:  # type: ignore[override]
        from harness.errors import did_you_mean

        if message.startswith("unrecognized arguments: "):
            options = self._option_strings_below()
            message = "unrecognized arguments: " + " ".join(
                tok + (did_you_mean(tok.split("=", 1)[0], options) if tok.startswith("--") else "")
                for tok in message.removeprefix("unrecognized arguments: ").split())
        elif message.startswith("argument COMMAND: invalid choice: ") or " invalid choice: " in message:
            word = message.split("invalid choice: ", 1)[1].split(" (choose from", 1)[0].strip("'\"")
            choices = [c for a in self._actions if a.choices for c in a.choices]
            message += did_you_mean(word, choices)
        return super().error(message)

    def _option_strings_below(self) -> list[str]:
        """Every --option of this parser and of its subcommands' parsers, at any depth."""
        out: list[str] = []
        todo: list[argparse.ArgumentParser] = [self]
        while todo:
            parser = todo.pop()
            for action in parser._actions:
                out += [o for o in action.option_strings if o.startswith("--")]
                if isinstance(action, argparse._SubParsersAction):
                    todo += list(action.choices.values())
        return out


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="harness", description="Benchmark and conformance harness for ML inference.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="run the matrix (pytest on the bundled suites) and write results + report",
                         description="Run the matrix. Arguments after `--` go to pytest unchanged.")
    _add_groups(run, RUN_GROUPS)
    run.add_argument("pytest_args", nargs=argparse.REMAINDER, help="-- then extra pytest arguments")

    rep = sub.add_parser("report", help="render report.html, summary.md, results.csv (and benchmark.json) from "
                                        "stored results; several runs merge side by side",
                         description="Render from stored results. Several results files (other machines, other "
                                     "thread settings) become columns labelled by machine, never averaged.")
    rep.add_argument("results", nargs="+", help="results.json files (or folders holding one)")
    rep.add_argument("-o", "--out", help="output folder (default: the results file's folder; required with "
                                         "several results files)")
    rep.add_argument("--baseline", metavar="NAME|PATH", help="show verdicts of each run against this baseline "
                                                             "(a stored name or a results.json path)")
    rep.add_argument("--gate", action="append", metavar="SPEC", help="gate for --baseline, e.g. median:10%% "
                                                                      "(repeatable; default median:10%%)")
    rep.add_argument("--gate-config", metavar="FILE", help="TOML gate configuration for --baseline")
    rep.add_argument("--history", metavar="URL", help="add the trend section: each case's p50/p99 over the runs "
                                                      "recorded in this history database (one results file)")

    _gating_parsers(sub)
    _history_parsers(sub)
    _conform_parser(sub)
    _ab_parser(sub)
    gate_command.add_parser(sub)
    from harness.commands import recommend as _recommend  # harness recommend: its parser and run (#43)

    _recommend.add_parser(sub)
    _envs_parsers(sub)
    sub.add_parser("models", help="list the model zoo (and models added by plugins)")
    sub.add_parser("runtimes", help="list runtimes and whether each can run here (with the reason)")
    sub.add_parser("variants", help="list the deployment-variant kinds (--variants KIND=VALUE) and which runtimes "
                                    "take each")
    sub.add_parser("env", help="print the environment snapshot recorded with every run (JSON)")

    ceil = sub.add_parser("ceilings", help="this machine's measured peak FLOP/s per precision and memory bandwidth "
                                           "(measured once per machine and thread count, then cached)")
    ceil.add_argument("--threads", type=_positive_int, help="threads (default: the CPUs this process may use)")
    ceil.add_argument("--remeasure", action="store_true", help="measure again even if this machine's are cached")
    ceil.add_argument("--cache-dir", help="cache folder (default: $HARNESS_CACHE_DIR or ~/.cache/harness)")
    ceil.add_argument("--json", action="store_true", help="print the stored record as JSON")

    cache = sub.add_parser("cache", help="list or clear the artifact cache (ONNX exports, trained weights)")
    cache_sub = cache.add_subparsers(dest="cache_command", required=True, metavar="ACTION")
    for action, text in (("ls", "list entries: kind, label, key, size, age, path"),
                         ("clear", "remove entries (safe while another run uses the cache: docs/method.md)")):
        a = cache_sub.add_parser(action, help=text)
        a.add_argument("--cache-dir", help="cache folder (default: $HARNESS_CACHE_DIR or ~/.cache/harness)")
        a.add_argument("--kind", help="only entries of this kind (onnx, weights, ...)")
    return p


def _add_groups(parser: argparse.ArgumentParser, groups: tuple[OptionGroup, ...]) -> None:
    """A command's options: the option groups it composes (harness.options), one argparse group each."""
    made: dict[str, Any] = {}

    def add(group: OptionGroup, *flags: str, **kw: Any) -> None:
        if group.name not in made:
            made[group.name] = parser.add_argument_group(group.title)
        made[group.name].add_argument(*flags, **kw)

    add_options(add, groups)


# `harness conform`: the conformance workload's groups, with its own defaults (one thread, 60 s per case)
CONFORM_GROUPS = (RUNTIMES, CONFORMANCE, PROCESS.with_defaults(threads="1", case_timeout="60"), OUTPUTS)
# `harness gate-check`: a small matrix measured many times
GATE_CHECK_GROUPS = (MODELS.with_defaults(models="mlp", batch_sizes="1", seq_lens="32").only(
                         "models", "batch_sizes", "seq_lens"),
                     RUNTIMES.with_defaults(runtimes="torch-cpu,ort-cpu"), FORWARD.only("variants"),
                     TIMING.with_defaults(min_time="0.5", min_iters="20").only("min_time", "min_iters", "repeats"),
                     PROCESS.only("threads"),
                     AB.only("ab_pairs", "ab_block_time", "ab_min_effect", "ab_confidence"))


# `harness bisect RUNTIME --versions ...`: one case, measured on each release it needs
BISECT_GROUPS = (MODELS.with_defaults(batch_sizes="1", seq_lens="128").only("models", "model", "shape", "batch_sizes",
                                                                             "seq_lens"),
                 RUNTIMES.only("precisions"), TIMING, FORWARD.only("variants", "settle", "profile"), PROCESS, INPUTS,
                 BUILD, OUTPUTS)


def _envs_parsers(sub: Any) -> None:
    """`envs ls|build|clear` and `bisect` (harness.envs: runtime environments)."""
    e = sub.add_parser("envs", help="list, build or remove the runtimes' own environments (harness cache envs/)")
    esub = e.add_subparsers(dest="envs_command", required=True, metavar="ACTION")
    ls = esub.add_parser("ls", help="list environments: key, requirements, packages, size, last used")
    build = esub.add_parser("build", help="build the environments these runtimes need (e.g. ort-openvino,"
                                          "ort-cpu@1.24.4,litert-cpu); those already built are checked and kept")
    build.add_argument("runtimes", help="comma-separated runtime names, NAME@VERSION for a release")
    build.add_argument("--env-wheels", metavar="DIR", help="install from this folder of wheels only (offline)")
    clear = esub.add_parser("clear", help="remove environments (all, or those whose key starts with KEY)")
    clear.add_argument("keys", nargs="*", metavar="KEY", help="keys or key prefixes (default: every environment)")
    for a in (ls, build, clear):
        a.add_argument("--cache-dir", help="cache folder (default: $HARNESS_CACHE_DIR or ~/.cache/harness)")

    b = sub.add_parser("bisect", help="the first release of a runtime's package where one case's latency (by the "
                                      "gate) or outputs (by the drift tolerance) changed",
                       description="Measure one case (--models x shape x --precisions) on releases of RUNTIME's "
                                   "package, each in an environment of its own (RUNTIME@VERSION), by binary search: "
                                   "the two ends, then halves. Each release is judged against the oldest by "
                                   "compare's gate and drift verdicts. Exit 1 when a change was found, 0 when none, "
                                   "3 when a step could not be judged (contended, too few samples: the search "
                                   "stops with `could not judge between X and Y`; --allow-unjudged: 0), 2 on bad "
                                   "options (a reversed A..B), 130/143 when stopped by SIGINT/SIGTERM.")
    b.add_argument("runtime", metavar="RUNTIME", help="a runtime with a package to pin, e.g. ort-cpu")
    b.add_argument("--versions", required=True, metavar="A..B|V1,V2,...",
                   help="A..B: every release from A to B that pip can install here (either end may be left out); "
                        "or the releases, comma-separated")
    _add_groups(b, BISECT_GROUPS)
    b.add_argument("--gate", action="append", metavar="SPEC",
                   help="STAT:PERCENT, e.g. median:10%% (repeatable; default median:10%%)")
    b.add_argument("--gate-config", metavar="FILE", help="TOML file: gates, per-model overrides, confidence")
    allow_unjudged_arg(b, "a release")


# `harness ab A B`: one or a few cases, both sides interleaved in one worker
AB_GROUPS = (MODELS.with_defaults(batch_sizes="1", seq_lens="128").only("models", "model", "shape", "batch_sizes",
                                                                         "seq_lens"),
             RUNTIMES.with_defaults(runtimes="ort-cpu").only("runtimes", "precisions"),
             AB.only("ab_pairs", "ab_block_time", "ab_min_effect", "ab_confidence", "ab_seed", "ab_detect"),
             TIMING.only("warmup", "contention_limit"), PROCESS, INPUTS, BUILD, OUTPUTS)


def _ab_parser(sub: Any) -> None:
    c = sub.add_parser("ab", help="interleaved A/B: two variants or two model files of the same cases, measured "
                                  "in alternating blocks in one worker and judged by a paired test",
                       description="Measure side A and side B of each case (--models x --runtimes x --precisions x "
                                   "shapes) interleaved: both activated once in the same supervised worker, then "
                                   "--ab-pairs pairs of short blocks, AB or BA in a balanced random order; B/A is "
                                   "the Hodges-Lehmann estimate of the pairs' median ratios with a signed-rank interval. Verdicts as "
                                   "compare's: pass, regressed, improved, noise, inconclusive (contended blocks). "
                                   "Each case also says the smallest slowdown its pairs can detect. Exit 1 when a "
                                   "case regressed or could not be measured (error, crash, timeout, out of memory), "
                                   "3 when a case was not judged (inconclusive, or an interval too wide; "
                                   "--allow-unjudged: 0), 0 otherwise, 2 on bad options.")
    c.add_argument("ab_a", metavar="A", help="side A (the baseline): base, a variant spelling such as opt=basic "
                                             "(`harness variants`), or an .onnx file")
    c.add_argument("ab_b", metavar="B", help="side B (the candidate), as A")
    _add_groups(c, AB_GROUPS)
    c.add_argument("--detect", dest="ab_detect", metavar="PERCENT", help="the same as --ab-detect")
    allow_unjudged_arg(c, "a case (inconclusive: contended, too few clean pairs)")


def _conform_parser(sub: Any) -> None:
    c = sub.add_parser("conform", help="operator conformance: ONNX's backend test cases on every runtime that "
                                       "runs an ONNX model (docs/conformance.md)",
                       description="Run ONNX's backend node cases (and light models) of the installed onnx on each "
                                   "runtime and precision, each case in a supervised worker (the run session of "
                                   "`harness run --workload conform`); write results.json after every case and "
                                   "conformance.html. Exit 0 when the run finished (gate with `harness compare`), 2 "
                                   "on bad options, 130/143 when interrupted (finished cases kept).")
    _add_groups(c, CONFORM_GROUPS)
    c.add_argument("--list", action="store_true", help="list the selected cases (name, operator, opset) only")


def allow_unjudged_arg(p: argparse.ArgumentParser, what: str = "a gated timing row") -> None:
    """--allow-unjudged of a command that decides (harness.gating.unjudged)."""
    p.add_argument("--allow-unjudged", action="store_true",
                   help=f"exit 0 although {what} was not judged (contended, too few samples or clean pairs, a "
                        "changed model); the last line still names them (default: exit 3)")


def _gating_parsers(sub: Any) -> None:
    """`baseline save|ls`, `compare`, `gate-check`, `qualify` (harness.gating)."""
    base = sub.add_parser("baseline", help="store and list named baselines (for --baseline NAME)")
    bsub = base.add_subparsers(dest="baseline_command", required=True, metavar="ACTION")
    save = bsub.add_parser("save", help="store one or more runs (oldest first) as the baseline NAME")
    save.add_argument("results", nargs="+", help="results.json files (or the folders holding them), oldest first")
    save.add_argument("--name", required=True, help="baseline name, e.g. main")
    save.add_argument("--dir", help="baselines folder (default: $HARNESS_BASELINE_DIR or .harness/baselines)")
    save.add_argument("--allow-incomplete", action="store_true", help="accept an interrupted run")
    save.add_argument("--append", action="store_true",
                      help="add the runs after those NAME holds (a rolling baseline) instead of replacing it")
    save.add_argument("--keep", type=int, metavar="K", help="keep only the newest K runs (e.g. --append --keep 5)")
    ls = bsub.add_parser("ls", help="list stored baselines")
    ls.add_argument("--dir", help="baselines folder (default: $HARNESS_BASELINE_DIR or .harness/baselines)")
    ls.add_argument("--json", action="store_true", help="print JSON")

    def gate_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--gate", action="append", metavar="SPEC",
                       help="STAT:PERCENT, e.g. median:10%% or p99:20%% (repeatable; default median:10%%)")
        p.add_argument("--gate-config", metavar="FILE", help="TOML file: gates, per-model overrides, confidence")

    cmp = sub.add_parser("compare", help="verdicts of CURRENT against BASELINE (exit 1 on regression, 3 when a "
                                         "gated timing row was not judged)")
    cmp.add_argument("baseline", help="a stored baseline name or a results.json path")
    cmp.add_argument("current", help="a results.json (or the folder holding it)")
    gate_args(cmp)
    cmp.add_argument("--markdown", metavar="FILE", help="also write the Markdown verdict table here")
    cmp.add_argument("--json", metavar="FILE", help="also write the verdicts as JSON here")
    cmp.add_argument("--all", action="store_true", help="print pass rows too")
    cmp.add_argument("--verbose", action="store_true",
                     help="print the method paragraph, the gate's measured false-alarm rate and whole reasons")
    allow_unjudged_arg(cmp)

    gc = sub.add_parser("gate-check", help="measure the gate here: A/A false alarms and power at injected "
                                           "slowdowns (self-test)")
    _add_groups(gc, GATE_CHECK_GROUPS)  # the matrix and timing options of `harness run`, with gate-check's defaults
    gc.add_argument("--rounds", type=int, default=6, help="simulated runs per case (A/A pairs; default 6)")
    gc.add_argument("--levels", default="5,10,15,20,30",
                    help="injected slowdowns in percent of the median (default: 5,10,15,20,30)")
    gc.add_argument("--out", help="write gatecheck.json and gatecheck.md into this folder")
    gc.add_argument("--ab", action="store_true",
                    help="measure `harness ab` instead of compare: per case and round, the case A/B against itself "
                         "(false alarms) and with B slowed by each level (power), in one worker per round")
    gc.add_argument("--nightly", metavar="BASELINE",
                    help="measure `harness gate BASELINE` instead: per round, one whole gate run with nothing changed "
                         "(false alarms) and one per level with side B slowed (power); the baseline's cases, "
                         "filtered by --models/--runtimes only when given")
    gate_args(gc)

    q = sub.add_parser("qualify", help="run a qualification spec (TOML) and write a PASS/FAIL certificate")
    q.add_argument("spec", help="the spec file, e.g. specs/cpu-2core.toml")
    q.add_argument("--out", help="output folder (default: reports/qualify-NAME-YYYYmmdd-HHMMSS)")
    q.add_argument("--results", help="judge this results.json instead of running the cases")


def _history_parsers(sub: Any) -> None:
    """`history add|ls|cases|show|changes` (harness.history: docs/history.md)."""
    h = sub.add_parser("history", help="record runs in a database and list their history and change points")
    hsub = h.add_subparsers(dest="history_command", required=True, metavar="ACTION")
    actions = {
        "add": hsub.add_parser("add", help="record stored runs (results.json files or their folders)"),
        "ls": hsub.add_parser("ls", help="list recorded runs, oldest first"),
        "cases": hsub.add_parser("cases", help="list the recorded case ids (what `show` takes)"),
        "show": hsub.add_parser("show", help="one case's figures over the recorded runs, per machine (without a "
                                             "case: the recorded case ids)"),
        "changes": hsub.add_parser("changes", help="change points in every case's history (ruptures PELT + "
                                                   "Welch t-test), with the runs and commits around them"),
    }
    actions["add"].add_argument("results", nargs="+", help="results.json files (or folders holding one)")
    actions["show"].add_argument("case", nargs="?", help="a case id, e.g. mlp-ort-cpu-fp32-b1 (without one: "
                                                         "the recorded case ids)")
    for name in ("show", "changes"):
        actions[name].add_argument("--metric", default="p50", choices=("p50", "p99", "throughput"),
                                   help="the figure (default: p50 latency)")
    ch = actions["changes"]
    ch.add_argument("--last", type=int, metavar="N", help="only change points whose first run after the change "
                                                          "is among the newest N runs of its series (nightly: new "
                                                          "ones)")
    ch.add_argument("--max-pvalue", type=float, metavar="P", help="significance of a change (default: 0.0001)")
    ch.add_argument("--min-change", type=float, metavar="PERCENT", help="smallest change to list (default: 0)")
    ch.add_argument("--markdown", metavar="FILE", help="also write the list as Markdown here (a CI summary)")
    ch.add_argument("--confirm", action="store_true",
                    help="re-measure each listed regression: an interleaved A/B (`harness ab`) of the model files "
                         "recorded on either side must agree, else it is reported unconfirmed, not a regression; "
                         "without --confirm (or where they cannot be re-measured) regressions are marked "
                         "unconfirmed with the reason")
    ch.add_argument("--fail-on", choices=("regression", "improvement", "any"), metavar="KIND",
                    help="exit 1 when a listed change point is of this kind: regression (a slowdown, or a "
                         "throughput drop), improvement or any; with --last N, only those in the newest N runs")
    for a in actions.values():
        a.add_argument("--history", metavar="URL", help="SQLAlchemy database URL or SQLite file (default: "
                                                         "$HARNESS_HISTORY, else history.db in the user data "
                                                         "folder)")
        a.add_argument("--json", action="store_true", help="print JSON") if a is not actions["add"] else None


# commands that resolve model or runtime names: they load the plugins (the zoo, user packages) first
USES_REGISTRIES = {"run", "report", "models", "runtimes", "variants", "ab", "gate", "gate-check", "qualify", "conform", "envs",
                   "bisect"}


def main(argv: Sequence[str] | None = None) -> int:
    """The `harness` command. Safe to pipe and to interrupt at any moment: a reader that goes away (`harness
    env | head`) ends the command quietly with 141 (128 + SIGPIPE, what a shell reports for `yes | head`);
    Ctrl-C before a run's session exists is one line and 130 (a session handles it itself: finished cases
    kept)."""
    command = "harness"
    previous = _watch_sigint()
    try:
        args = _parser().parse_args(argv)
        command = f"harness {args.command}"
        status = _dispatch(args)
        sys.stdout.flush()  # a closed pipe fails here, inside the handler, not in the interpreter's last flush
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt as exc:  # Ctrl-C, or the signal a run session stopped on (SignalStop: 130, 143)
        signum = getattr(exc, "signum", signal.SIGINT)
        try:
            print(f"{command}: {'terminated' if signum == signal.SIGTERM else 'interrupted'}", file=sys.stderr)
        except (BrokenPipeError, OSError):
            pass
        status = 128 + int(signum)
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    if argv is None and status in (EXIT_INTERRUPTED, 128 + signal.SIGTERM):
        _exit_now(status)
    return status


_SIGINTS: list[int] = []


def _on_sigint(signum: int, frame: Any) -> None:
    _SIGINTS.append(signum)
    raise KeyboardInterrupt


def _watch_sigint() -> Any:
    """Python's own Ctrl-C behaviour, remembering that it happened: an extension that turns the
    KeyboardInterrupt raised inside its import into an error of its own (onnxruntime: `ImportError:
    initialization failed`, then "no runtime to run") is still an interrupt (130). Returns the handler to
    restore, None where SIGINT is not Python's default (ignored in a background job, or not the main thread)."""
    _SIGINTS.clear()
    try:
        if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
            return None
        return signal.signal(signal.SIGINT, _on_sigint)
    except ValueError:  # not the main thread
        return None


def _exit_now(status: int) -> None:
    """End the process with `status` now (what was measured is written by then). A KeyboardInterrupt that
    passed through code an extension ran with PyRun_* during an import marks the interpreter as killed by
    SIGINT, whatever the harness then returns: a normal exit would end as a death by SIGINT (-2), not 130
    or 143 (seen with Ctrl-C in the first seconds of `harness ab`)."""
    import os

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status)


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush of a closed pipe raises nothing."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _dispatch(args: argparse.Namespace) -> int:
    try:
        if args.command in USES_REGISTRIES:
            from harness.plugins import load_plugins

            load_plugins()
        return {"run": cmd_run, "report": cmd_report, "models": cmd_models, "runtimes": cmd_runtimes,
                "variants": cmd_variants, "env": cmd_env, "ceilings": cmd_ceilings, "cache": cmd_cache, "history": cmd_history, "baseline": cmd_baseline, "compare": cmd_compare, "gate-check": cmd_gate_check,
                "qualify": cmd_qualify, "conform": cmd_conform, "ab": cmd_ab, "envs": cmd_envs, "gate": gate_command.cmd_gate,
                "bisect": cmd_bisect, "recommend": cmd_recommend}[args.command](args)
    except HarnessError as exc:  # UsageError, ResultsError, ...: one line, control characters made visible
        if _SIGINTS:  # the error came of a Ctrl-C an import turned into its own error: an interrupt
            raise KeyboardInterrupt from exc
        print(f"harness {args.command}: error: {visible(exc)}", file=sys.stderr)
        return EXIT_USAGE


def pytest_args_for(args: argparse.Namespace) -> list[str]:
    """The pytest command line of `harness run`: the bundled suites and the extra pytest arguments. The run's
    options do not travel as strings: the parsed RunConfig goes to the plugin in-process (`RunConfigCarrier`)."""
    suites = suites_dir()
    out = [str(suites), "-c", str(suites / "pytest.ini"), "--rootdir", str(suites), "-q"]
    if not any(ep.name == "harness" for ep in entry_points(group="pytest11")):
        out += ["-p", "harness.pytest_plugin"]  # running from a source tree without installing
    extra = list(args.pytest_args or [])
    return out + (extra[1:] if extra[:1] == ["--"] else extra)


def suites_dir() -> Path:
    """The bundled pytest suites, found by path, never imported: `suites/` beside this package in a source
    checkout, else the installed `harness_suites` package's folder (its __init__ is not run)."""
    checkout = Path(__file__).resolve().parent.parent
    if (checkout / "pyproject.toml").is_file() and (checkout / "suites" / "pytest.ini").is_file():
        return checkout / "suites"
    spec = importlib.util.find_spec("harness_suites")
    for folder in (spec.submodule_search_locations or ()) if spec else ():
        if (Path(folder) / "pytest.ini").is_file():
            return Path(folder)
    raise UsageError("the bundled suites (harness_suites) are not installed: reinstall the harness")


def cmd_run(args: argparse.Namespace) -> int:
    import pytest

    from harness.pytest_plugin import RunConfigCarrier
    from harness.workloads import get_workload

    config = parse_run_options(vars(args), RUN_GROUPS)
    if not get_workload(config.workload).cases(config):
        raise UsageError("the matrix is empty: no case matches (check --models / --quick, or the conformance "
                         "filters)")
    if config.fleet.ray:
        from harness.execution.ray_shards import ray_run

        return ray_run(config)
    from harness.gating.verdicts import EXIT_UNJUDGED

    carrier = RunConfigCarrier(config)
    code = pytest.main(pytest_args_for(args), plugins=[carrier])
    if carrier.unjudged_line:  # the run's last line: how many gated rows were not judged, and which
        print(carrier.unjudged_line)
    if code in (128 + signal.SIGINT, 128 + signal.SIGTERM):  # stopped by a signal (the session set it)
        return int(code)
    if code == EXIT_UNJUDGED and carrier.gate_status == EXIT_UNJUDGED:  # --baseline: a gated row not judged
        return EXIT_UNJUDGED
    if code == pytest.ExitCode.OK:
        return EXIT_OK
    if code == pytest.ExitCode.INTERRUPTED:
        return EXIT_INTERRUPTED
    if code in (pytest.ExitCode.USAGE_ERROR, pytest.ExitCode.NO_TESTS_COLLECTED):
        return EXIT_USAGE
    return EXIT_FAILED


def cmd_report(args: argparse.Namespace) -> int:
    from harness.report import write_outputs
    from harness.report.tables import run_labels
    from harness.results.schema import load_results

    runs = [load_results(p) for p in args.results]
    if args.out:
        out = Path(args.out)
    elif len(runs) > 1:
        raise UsageError("several results files: say where the merged report goes with -o DIR")
    else:
        src = Path(args.results[0])
        out = src if src.is_dir() else src.parent
    verdicts, gate_note = None, None
    if args.baseline:
        from harness.gating import compare_runs, load_gate_config
        from harness.gating.baseline import load_baseline_runs
        from harness.report.verdicts import verdict_dicts

        base, gates = load_baseline_runs(args.baseline), load_gate_config(args.gate_config, args.gate or ())
        multi = len(runs) > 1
        labels = run_labels(runs)
        verdicts = []
        for path, run, label in zip(args.results, runs, labels):
            cmp = compare_runs(base, run, gates, baseline_label=str(args.baseline), current_label=str(path))
            verdicts += verdict_dicts(cmp, label if multi else None)
            print(f"verdicts vs {args.baseline}: {cmp.summary()}")
        gate_note = gates.measured_line()
    trends = None
    if args.history:
        from harness.history import open_history
        from harness.history.record import trend_rows

        if len(runs) > 1:
            raise UsageError("--history draws the trend of one run: give one results file")
        history = open_history(args.history)
        try:
            trends = trend_rows(history, runs[0])
        finally:
            history.close()
    for name, path in write_outputs(runs, out, verdicts, args.baseline, gate_note, trends=trends).items():
        print(f"{name:>9}: {path}")
    for path, run in zip(args.results, runs):
        if not run.complete:
            print(f"note: {path}: this run is incomplete (interrupted or killed): the report shows the cases "
                  "that finished")
    return EXIT_OK


def cmd_models(args: argparse.Namespace) -> int:
    from harness.model import all_models

    for s in all_models():
        inputs = ", ".join(f"{t.name}{list(t.shape)}:{t.dtype}" for t in s.inputs)
        print(f"{s.name:<14} {s.task:<15} tags={','.join(sorted(s.tags)) or '-':<16} {inputs}")
        if s.description:
            print(f"{'':<14} {s.description}")
        if s.unavailable_reason():
            print(f"{'':<14} unavailable here (its cases are skipped): {s.unavailable_reason()}")
    return EXIT_OK


def cmd_runtimes(args: argparse.Namespace) -> int:
    from harness.runtimes import get_runtime, runtime_names

    from harness.envs import environment_for

    for name in runtime_names():
        cls = get_runtime(name)
        spec = environment_for(cls)
        avail = cls.availability()
        precisions = ",".join(sorted(p.value for p in cls.precisions))
        state = "available" if avail else f"unavailable: {avail.reason}"
        if spec is not None:  # `harness run` builds its environment on first use (harness envs)
            state = f"in an environment of its own ({spec.label}; built on first use)"
        print(f"{name:<12} device={cls.device:<5} precisions={precisions:<16} {state}")
    return EXIT_OK


def cmd_variants(args: argparse.Namespace) -> int:
    from harness.runtimes import get_runtime, runtime_names
    from harness.variants import KINDS

    for kind in KINDS.values():
        takers = [n for n in runtime_names() if kind.needs is None or kind.needs in get_runtime(n).variant_hooks]
        print(f"{kind.key}=  {kind.values}\n    {kind.title}\n    runtimes: "
              f"{'every runtime' if kind.needs is None else ', '.join(takers)}"
              + (f"; precisions: {', '.join(sorted(p.value for p in kind.precisions))}" if kind.precisions else ""))
    return EXIT_OK


def cmd_env(args: argparse.Namespace) -> int:
    from harness.measure.timer import measure_overhead
    from harness.results.environment import default_threads, snapshot

    env = snapshot(threads=default_threads())
    env["harness_overhead"] = measure_overhead()
    print(json.dumps(env, indent=2, default=str))
    return EXIT_OK


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def cmd_ceilings(args: argparse.Namespace) -> int:
    from harness.profile.ceilings import ceilings_text, machine_ceilings
    from harness.results.environment import default_threads

    ceilings = machine_ceilings(args.threads or default_threads(),
                                Path(args.cache_dir).expanduser() if args.cache_dir else None,
                                remeasure=args.remeasure)
    print(json.dumps(ceilings, indent=2) if args.json else ceilings_text(ceilings))
    return EXIT_OK


def cmd_cache(args: argparse.Namespace) -> int:
    from harness.artifacts.cache import ArtifactCache

    cache = ArtifactCache(Path(args.cache_dir).expanduser() if args.cache_dir else None)
    cache.check_kind(args.kind)
    if args.cache_command == "clear":
        removed, freed = cache.clear(args.kind)
        print(f"removed {removed} entr{'y' if removed == 1 else 'ies'} ({_size(freed)}) from {cache.root}")
        return EXIT_OK
    entries = cache.list(args.kind)
    if not entries:
        print(f"{cache.root}: no cache entries" + (f" of kind {args.kind!r}" if args.kind else ""))
        return EXIT_OK
    print(f"{'KIND':<10} {'LABEL':<22} {'KEY':<16} {'SIZE':>9} {'AGE':>7}  PATH")
    for e in entries:
        print(f"{e.kind:<10} {e.label[:22]:<22} {e.key[:16]:<16} {_size(e.size_bytes):>9} "
              f"{_age(e.age_s):>7}  {e.path}")
    total = sum(e.size_bytes for e in entries)
    print(f"{len(entries)} entr{'y' if len(entries) == 1 else 'ies'}, {_size(total)} in {cache.root}")
    return EXIT_OK


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def _age(seconds: float) -> str:
    for unit, span in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= span:
            return f"{seconds / span:.0f}{unit}"
    return f"{seconds:.0f}s"


def cmd_baseline(args: argparse.Namespace) -> int:
    from harness.gating import baseline

    if args.baseline_command == "save":
        path = baseline.save_baseline(args.results, args.name, args.dir, allow_incomplete=args.allow_incomplete,
                                      append=args.append, keep=args.keep,
                                      warn=lambda line: print(visible(line), file=sys.stderr))
        runs = baseline.load_baseline_runs(path)
        print(f"saved baseline {args.name!r} ({len(runs)} run{'s' if len(runs) > 1 else ''}: "
              f"{visible(', '.join(r.run_id for r in runs))}): {path}")
        print(f"for `harness gate`: {visible(baseline.artifact_summary(baseline.load_replay(path)))} in "
              f"{path.parent / baseline.BLOBS}")
        return EXIT_OK
    infos = baseline.list_baselines(args.dir)
    if args.json:
        print(baseline.as_json(infos))
    elif not infos:
        print(f"no baselines in {baseline.baseline_dir(args.dir)}")
    for info in infos if not args.json else ():
        print(baseline.describe(info))
    return EXIT_OK


def cmd_compare(args: argparse.Namespace) -> int:
    from harness.gating import compare_runs, load_gate_config, load_run
    from harness.gating.baseline import load_baseline_runs
    from harness.gating.compare import comparison_json
    from harness.report.verdicts import verdicts_markdown, verdicts_text
    from harness.results.store import atomic_write_text

    gates = load_gate_config(args.gate_config, args.gate or ())
    comparison = compare_runs(load_baseline_runs(args.baseline), load_run(args.current), gates,
                              baseline_label=str(args.baseline), current_label=str(args.current),
                              allow_unjudged=args.allow_unjudged)
    md = verdicts_markdown(comparison)
    print(verdicts_text(comparison, only_changes=not args.all, verbose=args.verbose), end="")
    if args.markdown:
        atomic_write_text(args.markdown, md)
    if args.json:
        atomic_write_text(args.json, comparison_json(comparison))
    print(comparison.summary())
    unjudged = comparison.unjudged_line()
    if unjudged:  # the last line: how many gated rows were not judged, and which
        print(unjudged)
    return comparison.exit_code


def cmd_gate_check(args: argparse.Namespace) -> int:
    from harness.execution.gatecheck_run import SupervisedRuns
    from harness.gating import load_gate_config
    from harness.gating.gatecheck import gate_check
    from harness.report.gatecheck import gatecheck_html, gatecheck_markdown
    from harness.report.terminal import markdown_as_text
    from harness.results.environment import snapshot
    from harness.results.store import atomic_write_text
    from harness.workloads import get_workload

    try:
        levels = tuple(float(x) / 100.0 for x in args.levels.split(",") if x.strip())
    except ValueError:
        raise UsageError(f"--levels {args.levels!r}: expected percentages like 5,10,20") from None
    if not levels or any(not 0 < lv < 10 for lv in levels):
        raise UsageError(f"--levels {args.levels!r}: each level must lie between 0 and 1000 percent")
    if args.rounds < 2:
        raise UsageError("--rounds must be at least 2 (A/A pairs need two runs)")
    out = Path(args.out) if args.out else None
    if args.nightly:
        return gate_command.gate_check_nightly(args.nightly, args, levels, args.rounds, out)
    gates = load_gate_config(args.gate_config, args.gate or ())
    # its matrix and timing options parsed by the run options' groups (and their messages); each simulated run
    # is a run session of its own, writing under OUT/runs/ (a temporary folder without --out)
    config = parse_run_options(vars(args), GATE_CHECK_GROUPS)
    import tempfile  # gate-check's groups have no --out of a run: its runs go under OUT/runs/ (or a temp folder)

    config = config.replace(out_dir=out / "runs" if out else Path(tempfile.mkdtemp(prefix="harness-gate-check-")))
    cases = get_workload(config.workload).cases(config)
    if args.ab:
        return _gate_check_ab(config, cases, levels, args.rounds, out)
    print(f"gate-check: {len(cases)} case(s) x {args.rounds} runs of {config.measure.repeats} block(s) x (1 + "
          f"{len(levels)} slowdown levels); {gates.describe()}")
    runs = SupervisedRuns(config)  # each simulated run a session with its own supervised worker
    result = gate_check(cases, gates, runs.measure, rounds=args.rounds, levels=levels,
                        repeats=config.measure.repeats, progress=print, execute=runs.execute)
    result.machine = str(snapshot(threads=config.measure.threads).get("machine", "?"))
    result.measured_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    md = gatecheck_markdown(result)
    print(markdown_as_text(md), end="")  # plain on the terminal; gatecheck.md keeps the Markdown
    if out is not None:
        atomic_write_text(out / "gatecheck.json", json.dumps(result.as_dict(), indent=1))
        from harness.gating.gatecheck import suggested_config

        atomic_write_text(out / "gates-suggested.toml", suggested_config(result))
        atomic_write_text(out / "gatecheck.md", md)
        atomic_write_text(out / "gatecheck.html", gatecheck_html(result))
        print(f"written: {out / 'gatecheck.json'}, {out / 'gatecheck.md'}, {out / 'gatecheck.html'}, "
              f"{out / 'gates-suggested.toml'} (the per-case run-to-run spread and these figures: pass it to "
              "compare/run with --gate-config and the verdict tables show them)")
    return EXIT_OK


def _gate_check_ab(config: RunConfig, cases: list[CaseId], levels: tuple[float, ...], rounds: int,
                   out: Path | None) -> int:
    from harness.execution.gatecheck_run import SupervisedAb
    from harness.gating.gatecheck import ab_gate_check
    from harness.report.terminal import markdown_as_text
    from harness.results.environment import snapshot
    from harness.results.store import atomic_write_text

    ab = config.ab
    print(f"gate-check --ab: {len(cases)} case(s) x {rounds} rounds x (A/A + {len(levels)} slowdown levels); "
          f"{ab.ab_pairs} pairs of {ab.ab_block_time_s:g} s blocks, minimum effect {ab.ab_min_effect:.0%}, "
          f"{ab.ab_confidence:.0%} interval")
    runs = SupervisedAb(config)
    result = ab_gate_check(cases, runs.verdict, trials=rounds, levels=levels, progress=print, execute=runs.execute)
    result.machine = str(snapshot(threads=config.measure.threads).get("machine", "?"))
    result.measured_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    md = result.markdown()
    print(markdown_as_text(md), end="")
    if out is not None:
        atomic_write_text(out / "gatecheck-ab.json", json.dumps(result.as_dict(), indent=1))
        atomic_write_text(out / "gatecheck-ab.md", md)
        print(f"written: {out / 'gatecheck-ab.json'}, {out / 'gatecheck-ab.md'}")
    return EXIT_OK


def cmd_history(args: argparse.Namespace) -> int:
    from harness.history import open_history
    from harness.history.text import history_command

    history = open_history(args.history)
    try:
        return history_command(history, args)
    finally:
        history.close()


def cmd_qualify(args: argparse.Namespace) -> int:
    import time

    from harness.execution.qualify_run import run_spec, spec_case
    from harness.gating import load_run
    from harness.gating.qualify import judge, load_spec
    from harness.report.certificate import certificate_text, write_certificate
    from harness.report.progress import RunProgress

    spec = load_spec(args.spec, spec_case)
    if args.results:
        results = Path(args.results)
        out = Path(args.out) if args.out else (results if results.is_dir() else results.parent)
    else:
        out = Path(args.out) if args.out else Path("reports") / f"qualify-{spec.name}-{time.strftime('%Y%m%d-%H%M%S')}"
        print(f"qualify {spec.name}: running {len(spec.cases)} case(s) into {out}")
        results = run_spec(spec, out, RunProgress())
    cert = judge(spec, load_run(results), results)
    print(certificate_text(cert))
    for name, path in write_certificate(cert, out).items():
        print(f"{name:>17}: {path}")
    if cert.unjudged_line():  # the last line: the requirements not judged, and why
        print(cert.unjudged_line())
    return cert.exit_code


def _session_cases(config: RunConfig, cases: list[CaseId]) -> tuple[Any, bool]:
    """Run `cases` of the config's workload through one run session (no pytest), one case line per broken case;
    returns (the session, finished; written and rendered either way) and prints the workload's terminal lines."""
    from harness.execution.session import HarnessSession
    from harness.report.progress import RunProgress
    from harness.workloads import get_workload

    session = HarnessSession(config, progress=RunProgress(case_lines=False))
    session.progress.start("case", len(cases))
    interrupted = False
    try:
        for case in cases:
            result = session.execute(case)
            if result.status in ("crashed", "timeout", "oom"):
                session.progress.note(f"  {result.case.id}: {result.status}: {visible(result.reason)}")
    except KeyboardInterrupt:
        interrupted = True
    finally:
        session.finish(interrupted=interrupted)
    if session.run is None:  # stopped while the session was starting: nothing measured, nothing written
        raise KeyboardInterrupt
    for line in get_workload(config.workload).terminal_lines(session.run):
        print(line)
    return session, not interrupted


def cmd_ab(args: argparse.Namespace) -> int:
    """`harness ab A B`: the A/B workload through the run session (as `harness run --workload ab --ab-a A --ab-b B`
    without pytest): each case in the supervised worker, results.json after every case, the report."""
    import os

    from harness.gating.ab import ab_records, detect_line, pair_log_ratios
    from harness.gating.unjudged import decide_exit, unjudged_line
    from harness.workloads import get_workload

    raw = dict(vars(args))
    files = [s for s in (args.ab_a, args.ab_b) if s.endswith(".onnx") or os.path.sep in s]
    if files:  # model-file sides are user models of the run
        raw["model"] = list(dict.fromkeys([*(raw.get("model") or []), *files]))
    config = parse_run_options(raw, (*AB_GROUPS, AB.only("ab_a", "ab_b")), out_prefix="ab-", workload="ab")
    workload = get_workload("ab")
    cases = workload.cases(config)
    if not cases:
        raise UsageError("no case to measure: give --models and --runtimes")
    out = config.outputs.out_dir
    from harness.gating.ab import DETECT_MAX_PAIRS, DETECT_PILOT_PAIRS

    pairs = (f"pairs for --detect {config.ab.ab_detect:.1%} (a pilot of {DETECT_PILOT_PAIRS}, at most "
             f"{DETECT_MAX_PAIRS})" if config.ab.ab_detect else f"{config.ab.ab_pairs} pairs")
    print(f"{len(cases)} case(s): A = {config.ab.ab_a}, B = {config.ab.ab_b}, {pairs} of "
          f"{config.ab.ab_block_time_s:g} s blocks -> {out}")
    session, finished = _session_cases(config, cases)
    ab = config.ab
    for c in session.run.cases:  # what each case's budget can detect, from its clean pairs' spread
        if c.ab is not None:
            print(f"{c.case.id}: " + detect_line(pair_log_ratios(c.ab.blocks), ab.ab_confidence, ab.ab_min_effect,
                                                 ab.ab_detect))
    print(f"results: {out / 'results.json'}; report: {out / 'report.html'}")
    if session.exit_status() or not finished:
        return session.exit_status() or EXIT_INTERRUPTED
    from harness.results.schema import BROKEN

    # a case that could not be measured (error, crash, timeout, out of memory) is a failed run, as in `harness
    # run`: never 0 as if both sides had been compared (ab_records: verdict broke)
    broken = [c for c in session.run.cases if c.status in BROKEN]
    if broken:
        print(f"{len(broken)} case(s) not measured: " + ", ".join(f"{c.case.id} {c.status}" for c in broken[:5])
              + (" ..." if len(broken) > 5 else ""))
    records = ab_records(session.run.cases)
    line = unjudged_line(records, args.allow_unjudged, what="A/B cases")
    if line:  # the last line: the cases not judged, and why
        print(line)
    return decide_exit(records, args.allow_unjudged)


def cmd_recommend(args: argparse.Namespace) -> int:
    """`harness recommend`: harness.commands.recommend."""
    from harness.commands.recommend import run

    return run(args)


def cmd_envs(args: argparse.Namespace) -> int:
    """`harness envs ls | build | clear`: the runtimes' own environments in the cache."""
    from harness.artifacts.cache import default_cache_dir
    from harness.envs import EnvBuildError, EnvStore, environment_for
    from harness.options import wheel_folder
    from harness.runtimes import get_runtime

    store = EnvStore(Path(args.cache_dir).expanduser() if args.cache_dir else default_cache_dir())
    if args.envs_command == "clear":
        if any(not k.strip() for k in args.keys):  # '' is a prefix of every key: it would remove them all
            raise UsageError("envs clear: an empty KEY matches every environment; give no KEY to remove all "
                             "(`harness envs clear`), or the keys `harness envs ls` lists")
        removed = store.clear(tuple(args.keys))
        print(f"removed {len(removed)} environment(s) from {store.root}" + (f": {', '.join(removed)}" if removed
                                                                             else ""))
        return EXIT_OK
    if args.envs_command == "build":
        wheels = Path(wheel_folder(args.env_wheels, "env-wheels")) if args.env_wheels else None
        failed = 0
        for name in (n.strip() for n in args.runtimes.split(",") if n.strip()):
            spec = environment_for(get_runtime(name), "auto")
            if spec is None:
                print(f"{name}: runs in the harness's own environment (nothing to build)")
                continue
            t0 = time.perf_counter()
            try:
                env = store.ensure(spec, wheels=wheels, progress=print, who=name)
            except EnvBuildError as exc:
                print(f"{name}: {exc}")
                failed += 1
                continue
            print(f"{name}: {env.path} ready in {time.perf_counter() - t0:.1f} s")
        return EXIT_FAILED if failed else EXIT_OK
    envs = store.list()
    if not envs:
        print(f"{store.root}: no environments")
        return EXIT_OK
    print(f"{'KEY':<16} {'SIZE':>9} {'USED':>6}  REQUIREMENTS -> PACKAGES")
    for path, manifest in envs:
        size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())
        if manifest is None:
            print(f"{path.name:<16} {_size(size):>9} {'':>6}  (half-built or broken: rebuilt on next use)")
            continue
        used = _age(time.time() - (path / "harness-env.json").stat().st_mtime)
        pkgs = ", ".join(f"{k} {v}" for k, v in manifest.get("packages", {}).items())
        print(f"{path.name:<16} {_size(size):>9} {used:>6}  {', '.join(manifest['requirements'])} -> {pkgs}")
    print(f"{len(envs)} environment(s) in {store.root}")
    return EXIT_OK


def cmd_bisect(args: argparse.Namespace) -> int:
    """`harness bisect RUNTIME --versions A..B`: binary search over releases for one case (harness.envs)."""
    from harness.execution.bisect_run import run_bisect, version_range
    from harness.gating import load_gate_config
    from harness.results.store import atomic_write_text
    from harness.runtimes import get_runtime

    cls = get_runtime(args.runtime)
    if cls.distribution is None or cls.pinned_version is not None:
        raise UsageError(f"runtime {args.runtime!r}: bisect takes a runtime with a package to pin and no @VERSION "
                         "(e.g. ort-cpu)")
    raw = dict(vars(args))
    raw["runtimes"] = args.runtime
    config = parse_run_options(raw, (*BISECT_GROUPS, RUNTIMES.only("runtimes")), out_prefix="bisect-")
    gates = load_gate_config(args.gate_config, args.gate or ())
    wheels = config.process.env_wheels
    versions = version_range(args.versions, cls.distribution, Path(wheels) if wheels else None)
    print(f"bisect {args.runtime} ({cls.distribution}) over {len(versions)} releases: {', '.join(versions)} -> "
          f"{config.outputs.out_dir}")
    found = run_bisect(config, args.runtime, versions, gates)
    lines = found.lines()
    for line in lines:
        print(line)
    Path(config.outputs.out_dir).mkdir(parents=True, exist_ok=True)
    atomic_write_text(Path(config.outputs.out_dir) / "bisect.txt", "\n".join(lines) + "\n")
    if found.problem:
        return EXIT_USAGE
    if found.first_changed:
        return EXIT_FAILED
    if found.unjudged is not None:
        from harness.gating.verdicts import EXIT_UNJUDGED

        return EXIT_OK if args.allow_unjudged else EXIT_UNJUDGED
    return EXIT_OK


def cmd_conform(args: argparse.Namespace) -> int:
    """`harness conform`: the conformance workload through the run session (as `harness run --workload conform`,
    without pytest): each case in the supervised worker, results.json after every case, conformance.html."""
    from harness.workloads import get_workload
    from harness.workloads.conform.cases import collect
    from harness.workloads.conform.workload import resolve_runtimes

    config = parse_run_options(vars(args), CONFORM_GROUPS, out_prefix="conform-", workload="conform")
    runtimes, left_out = resolve_runtimes(config.matrix.runtimes, config.matrix.precisions)
    if args.list:
        cases = collect(config.conformance)
        for c in cases:
            print(f"{c.name}  {c.op}  opset {c.opset}  {c.kind}")
        print(f"{len(cases)} case(s)")
        return EXIT_OK
    for name, why in left_out.items():
        print(f"left out {name}: {why}")
    if not runtimes:
        raise UsageError("no runtime to run: " + ("; ".join(f"{k}: {v}" for k, v in left_out.items()) or "none"))
    workload = get_workload("conform")
    cases = workload.cases(config)
    if not cases:
        raise UsageError("no conformance case matches the filters (try `harness conform --list` with them)")
    out = config.outputs.out_dir
    print(f"{len(cases)} run(s): {', '.join(r.name for r in runtimes)} x "
          f"{', '.join(map(str, config.matrix.precisions))} -> {out}")
    t0 = time.perf_counter()
    session, finished = _session_cases(config, cases)
    print(f"wall {time.perf_counter() - t0:.0f} s; results: {out / 'results.json'}; page: {out / 'conformance.html'}")
    return session.exit_status() or (EXIT_OK if finished else EXIT_INTERRUPTED)


if __name__ == "__main__":
    sys.exit(main())
