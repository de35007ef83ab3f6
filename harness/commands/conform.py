"""`harness conform`: operator conformance, the conformance workload through the run session without pytest
(docs/conformance.md)."""

from __future__ import annotations

import argparse
import time
from typing import Any

from harness.commands.common import EXIT_INTERRUPTED, EXIT_OK, Command, add_groups, session_cases
from harness.errors import UsageError
from harness.options import CONFORMANCE, FLEET, OUTPUTS, PROCESS, RUNTIMES, parse_run_options
from harness.options.workloads.conform import CONFORM_LIST

# `harness conform`: the conformance workload's groups, with its own defaults (one thread, 60 s per case)
CONFORM_GROUPS = (RUNTIMES, CONFORMANCE, PROCESS.with_defaults(threads="1", case_timeout="60"), OUTPUTS)


def add_parser(sub: Any) -> None:
    c = sub.add_parser("conform", help="operator conformance: ONNX's backend test cases on every runtime that "
                                       "runs an ONNX model (docs/conformance.md)",
                       description="Run ONNX's backend node cases (and light models) of the installed onnx on each "
                                   "runtime and precision, each case in a supervised worker (the run session of "
                                   "`harness run --workload conform`); write results.json after every case and "
                                   "conformance.html. Exit 0 when the run finished (gate with `harness compare`), 2 "
                                   "on bad options, 130/143 when interrupted (finished cases kept). --ray: the cases "
                                   "sharded over the cluster's nodes, each node's in its own supervised workers, "
                                   "merged into one run folder, each row naming its node; a lost node's unfinished "
                                   "cases are crashed rows (docs/fleet.md).")
    add_groups(c, CONFORM_GROUPS)
    add_groups(c, (CONFORM_LIST, FLEET))


def cmd_conform(args: argparse.Namespace) -> int:
    """`harness conform`: the conformance workload through the run session (as `harness run --workload conform`,
    without pytest): each case in the supervised worker, results.json after every case, conformance.html."""
    from harness.workloads import get_workload
    from harness.workloads.conform.cases import collect
    from harness.workloads.conform.workload import resolve_runtimes

    if args.ray and not args.list:  # an address where no cluster answers: one line before the cases are collected
        from harness.execution.ray_shards import probe_address

        probe_address(args.ray)
    config = parse_run_options(vars(args), (*CONFORM_GROUPS, FLEET), out_prefix="conform-", workload="conform")
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
    if config.fleet.ray:
        from harness.execution.conform_ray import node_lines, ray_conform

        merged, _, stopped = ray_conform(config, cases)
        for line in [*get_workload("conform").terminal_lines(merged), *node_lines(merged)]:
            print(line)
        print(f"wall {time.perf_counter() - t0:.0f} s; results: {out / 'results.json'}; page: "
              f"{out / 'conformance.html'}")
        return stopped or EXIT_OK  # as the local run: a crashed row (a lost node's too) is a finding
    session, finished = session_cases(config, cases)
    print(f"wall {time.perf_counter() - t0:.0f} s; results: {out / 'results.json'}; page: {out / 'conformance.html'}")
    return session.exit_status() or (EXIT_OK if finished else EXIT_INTERRUPTED)


COMMANDS = {"conform": Command(cmd_conform)}
