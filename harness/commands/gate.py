"""`harness gate BASELINE`: the nightly gate that re-measures the baseline tonight (harness.execution.gate_run)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from harness.commands.common import Command, add_groups
from harness.commands.gate_config import GATE_GROUPS, gate_setup
from harness.display import visible
from harness.options import FLEET
from harness.options.gating import BASELINE_DIR, GATE_JUDGING, NIGHTLY_GATE



def add_parser(sub: Any) -> None:
    c = sub.add_parser(
        "gate", help="the nightly gate: re-measure a baseline's cases tonight, A/B beside tonight's build",
        description="For every gated case of BASELINE (its newest run): side A = the baseline's stored ONNX "
                    "artifact, or for a runtime that runs the torch module itself (torch-cpu, torch-compile-cpu, "
                    "...) the module rebuilt from the model's definition stored with the baseline, run by the "
                    "runtime release the baseline ran (in its own environment where tonight's differs), side B = "
                    "tonight's model and runtime; both on the same feed, measured in balanced interleaved blocks on "
                    "this machine and judged by `harness ab`'s paired test. A case whose side A cannot be "
                    "reproduced (no stored artifact, a model whose source changed since the baseline) is judged on "
                    "the stored figures, labelled so. --threads auto: the baseline's thread count, or fewer when "
                    "fewer cores are free now (both sides run it). Exit 1 when a case regressed or broke, else 3 "
                    "when a gated "
                    "row was not judged (unless --allow-unjudged), else 0; 2 on bad input. --ray: the cases "
                    "sharded over the cluster's nodes of the baseline's hardware class, both sides of a case on "
                    "one node; a case whose node is lost is not judged (docs/fleet.md).")
    add_groups(c, (NIGHTLY_GATE, BASELINE_DIR, GATE_JUDGING, *GATE_GROUPS, FLEET))


def cmd_gate(args: argparse.Namespace) -> int:
    from harness.execution.gate_run import run_gate
    from harness.report.progress import RunProgress
    from harness.results.store import atomic_write_text

    if args.ray:  # an address where no cluster answers: one line before the baseline is read
        from harness.execution.ray_shards import probe_address

        probe_address(args.ray)
    runs, replay, config, plans, gates = gate_setup(vars(args), (*GATE_GROUPS, FLEET))
    out = config.outputs.out_dir
    re_measured = sum(not p.fallback for p in plans)
    ab = config.ab
    pairs = f"pairs for --ab-detect {ab.ab_detect:.1%}" if ab.ab_detect else f"{ab.ab_pairs} pairs"
    print(f"gate {args.baseline}: {len(plans)} case(s), {re_measured} re-measured A/B tonight ({pairs} "
          f"of {ab.ab_block_time_s:g} s blocks in {ab.activations_text()}, up to "
          f"{ab.ab_budget_s:g} s more per case to reach a verdict, "
          f"{config.measure.threads} thread(s)), {len(plans) - re_measured} on "
          f"stored figures -> {out}")
    for p in plans:
        if p.fallback:
            print(visible(f"  {p.case.id}: stored figures (not re-measured: {p.fallback})"))
        elif p.rebuilt:
            print(visible(f"  {p.case.id}: side A rebuilt from the model's definition (unchanged since the baseline; "
                          "its runtime runs the torch module)"))
    if config.fleet.ray:
        from harness.execution.gate_ray import ray_gate

        outcome = ray_gate(config, runs, replay, gates, plans)
    else:
        outcome = run_gate(config, runs, replay, gates, plans, RunProgress())
    if outcome.interrupted:
        print(f"gate: interrupted: no verdict (finished cases kept in {config.outputs.out_dir / 'results.json'})")
        return outcome.exit_status or 130  # 128 + the signal, as every interrupted command
    from harness.gating.ab import case_detect_line

    for c in outcome.run.cases if outcome.run else ():  # what each re-measured case could detect tonight
        if c.ab is not None:
            print(f"{c.case.id}: " + case_detect_line(c.ab.blocks, ab.ab_confidence, ab.ab_min_effect, ab.ab_detect))
    for line in outcome.lines(args.allow_unjudged):
        print(visible(line))
    atomic_write_text(Path(out) / "gate.md", outcome.markdown(args.allow_unjudged))
    atomic_write_text(Path(out) / "gate.json", json.dumps(outcome.as_dict(args.allow_unjudged), indent=1))
    print(f"results: {out / 'results.json'}; verdicts: {out / 'gate.md'}; report: {out / 'report.html'}")
    return outcome.exit_code(args.allow_unjudged)


COMMANDS = {"gate": Command(cmd_gate)}
