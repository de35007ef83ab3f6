"""`harness bisect RUNTIME --versions A..B`: the first release of a runtime's package where one case changed, by
binary search over releases, each in an environment of its own (harness.execution.bisect_run)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from harness.commands.common import EXIT_FAILED, EXIT_OK, Command, add_groups
from harness.errors import UsageError
from harness.gating.verdicts import EXIT_UNJUDGED, EXIT_USAGE
from harness.options import AB, BUILD, FORWARD, INPUTS, MODELS, OUTPUTS, PROCESS, RUNTIMES, TIMING, parse_run_options
from harness.options.gating import JUDGING
from harness.options.process import BISECT

# `harness bisect RUNTIME --versions ...`: one case, measured on each release it needs
BISECT_GROUPS = (MODELS.with_defaults(batch_sizes="1", seq_lens="128").only("models", "model", "shape", "batch_sizes",
                                                                             "seq_lens"),
                 RUNTIMES.only("precisions"), TIMING, FORWARD.only("variants", "settle", "profile"), PROCESS, INPUTS,
                 BUILD, OUTPUTS,
                 # the two releases of each comparison side by side: the gate's interleaved pairs
                 AB.only("ab_pairs", "ab_block_time", "ab_confidence", "ab_seed", "ab_activations", "ab_budget"))


def add_parser(sub: Any) -> None:
    b = sub.add_parser("bisect", help="the first release of a runtime's package where one case's latency (by the "
                                      "gate) or outputs (by the drift tolerance) changed",
                       description="Measure one case (--models x shape x --precisions) on releases of RUNTIME's "
                                   "package, each in an environment of its own (RUNTIME@VERSION), by binary search: "
                                   "the two ends, then halves. Each release is judged against the oldest by "
                                   "compare's gate and drift verdicts, the median gate on the two releases measured "
                                   "side by side (interleaved pairs, each in its own environment, as `harness gate`; "
                                   "an overwhelming change is judged under load); a release neither like nor unlike "
                                   "the oldest is judged against the nearest changed one. Exit 1 when a change was "
                                   "found, 0 when none, "
                                   "3 when a step could not be judged (contended, too few samples: the search "
                                   "stops with `could not judge between X and Y`; --allow-unjudged: 0), 2 on bad "
                                   "options (a reversed A..B), 130/143 when stopped by SIGINT/SIGTERM.")
    add_groups(b, (BISECT, *BISECT_GROUPS))
    add_groups(b, (JUDGING.narrowed("gate", help="STAT:PERCENT, e.g. median:10% (repeatable; default median:10%)")
                   .narrowed("allow_unjudged", help="exit 0 although a release was not judged (contended, too few "
                                                    "samples or clean pairs, a changed model); the last line still "
                                                    "names them (default: exit 3)"),))


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
        return EXIT_OK if args.allow_unjudged else EXIT_UNJUDGED
    return EXIT_OK


COMMANDS = {"bisect": Command(cmd_bisect)}
