"""`harness gate BASELINE`: the nightly gate that re-measures the baseline tonight (harness.execution.gate_run)."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from harness.commands.common import Command, add_groups, baseline_dir_arg
from harness.display import visible
from harness.errors import UsageError
from harness.options import (
    AB,
    BUILD,
    INPUTS,
    MODELS,
    OUTPUTS,
    PROCESS,
    RUNTIMES,
    TIMING,
    parse_run_options,
)

GATE_GROUPS = (MODELS.only("models", "model"), RUNTIMES.only("runtimes"),
               AB.only("ab_pairs", "ab_block_time", "ab_min_effect", "ab_confidence", "ab_seed", "ab_activations",
                       "ab_budget", "ab_detect"),
               TIMING.only("warmup", "contention_limit"), PROCESS, BUILD, OUTPUTS)


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
                    "row was not judged (unless --allow-unjudged), else 0; 2 on bad input.")
    c.add_argument("baseline", metavar="BASELINE", help="a stored baseline name (`harness baseline ls`) or a path")
    baseline_dir_arg(c)
    c.add_argument("--allow-unjudged", action="store_true",
                   help="exit 0 even when a gated row was not judged (contended, too few clean pairs, not "
                        "reproducible); they are still listed")
    c.add_argument("--gate", action="append", metavar="SPEC",
                   help="for cases judged on the stored figures: STAT:PERCENT, e.g. median:10%% (repeatable)")
    c.add_argument("--gate-config", metavar="FILE", help="for cases judged on the stored figures: gate TOML")
    c.add_argument("--inject", type=float, default=0.0, metavar="PERCENT",
                   help="TESTING ONLY: slow side B by a busy wait of this percent of its p50 after each call (a "
                        "planted slowdown, to measure the gate's power); never for real figures")
    add_groups(c, GATE_GROUPS)


def _names(text: str | None) -> tuple[str, ...]:
    return tuple(n.strip() for n in (text or "").split(",") if n.strip())


def auto_threads(wanted: int, look: Any = None) -> int:
    """--threads auto: the baseline's thread count, or as many as the cores free of other processes now (one
    look of 0.25 s at the machine), at least 1."""
    from harness.measure.contention import wait_quiet

    seen = (look or wait_quiet)(wanted, 0.0)
    free = seen.get("cores_free")
    return wanted if free is None else max(1, min(wanted, int(float(free) + 0.05)))


def check_stored_config(run: Any, file: Path, index: int) -> None:
    """The baseline's stored configuration, checked before anything is measured: its user models (an ONNX file
    that passes the model-file checks, or a `module:factory`), seed, threads and repeats (as their options parse
    them), feeds (a path), and every gated case's model known tonight. A ResultsError names the baseline file, the
    field and the problem."""
    from harness.errors import HarnessError, ResultsError
    from harness.model import model_names
    from harness.model_files import check_model_path, is_factory_ref, user_model_name

    where = f"{file}: runs[{index}].config"
    config = run.config if isinstance(run.config, dict) else {}

    def refuse(field: str, value: Any, why: str) -> ResultsError:
        shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
        return ResultsError(f"{where}.{field}: {shown}: {why} (the baseline's stored configuration; save the "
                            "baseline again from a good run)")

    refs = config.get("user_models")
    if refs is not None and not isinstance(refs, list):
        raise refuse("user_models", refs, "not a list of model references")
    names = set()
    for i, ref in enumerate(refs or []):
        if not isinstance(ref, str) or not ref or "\x00" in ref:
            raise refuse(f"user_models[{i}]", ref, "not a model reference")
        if not is_factory_ref(ref):
            if not ref.endswith(".onnx"):
                raise refuse(f"user_models[{i}]", ref, "neither an .onnx file nor a `module:factory` reference")
            try:
                check_model_path(ref)
            except HarnessError as exc:
                raise refuse(f"user_models[{i}]", ref, str(exc)) from None
        names.add(user_model_name(ref))
    parsers = {"seed": INPUTS.only("seed").options[0].parse, "threads": PROCESS.only("threads").options[0].parse}
    for field, parse in parsers.items():
        value = config.get(field)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise refuse(field, value, "not an integer")
        try:
            assert parse is not None
            parse(str(value), field)
        except HarnessError as exc:
            raise refuse(field, value, str(exc).split(": ", 1)[-1]) from None
    repeats = config.get("repeats")
    if repeats is not None and (isinstance(repeats, bool) or not isinstance(repeats, int) or not 1 <= repeats <= 10**6):
        raise refuse("repeats", repeats, "not a count of rounds (an integer from 1)")
    feeds = config.get("feeds")
    if feeds is not None and (not isinstance(feeds, str) or "\x00" in feeds):
        raise refuse("feeds", feeds, "not a path")
    from harness.plugins import load_plugins

    load_plugins()
    known = set(model_names()) | names
    for i, c in enumerate(run.cases):
        if c.measured and c.case.model not in known:
            raise ResultsError(f"{file}: runs[{index}].cases[{i}].case.model: {c.case.model!r} is neither a model of "
                               "the zoo or a plugin here nor one of the baseline's stored user models "
                               f"({', '.join(sorted(names)) or 'none'})")


def _setup(args: argparse.Namespace) -> tuple[Any, Any, Any, Any, Any]:
    """(baseline runs, replay, gate config, plans, gates) of `harness gate` (and of `gate-check --nightly`)."""
    from harness.execution.gate_run import plan_gate
    from harness.gating import load_gate_config
    from harness.gating.baseline import load_baseline_runs, load_replay, resolve_baseline

    runs = load_baseline_runs(args.baseline, args.dir)
    replay = load_replay(args.baseline, args.dir)
    newest = runs[-1]
    check_stored_config(newest, resolve_baseline(args.baseline, args.dir), len(runs) - 1)
    gates = load_gate_config(args.gate_config, args.gate or ())
    raw = dict(vars(args))
    raw.pop("models", None)  # a filter of the baseline's cases here, not a matrix
    raw.pop("runtimes", None)
    stored = newest.config
    # the baseline's own user models are registered tonight too (a --model file's cases are gated by name)
    user = [str(p) for p in stored.get("user_models") or []]
    raw["model"] = list(dict.fromkeys([*user, *(raw.get("model") or [])])) or None
    if raw.get("threads") is None and stored.get("threads"):
        raw["threads"] = str(stored["threads"])  # side A as the baseline ran it: its thread count
    elif str(raw.get("threads") or "").strip().lower() == "auto":
        raw["threads"] = str(auto_threads(int(stored.get("threads") or os.cpu_count() or 1)))
    config = parse_run_options(raw, GATE_GROUPS, out_prefix="gate-", workload="gate")
    seed = stored.get("seed")
    config = config.replace(repeats=1, ab_inject=args.inject / 100.0,
                            **({"seed": int(seed)} if isinstance(seed, int) else {}))
    plans = plan_gate(newest, replay, _names(args.models), _names(args.runtimes))
    if not plans:
        raise UsageError(f"{resolve_baseline(args.baseline, args.dir)}: no measured case of the baseline matches "
                         f"--models {args.models or '(all)'} --runtimes {args.runtimes or '(all)'}: nothing to gate")
    return runs, replay, config, plans, gates


def cmd_gate(args: argparse.Namespace) -> int:
    from harness.execution.gate_run import run_gate
    from harness.report.progress import RunProgress
    from harness.results.store import atomic_write_text

    if not 0 <= args.inject < 1000:
        raise UsageError(f"--inject {args.inject:g}: a percentage between 0 and 1000")
    runs, replay, config, plans, gates = _setup(args)
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


def gate_check_nightly(baseline: str, gc_args: argparse.Namespace, levels: tuple[float, ...], rounds: int,
                       out: Path | None) -> int:
    """`harness gate-check --nightly BASELINE`: the new gate measured as gate-check measures compare. Per round,
    one whole `harness gate BASELINE` (its own session and workers, as each night has) with nothing changed
    (A/A: a false alarm when a row says regressed or improved) and one per level with side B slowed by that
    fraction of its p50 (power: the share of re-measured rows called regressed). Unjudged rows are counted as
    unjudged, never as a pass or a detection. Cases on the stored figures are tallied apart (a planted slowdown
    does not reach them)."""
    import dataclasses
    import tempfile

    from harness.execution.gate_run import STORED, run_gate
    from harness.gating.verdicts import Verdict
    from harness.report.progress import RunProgress
    from harness.results.store import atomic_write_text

    args = argparse.Namespace(
        baseline=baseline, dir=None, models=gc_args.models, runtimes=gc_args.runtimes, model=None, inject=0.0,
        gate=gc_args.gate, gate_config=gc_args.gate_config, allow_unjudged=False,
        **{k: getattr(gc_args, k, None) for k in ("threads", "ab_pairs", "ab_block_time", "ab_min_effect",
                                                   "ab_confidence", "ab_activations", "ab_budget")})
    runs, replay, config, plans, gates = _setup(args)
    root = out / "runs" if out else Path(tempfile.mkdtemp(prefix="harness-gate-check-nightly-"))
    tally: dict[tuple[str, str], dict[str, int]] = {}  # (case, "aa" | level) -> counts by verdict
    how: dict[str, str] = {}
    trials = [("aa", 0.0)] + [(f"{lv:.0%}", lv) for lv in levels]
    print(f"gate-check --nightly {baseline}: {len(plans)} case(s) x {rounds} rounds x (A/A + {len(levels)} "
          f"levels), each trial a whole `harness gate` run; {sum(not p.fallback for p in plans)} re-measured A/B")
    for r in range(rounds):
        for label, level in trials:
            cfg = config.replace(out_dir=root / f"r{r}-{label.rstrip('%')}", ab_inject=level, ab_seed=r)
            fresh = [dataclasses.replace(p, note="") for p in plans]
            outcome = run_gate(cfg, runs, replay, gates, fresh, RunProgress(case_lines=False))
            if outcome.interrupted:
                print("gate-check --nightly: interrupted")
                return outcome.exit_status or 130
            for rec in outcome.records:
                if rec.metric == "drift":
                    continue
                how[rec.case_id] = STORED if rec.case_id in outcome.fallbacks else "re-measured A/B"
                counts = tally.setdefault((rec.case_id, label), {})
                counts[rec.verdict.value] = counts.get(rec.verdict.value, 0) + 1
            print(f"  round {r + 1}/{rounds} {label}: {outcome.summary(False)}")
    header = ("| case | how | trial | trials | regressed | improved | pass | unjudged (inconclusive, noise, "
              "not comparable) |")
    lines = [header, "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    unjudged_names = {Verdict.INCONCLUSIVE.value, Verdict.NOISE.value, Verdict.NOT_COMPARABLE.value}
    doc: list[dict[str, Any]] = []
    for (case, label), counts in sorted(tally.items()):
        n = sum(counts.values())
        unj = sum(v for k, v in counts.items() if k in unjudged_names)
        row = {"case": case, "how": how[case], "trial": "A/A" if label == "aa" else f"slowed {label}", "trials": n,
               "regressed": counts.get("regressed", 0), "improved": counts.get("improved", 0),
               "pass": counts.get("pass", 0), "unjudged": unj, "counts": counts}
        doc.append(row)
        lines.append(f"| {case} | {row['how']} | {row['trial']} | {n} | {row['regressed']} | {row['improved']} | "
                     f"{row['pass']} | {unj} |")
    aa = [d for d in doc if d["trial"] == "A/A"]
    fa = sum(d["regressed"] + d["improved"] for d in aa)
    n_aa = sum(d["trials"] for d in aa)
    head = f"false alarms (A/A rows called regressed or improved): {fa} of {n_aa}"
    for label, _ in trials[1:]:
        rows = [d for d in doc if d["trial"] == f"slowed {label}" and d["how"] != STORED]
        head += f"; power at {label}: {sum(d['regressed'] for d in rows)} of {sum(d['trials'] for d in rows)}"
    md = "\n".join([head, "", *lines, ""])
    print(md)
    if out is not None:
        atomic_write_text(out / "gatecheck-nightly.md", md)
        atomic_write_text(out / "gatecheck-nightly.json", json.dumps({"summary": head, "rows": doc}, indent=1))
        print(f"written: {out / 'gatecheck-nightly.md'}, {out / 'gatecheck-nightly.json'}")
    return 0


COMMANDS = {"gate": Command(cmd_gate)}
