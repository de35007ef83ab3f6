"""`harness run` (the matrix through pytest on the bundled suites) and `harness report` (render stored results)."""

from __future__ import annotations

import argparse
import importlib.util
import signal
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from harness.commands.common import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, Command, add_groups
from harness.errors import UsageError
from harness.gating.verdicts import EXIT_UNJUDGED, EXIT_USAGE
from harness.options import RUN_GROUPS, parse_run_options
from harness.options.outputs import REPORT


def add_parser(sub: Any) -> None:
    run = sub.add_parser("run", help="run the matrix (pytest on the bundled suites) and write results + report",
                         description="Run the matrix. Arguments after `--` go to pytest unchanged.")
    add_groups(run, RUN_GROUPS)
    run.add_argument("pytest_args", nargs=argparse.REMAINDER, help="-- then extra pytest arguments")

    rep = sub.add_parser("report", help="render report.html, summary.md, results.csv (and benchmark.json) from "
                                        "stored results; several runs merge side by side",
                         description="Render from stored results. Several results files (other machines, other "
                                     "thread settings) become columns labelled by machine, never averaged.")
    add_groups(rep, (REPORT,))


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
    """The bundled pytest suites, found by path, never imported: `suites/` beside the harness package in a source
    checkout, else the installed `harness_suites` package's folder (its __init__ is not run)."""
    checkout = Path(__file__).resolve().parents[2]
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
    from harness.workloads import render_report
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
    for name, path in render_report(runs, out, verdicts, args.baseline, gate_note, trends=trends).items():
        print(f"{name:>9}: {path}")
    for path, run in zip(args.results, runs):
        if not run.complete:
            print(f"note: {path}: this run is incomplete (interrupted or killed): the report shows the cases "
                  "that finished")
    return EXIT_OK


COMMANDS = {"run": Command(cmd_run), "report": Command(cmd_report)}
