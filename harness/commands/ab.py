"""`harness ab A B`: an interleaved A/B of two variants or two model files of the same cases, the A/B workload
through the run session without pytest, judged by a paired test."""

from __future__ import annotations

import argparse
from typing import Any

from harness.commands.common import EXIT_INTERRUPTED, Command, add_groups, session_cases
from harness.errors import UsageError
from harness.options import AB, BUILD, INPUTS, MODELS, OUTPUTS, PROCESS, RUNTIMES, TIMING, parse_run_options
from harness.options.gating import JUDGING
from harness.options.workloads.ab import AB_SIDES

# `harness ab A B`: one or a few cases, both sides interleaved in one worker
AB_GROUPS = (MODELS.with_defaults(batch_sizes="1", seq_lens="128").only("models", "model", "shape", "batch_sizes",
                                                                         "seq_lens"),
             RUNTIMES.with_defaults(runtimes="ort-cpu").only("runtimes", "precisions"),
             AB.only("ab_pairs", "ab_block_time", "ab_min_effect", "ab_confidence", "ab_seed", "ab_detect",
                     "ab_activations", "ab_budget"),
             TIMING.only("warmup", "contention_limit"), PROCESS, INPUTS, BUILD, OUTPUTS)


def add_parser(sub: Any) -> None:
    c = sub.add_parser("ab", help="interleaved A/B: two variants or two model files of the same cases, measured "
                                  "in alternating blocks and judged by a paired test",
                       description="Measure side A and side B of each case (--models x --runtimes x --precisions x "
                                   "shapes) interleaved: both activated in the same supervised worker (anew every "
                                   "pairs / --ab-activations pairs; where the process has one CPU each activation in "
                                   "a new worker), then --ab-pairs pairs of short blocks, AB or BA "
                                   "in a balanced random order; B/A is the Hodges-Lehmann estimate of the pairs' "
                                   "median ratios with a signed-rank interval (on the activations' estimates when "
                                   "they differ). Verdicts as "
                                   "compare's: pass, regressed, improved, noise, inconclusive (contended blocks). "
                                   "Each case also says the smallest slowdown its pairs can detect. Exit 1 when a "
                                   "case regressed or could not be measured (error, crash, timeout, out of memory), "
                                   "3 when a case was not judged (inconclusive, or an interval too wide; "
                                   "--allow-unjudged: 0), 0 otherwise, 2 on bad options.")
    add_groups(c, (AB_SIDES, *AB_GROUPS))
    c.add_argument("--detect", dest="ab_detect", metavar="PERCENT", help="the same as --ab-detect")
    add_groups(c, (JUDGING.only("allow_unjudged").narrowed(
        "allow_unjudged", help="exit 0 although a case (inconclusive: contended, too few clean pairs) was not judged; "
                               "the last line still names them (default: exit 3)"),))


def cmd_ab(args: argparse.Namespace) -> int:
    """`harness ab A B`: the A/B workload through the run session (as `harness run --workload ab --ab-a A --ab-b B`
    without pytest): each case in the supervised worker, results.json after every case, the report."""

    from harness.gating.ab import ab_records, case_detect_line
    from harness.display import visible
    from harness.gating.unjudged import decide_exit, gate_headline, unjudged_line, verdict_text
    from harness.workloads import get_workload

    raw = dict(vars(args))
    from harness.model_files import is_user_model_ref

    files = [s for s in (args.ab_a, args.ab_b) if is_user_model_ref(s)]
    if files:  # model-file (and factory) sides are user models of the run
        raw["model"] = list(dict.fromkeys([*(raw.get("model") or []), *files]))
    config = parse_run_options(raw, (*AB_GROUPS, AB_SIDES), out_prefix="ab-", workload="ab")
    workload = get_workload("ab")
    cases = workload.cases(config)
    if not cases:
        raise UsageError("no case to measure: give --models and --runtimes")
    out = config.outputs.out_dir
    from harness.gating.ab import DETECT_MAX_PAIRS, DETECT_PILOT_PAIRS

    pairs = (f"pairs for --detect {config.ab.ab_detect:.1%} (a pilot of {DETECT_PILOT_PAIRS}, at most "
             f"{DETECT_MAX_PAIRS})" if config.ab.ab_detect else f"{config.ab.ab_pairs} pairs")
    print(f"{len(cases)} case(s): A = {config.ab.ab_a}, B = {config.ab.ab_b}, {pairs} of "
          f"{config.ab.ab_block_time_s:g} s blocks in {config.ab.activations_text()} -> {out}")
    session, finished = session_cases(config, cases)
    ab = config.ab
    for c in session.run.cases:  # what each case's budget can detect, from its clean pairs' spread
        if c.ab is not None:
            print(f"{c.case.id}: " + case_detect_line(c.ab.blocks, ab.ab_confidence, ab.ab_min_effect,
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
    for r in records:  # each case's verdict with its evidence, judged or not (B/A over all pairs when unjudged)
        ratio = f"  B/A {r.ratio:.4f}" + (f" [{r.ci_low:.4f}, {r.ci_high:.4f}]" if r.ci_low is not None and
                                           r.ci_high is not None else "") if r.ratio is not None else ""
        print(visible(f"{verdict_text(r):<15} {r.case_id}{ratio}"))
    print(gate_headline(records, args.allow_unjudged, what="ab"))
    line = unjudged_line(records, args.allow_unjudged, what="A/B cases")
    if line:  # the last line: the cases not judged, and why
        print(line)
    return decide_exit(records, args.allow_unjudged)


COMMANDS = {"ab": Command(cmd_ab)}
