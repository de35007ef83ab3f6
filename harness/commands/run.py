"""`harness run` (the matrix through pytest on the bundled suites) and `harness report` (render stored results)."""

from __future__ import annotations

import argparse
import importlib.util
import signal
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.commands.common import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, Command, add_groups
from harness.errors import UsageError
from harness.gating.verdicts import EXIT_UNJUDGED, EXIT_USAGE
from harness.options import RUN_GROUPS, parse_run_options
from harness.options.outputs import REPORT

if TYPE_CHECKING:
    from harness.config import RunConfig


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
    if config.fleet.ray and config.gating.baseline:
        return run_baseline_on_ray(args, config)
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


def run_baseline_on_ray(args: argparse.Namespace, config: RunConfig) -> int:
    """`harness run --baseline BASELINE --ray`: the matrix over the cluster's nodes of the baseline's hardware class
    through the gate's machinery (harness.execution.gate_ray): a case the baseline can replay is measured A/B
    against it on its node (both sides on one node), any other case as `harness run` measures it, judged on the
    stored figures; one results.json, report, gate.md and gate.json. Exit 1 when a case regressed, broke or
    failed, else 3 when a gated row was not judged (a lost node's cases), else 0 (docs/fleet.md)."""
    import json

    from harness.commands.gate_config import GATE_GROUPS, gate_setup
    from harness.display import visible
    from harness.execution.gate_ray import matrix_plans, ray_gate
    from harness.execution.ray_shards import probe_address
    from harness.options import FLEET
    from harness.results.schema import BROKEN
    from harness.results.store import atomic_write_text
    from harness.workloads import get_workload

    if config.workload != "forward":
        raise UsageError(f"--baseline with --ray gates the forward matrix; --workload {config.workload} is not")
    if args.confirm is not None:
        raise UsageError("--confirm with --ray: a case the baseline can replay is measured A/B against it on its "
                         "node, which needs no confirmation; leave --confirm out")
    if config.outputs.history:
        raise UsageError("--history with --baseline --ray: record the run with `harness run --ray --history`")
    probe_address(config.fleet.ray)  # one line before the baseline is read
    options = {**vars(args), "models": None, "runtimes": None}  # the gate's filter: the matrix decides below
    runs, replay, gate_config, plans, gates = gate_setup(options, (*GATE_GROUPS, FLEET))
    gate_config = gate_config.replace(out_dir=config.outputs.out_dir, run_id=config.outputs.run_id)
    plans = matrix_plans(plans, get_workload(config.workload).cases(config))
    # every case at the gate's thread count (the baseline's unless --threads): a stored-figure row is then
    # compared with figures measured at the same threads
    forward = config.replace(threads=gate_config.measure.threads)
    re_measured = sum(not p.fallback for p in plans)
    print(f"run --baseline {args.baseline} --ray: {len(plans)} case(s), {re_measured} re-measured A/B against the "
          f"baseline on their node, {len(plans) - re_measured} measured as `harness run` measures them and judged "
          f"on the stored figures ({gate_config.measure.threads} thread(s)) -> {config.outputs.out_dir}")
    outcome = ray_gate(gate_config, runs, replay, gates, plans, forward=forward)
    if outcome.interrupted:  # as `harness run --baseline` on one machine: what finished is kept, no verdict
        print(f"run --baseline --ray: interrupted: no verdict (finished cases kept in "
              f"{config.outputs.out_dir / 'results.json'})")
        return outcome.exit_status or 130
    allow = config.gating.allow_unjudged
    for line in outcome.lines(allow):
        print(visible(line))
    out = config.outputs.out_dir
    atomic_write_text(out / "gate.md", outcome.markdown(allow))
    atomic_write_text(out / "gate.json", json.dumps(outcome.as_dict(allow), indent=1))
    print(f"results: {out / 'results.json'}; verdicts: {out / 'gate.md'}; report: {out / 'report.html'}")
    failing = [c for c in (outcome.run.cases if outcome.run else ()) if c.status in ("failed", *BROKEN)
               and c.phase != "shard"]  # a lost node's rows are not judged (exit 3), never a failure
    return EXIT_FAILED if failing else outcome.exit_code(allow)


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
