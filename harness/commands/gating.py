"""`harness baseline | compare | gate-check | qualify`: store baselines, judge a run against one, measure the gate
here, and qualify a machine by a spec (harness.gating)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.commands.common import EXIT_OK, Command, add_groups
from harness.gating.verdicts import EXIT_UNJUDGED
from harness.display import visible
from harness.errors import SignalStop, UsageError
from harness.options import AB, FLEET, FORWARD, MODELS, PROCESS, RUNTIMES, TIMING, parse_run_options
from harness.options.gating import BASELINE_DIR, BASELINE_SAVE, COMPARE, GATE_CHECK, JUDGING, PRINT_JSON
from harness.options.qualify import QUALIFY

if TYPE_CHECKING:
    from harness.config import RunConfig
    from harness.results.schema import CaseId

# `harness gate-check`: a small matrix measured many times
GATE_CHECK_GROUPS = (MODELS.with_defaults(models="mlp", batch_sizes="1", seq_lens="32").only(
                         "models", "batch_sizes", "seq_lens"),
                     RUNTIMES.with_defaults(runtimes="torch-cpu,ort-cpu"), FORWARD.only("variants"),
                     TIMING.with_defaults(min_time="0.5", min_iters="20").only("min_time", "min_iters", "repeats"),
                     PROCESS.only("threads"),
                     AB.only("ab_pairs", "ab_block_time", "ab_min_effect", "ab_confidence", "ab_activations",
                             "ab_budget"))


def add_parser(sub: Any) -> None:
    base = sub.add_parser("baseline", help="store and list named baselines (for --baseline NAME)")
    bsub = base.add_subparsers(dest="baseline_command", required=True, metavar="ACTION")
    add_groups(bsub.add_parser("save", help="store one or more runs (oldest first) as the baseline NAME"),
               (BASELINE_SAVE, BASELINE_DIR))
    add_groups(bsub.add_parser("ls", help="list stored baselines"), (BASELINE_DIR, PRINT_JSON))

    cmp = sub.add_parser("compare", help="verdicts of CURRENT against BASELINE (exit 1 on regression, 3 when a "
                                         "gated timing row was not judged)")
    add_groups(cmp, (COMPARE, JUDGING))

    gc = sub.add_parser("gate-check", help="measure the gate here: A/A false alarms and power at injected "
                                           "slowdowns (self-test)")
    # the matrix and timing options of `harness run` with gate-check's defaults, then its own and compare's gates
    add_groups(gc, (*GATE_CHECK_GROUPS, GATE_CHECK, JUDGING.only("gate", "gate_config"), FLEET))

    q = sub.add_parser("qualify", help="run a qualification spec (TOML) and write a PASS/FAIL certificate")
    add_groups(q, (QUALIFY,))


def cmd_baseline(args: argparse.Namespace) -> int:
    from harness.gating import baseline

    if args.baseline_command == "save":
        from harness.plugins import load_plugins

        load_plugins()  # what builds a torch module is stored by the model's registered definition (the zoo's)
        saved = baseline.save_baseline(args.results, args.name, args.dir, allow_incomplete=args.allow_incomplete,
                                       append=args.append, keep=args.keep,
                                       warn=lambda line: print(visible(line), file=sys.stderr))
        path, ids = saved.path, saved.run_ids  # what this save wrote (under the folder's lock), not a re-read
        print(f"saved baseline {args.name!r} ({len(ids)} run{'s' if len(ids) > 1 else ''}: "
              f"{visible(', '.join(ids))}; this save added {visible(', '.join(saved.added) or 'none')}): {path}")
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
        for line in info.warnings:  # a run whose figures contention inflated judges every later run against them
            print(visible(f"  {line}"))
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
    if args.json_out:
        atomic_write_text(args.json_out, comparison_json(comparison))
    print(comparison.summary())
    unjudged = comparison.unjudged_line()
    if unjudged:  # the last line: how many gated rows were not judged, and which
        print(unjudged)
    return comparison.exit_code


def _gate_check_nightly(baseline: str, gc_args: argparse.Namespace, levels: tuple[float, ...], rounds: int,
                        out: Path | None) -> int:
    """`harness gate-check --nightly BASELINE`: the new gate measured as gate-check measures compare
    (harness.execution.gatecheck_run.nightly_trials: whole gates per round, A/A and planted slowdowns; the tally in
    harness.gating.gatecheck.NightlyTally, its page in harness.report.gatecheck). Cases on the stored figures are
    tallied apart (a planted slowdown does not reach them)."""
    import tempfile

    from harness.commands.gate_config import GATE_GROUPS, gate_setup
    from harness.execution.gate_run import STORED
    from harness.execution.gatecheck_run import nightly_trials
    from harness.report.gatecheck import nightly_markdown
    from harness.results.store import atomic_write_text

    # the gate's options by name, as `harness gate BASELINE` would parse them: gate-check's matrix filter, gates
    # and A/B settings (the rest at their defaults); no planted --inject (the trials plant their own slowdowns)
    shared = ("models", "runtimes", "gate", "gate_config", "threads", "ab_pairs", "ab_block_time", "ab_min_effect",
              "ab_confidence", "ab_activations", "ab_budget", "ray", "placement")
    options = {"baseline": baseline, **{k: getattr(gc_args, k, None) for k in shared}}
    if gc_args.ray:  # an address where no cluster answers: one line before the baseline is read
        from harness.execution.ray_shards import probe_address

        probe_address(gc_args.ray)
    runs, replay, config, plans, gates = gate_setup(options, (*GATE_GROUPS, FLEET))
    root = out / "runs" if out else Path(tempfile.mkdtemp(prefix="harness-gate-check-nightly-"))
    print(f"gate-check --nightly {baseline}: {len(plans)} case(s) x {rounds} rounds x (A/A + {len(levels)} "
          f"levels), each trial a whole `harness gate` run; {sum(not p.fallback for p in plans)} re-measured A/B")
    extra: dict[str, Any] = {}
    lost: list[str] = []
    if config.fleet.ray:
        from harness.execution.gatecheck_ray import ray_gate_check

        got = ray_gate_check(config, runs, replay, gates, plans, levels, rounds, root)
        if got.stopped is not None:  # as the local check: no tally of a stopped run (each node's trials: root)
            print("gate-check --nightly: interrupted")
            return got.stopped
        tally, lost = got.tally, got.lost
        extra = {"ray": got.lines, "lost": lost}
    else:
        tally, stopped = nightly_trials(config, runs, replay, gates, plans, levels, rounds, root)
        if stopped is not None:
            print("gate-check --nightly: interrupted")
            return stopped
    head = tally.summary(STORED)
    md = nightly_markdown(head, tally.rows(), lost)  # a lost node's trials: their rows unjudged, said
    print(md)
    if out is not None:
        atomic_write_text(out / "gatecheck-nightly.md", md)
        atomic_write_text(out / "gatecheck-nightly.json", json.dumps({"summary": head, "rows": tally.rows(),
                                                                      **extra}, indent=1))
        print(f"written: {out / 'gatecheck-nightly.md'}, {out / 'gatecheck-nightly.json'}")
    return EXIT_UNJUDGED if lost else 0


def cmd_gate_check(args: argparse.Namespace) -> int:
    from harness.execution.gatecheck_run import SupervisedRuns
    from harness.gating import load_gate_config
    from harness.gating.gatecheck import gate_check
    from harness.report.gatecheck import gatecheck_html, gatecheck_markdown
    from harness.report.terminal import markdown_as_text
    from harness.results.environment import snapshot
    from harness.results.store import atomic_write_text
    from harness.workloads import get_workload

    levels = args.levels  # fractions, parsed by the option (harness.options.gating.slowdown_levels)
    out = Path(args.out) if args.out else None
    if args.nightly:
        return _gate_check_nightly(args.nightly, args, levels, args.rounds, out)
    if args.ray:
        raise UsageError("--ray with gate-check spreads whole gates over the nodes of a baseline's hardware class: "
                         "give --nightly BASELINE (the stored-figure and --ab checks run on one machine)")
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
    result.machine = str(snapshot(threads=config.measure.threads).machine or "?")
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
    result.machine = str(snapshot(threads=config.measure.threads).machine or "?")
    result.measured_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    md = result.markdown()
    print(markdown_as_text(md), end="")
    if out is not None:
        atomic_write_text(out / "gatecheck-ab.json", json.dumps(result.as_dict(), indent=1))
        atomic_write_text(out / "gatecheck-ab.md", md)
        print(f"written: {out / 'gatecheck-ab.json'}, {out / 'gatecheck-ab.md'}")
    return EXIT_OK


def cmd_qualify(args: argparse.Namespace) -> int:
    from harness.execution.qualify_run import run_spec, spec_case
    from harness.gating import load_run
    from harness.gating.golden import check_rows, golden_store, read_index, write_index
    from harness.gating.provenance import provenance
    from harness.gating.qualify import judge, load_spec
    from harness.report.certificate import certificate_text, write_certificate
    from harness.report.progress import RunProgress

    if args.verify or args.reproduce:
        if args.spec or args.ray or args.results or args.record_golden:
            raise UsageError("--verify and --reproduce take a certificate only (no SPEC, --ray, --results, "
                             "--record-golden)")
        if args.verify and args.env_wheels:
            raise UsageError("--env-wheels builds the certified releases' environments of --reproduce CERT: not "
                             "with --verify (it runs nothing)")
        return _qualify_verify(Path(args.verify)) if args.verify else _qualify_reproduce(Path(args.reproduce), args)
    if args.env_wheels:
        raise UsageError("--env-wheels builds the certified releases' environments of --reproduce CERT: give it "
                         "with --reproduce")
    if not args.spec:
        raise UsageError("give a spec file (or --verify CERT, --reproduce CERT)")
    spec = load_spec(args.spec, spec_case)
    if (args.nodes or args.serial or args.node_deadline) and not args.ray:
        raise UsageError("--nodes, --serial and --node-deadline qualify a fleet: give --ray ADDRESS too")
    if args.burn_in and (args.results or args.record_golden):
        raise UsageError("--burn-in runs the spec in rounds (here, or on every node with --ray): without --results "
                         "or --record-golden")
    if args.record_golden and (args.ray or args.results):
        raise UsageError("--record-golden runs the spec on this (trusted) machine: without --ray or --results")
    if args.ray:
        if args.results:
            raise UsageError("--results with --ray: judge each node's stored results with --results OUT/NODE")
        out = Path(args.out) if args.out else Path("reports") / f"qualify-{spec.name}-{time.strftime('%Y%m%d-%H%M%S')}"
        return _qualify_fleet(args, spec, out)
    store = golden_store(spec)
    use = args.record_golden or bool(read_index(store))
    if args.results:
        results = Path(args.results)
        out = Path(args.out) if args.out else (results if results.is_dir() else results.parent)
    else:
        out = Path(args.out) if args.out else Path("reports") / f"qualify-{spec.name}-{time.strftime('%Y%m%d-%H%M%S')}"
        print(f"qualify {spec.name}: running {len(spec.cases)} case(s) into {out}")
        if args.burn_in:
            results, burn_in = _burn_in(spec, out, _duration(args.burn_in), store if use else None)
        else:
            results = run_spec(spec, out, RunProgress(), golden_dir=store if use else None,
                               record_golden=args.record_golden)
    run = load_run(results)
    if args.record_golden:
        index = write_index(store, run)
        print(f"golden outputs: {sum(1 for c in run.cases if c.case.id in index)} case(s) recorded in {store}")
    cert = judge(spec, run, results)
    if not args.results or any((c.details or {}).get("audit") for c in run.cases):
        cert.requirements += check_rows(spec, run)
    extra: dict[str, Any] = {}
    if args.burn_in:
        cert.requirements += burn_in["rows"]
        extra["burn_in"] = {k: v for k, v in burn_in.items() if k != "rows"}
    print(certificate_text(cert))
    extra["provenance"] = provenance(cert, store if use else None)
    for name, path in write_certificate(cert, out, extra).items():
        print(f"{name:>17}: {path}")
    if cert.unjudged_line():  # the last line: the requirements not judged, and why
        print(cert.unjudged_line())
    return cert.exit_code


def _duration(text: str, option: str = "--burn-in") -> float:
    """--burn-in (or `option`) DURATION: seconds from 90, 90s, 30m, 2h."""
    t = text.strip().lower()
    scale = {"s": 1, "m": 60, "h": 3600}.get(t[-1:], 1)
    try:
        value = float(t[:-1] if t[-1:] in "smh" else t) * scale
    except ValueError:
        value = -1.0
    if not value > 0:
        raise UsageError(f"{option} {text!r}: expected a duration such as 90s, 30m or 2h")
    return value


def _burn_in(spec: Any, out: Path, seconds: float, golden: Path | None) -> tuple[Path, dict[str, Any]]:
    """The spec in rounds (OUT/round-NN) until `seconds` have passed and at least MIN_ROUNDS ran; the machine's
    clocks and temperatures at each round's start and end; the trends across rounds. Returns the last round's
    results and the burn-in record (with its requirement rows under "rows")."""
    from harness.execution.qualify_run import run_spec
    from harness.gating import load_run
    from harness.gating.burnin import MIN_ROUNDS, burn_in_rows
    from harness.measure.machine_state import machine_state
    from harness.report.progress import RunProgress

    t0 = time.monotonic()
    rounds, states, results = [], [], out
    while len(rounds) < MIN_ROUNDS or time.monotonic() - t0 < seconds:
        n = len(rounds) + 1
        print(f"burn-in round {n} ({time.monotonic() - t0:.0f} of {seconds:.0f} s)")
        before = machine_state()
        results = run_spec(spec, out / f"round-{n:02d}", RunProgress(), golden_dir=golden)
        states.append({"round": n, "start": before, "end": machine_state()})
        rounds.append(load_run(results))
    rows, trends = burn_in_rows(rounds, [sc.case.id for sc in spec.cases])
    for t in trends:
        for x in t["trends"]:
            print(visible(f"burn-in {t['case_id']}: {x['text']}"))
    freq = [s["end"].get("cpu_freq_mhz") for s in states]
    return results, {"rounds": len(rounds), "seconds": time.monotonic() - t0, "machine": states, "trends": trends,
                     "cpu_freq_mhz": freq, "rows": rows}


def _rejudge(spec_text: str, results: Path, checks: bool, where: Path) -> Any:
    """A certificate's spec (its bundled text, under its own file name) judged again on `results`, with the audit
    and golden rows where the certificate has them: what --verify compares and --reproduce reads."""
    from harness.execution.qualify_run import spec_case
    from harness.gating import load_run
    from harness.gating.golden import check_rows
    from harness.gating.qualify import judge, load_spec

    where.mkdir(parents=True, exist_ok=True)
    spec_path = where / "spec.toml"
    spec_path.write_text(spec_text)
    spec = load_spec(spec_path, spec_case)
    run = load_run(results)
    cert = judge(spec, run, results)
    if checks:
        cert.requirements += check_rows(spec, run)
    return cert


def _with_checks(doc: dict[str, Any]) -> bool:
    return any(r.get("requirement") in ("audits", "golden_outputs") for r in doc.get("requirements") or [])


def _qualify_verify(cert_path: Path) -> int:
    """`harness qualify --verify CERT`: 0 when every check passes, 1 when one fails (the field or file named)."""
    import tempfile

    from harness.gating.provenance import verify

    try:
        doc = json.loads(cert_path.read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"--verify {cert_path}: not a readable certificate ({exc})") from None
    with tempfile.TemporaryDirectory(prefix="harness-verify-") as tmp:
        checks = verify(cert_path, lambda text, results: _rejudge(text, results, _with_checks(doc), Path(tmp)))
    for ok, line in checks:
        print(visible(f"{'ok' if ok else 'FAIL' if ok is False else 'n/a'}  {line}"))
    failed = [line for ok, line in checks if ok is False]
    print(visible(f"{cert_path}: " + ("REFUSED: " + failed[0] if failed else
                                      f"verified ({sum(1 for ok, _ in checks if ok)} checks; "
                                      f"{sum(1 for ok, _ in checks if ok is None)} not checkable here)")))
    return EXIT_OK if not failed else 1


def _qualify_reproduce(cert_path: Path, args: argparse.Namespace) -> int:
    """`harness qualify --reproduce CERT`: the certificate's spec run again here, each runtime release in its own
    environment as the gate runs side A (the certificate's environment lock names the release each case ran; a
    release that cannot be installed here falls back to this interpreter's, labelled); per figure, in its band or
    not, and which release ran it (contended misses said apart). 0 all reproduced, 1 a clean miss, 3 only
    contended or unmeasured misses."""
    from harness.execution.qualify_run import release_plans, run_releases, spec_case, spec_run_config
    from harness.gating import load_run
    from harness.gating.provenance import reproduce_rows
    from harness.gating.qualify import load_spec
    from harness.report.progress import RunProgress
    from harness.results.store import atomic_write_text

    try:
        doc = json.loads(cert_path.read_text())
        spec_text = doc["provenance"]["spec_text"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"--reproduce {cert_path}: not a certificate with a bundled spec ({exc})") from None
    name = doc.get("spec", {}).get("name", "spec")
    out = Path(args.out) if args.out else Path("reports") / f"reproduce-{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    (out / "spec.toml").write_text(spec_text)
    spec = load_spec(out / "spec.toml", spec_case)
    golden = (doc["provenance"].get("golden") or {}).get("store")
    lock = doc["provenance"].get("environment_lock") or {}
    certified = lock.get("providers") if isinstance(lock.get("providers"), dict) else {}
    config = spec_run_config(spec, out)
    if args.env_wheels:
        config = config.replace(env_wheels=str(Path(args.env_wheels).resolve()))
    plans = release_plans([sc.case for sc in spec.cases], certified, config,
                          note=lambda line: print(visible(line), flush=True))
    for p in plans:
        print(visible(f"release {p.case.id}: {p.release}"))
    print(f"reproduce {name}: running {len(spec.cases)} case(s) into {out}")
    results = run_releases(spec, plans, out, RunProgress(), config=config,
                           golden_dir=Path(golden) if golden and Path(golden).is_dir() else None)
    cert = _rejudge(spec_text, results, _with_checks(doc), out)
    rows = reproduce_rows(doc, load_run(results), cert)
    for r in rows:
        now = "-" if not isinstance(r["now"], (int, float)) else f"{r['now']:.4g}"
        print(visible(f"{r['status']:<15} {r['case_id']:<34} {r['requirement']:<20} was {r['measured']:.4g}, now "
                      f"{now}, band [{r['low']:.4g}, {r['high']:.4g}] ({r['blocks']} activations); "
                      f"ran on {r['release']}"))
    counts = {s: sum(r["status"] == s for r in rows) for s in ("reproduced", "not reproduced", "contended",
                                                               "band contended", "not measured")}
    share = counts["reproduced"] / len(rows) if rows else 0.0
    fell = sum(1 for p in plans if p.fallback)
    print(f"reproduced {counts['reproduced']} of {len(rows)} figures within their bands ({100 * share:.0f}%); "
          f"{counts['not reproduced']} not reproduced on a clean measurement, {counts['contended']} missed while "
          f"contended (not judged), {counts['band contended']} whose certificate figure was itself contended (no band), "
          f"{counts['not measured']} not measured"
          + (f"; {fell} case(s) on this interpreter's release, the certified one not installable here" if fell else ""))
    atomic_write_text(out / "reproduce.json", json.dumps({"certificate": str(cert_path), "rows": rows,
                                                          "counts": counts, "releases": [
                                                              {"case_id": p.case.id, "runtime": p.run_as.runtime,
                                                               "release": p.release, "pinned": p.pinned,
                                                               "fallback": p.fallback} for p in plans]},
                                                         indent=1, default=str))
    if not rows:
        return 3
    return EXIT_OK if counts["reproduced"] == len(rows) else 1 if counts["not reproduced"] else 3


def _qualify_fleet(args: argparse.Namespace, spec: Any, out: Path) -> int:
    """`harness qualify SPEC --ray`: every node qualified by the spec and placed against its peers; a certificate
    per node (OUT/NODE/) and one for the fleet (OUT/fleet-certificate.*). With --burn-in, the spec in rounds on
    every node (OUT/round-NN/NODE/) and a trend test per node; placed and certified on the last round."""
    from harness.execution.fleet_run import fleet_signals, run_fleet
    from harness.gating.fleet import FleetCertificate, fleet_settings, place_fleet
    from harness.gating.golden import check_rows, golden_store, read_index, store_files
    from harness.gating.provenance import provenance
    from harness.gating.qualify import judge
    from harness.report.certificate import write_certificate
    from harness.report.fleet_certificate import fleet_text, write_fleet_certificate

    settings = fleet_settings(spec.path)
    deadline = _duration(args.node_deadline, "--node-deadline") if args.node_deadline else None
    out.mkdir(parents=True, exist_ok=True)
    store = golden_store(spec)
    index = read_index(store)
    if index:
        print(f"golden outputs: {len(index)} case(s) from {store}, compared on every node")

    def one_round(where: Path) -> list[Any]:
        return run_fleet(spec, where, args.ray, selector=args.nodes, serial=args.serial,
                         note=lambda line: print(visible(line), flush=True),
                         golden=store_files(store, index) if index else None, node_deadline_s=deadline)

    burn: dict[str, dict[str, Any]] = {}
    with fleet_signals(spec, out, args.ray) as signals:  # between the rounds' waits too (Ray's SIGTERM exits 15)
        if args.burn_in:
            nodes, paths, burn = _fleet_burn_in(spec, out, _duration(args.burn_in), one_round)
        else:
            nodes = one_round(out)
            paths = {n.label: out / n.label / "results.json" for n in nodes}
        signals.guard.finishing = True  # every node's run is back: a signal from here waits for the certificates
        certs = {}
        for n in nodes:
            path = paths[n.label]
            if n.run is None or not path.is_file():
                certs[n.label] = None
                continue
            cert = judge(spec, n.run, path)
            cert.requirements += check_rows(spec, n.run)
            extra: dict[str, Any] = {}
            if n.label in burn:
                cert.requirements += burn[n.label]["rows"]
                extra["burn_in"] = {k: v for k, v in burn[n.label].items() if k != "rows"}
            extra["provenance"] = provenance(cert, store if index else None)
            (out / n.label).mkdir(parents=True, exist_ok=True)
            write_certificate(cert, out / n.label, extra)
            certs[n.label] = cert
        judgement = place_fleet(nodes, [sc.case for sc in spec.cases], within_pct=settings.get("within_pct"),
                                **({"false_flag_rate": settings["false_flag_rate"]}
                                   if "false_flag_rate" in settings else {}))
        fleet = FleetCertificate(spec, certs, judgement, burn_in=burn)
        print(fleet_text(fleet))
        for name, path in write_fleet_certificate(fleet, out).items():
            print(f"{name:>22}: {path}")
    status = signals.exit_status()
    if status is not None:  # the certificates are written whole; the exit still says the signal (130 / 143)
        raise SignalStop(status - 128)
    return fleet.exit_code


def _fleet_burn_in(spec: Any, out: Path, seconds: float, one_round: Any
                   ) -> tuple[list[Any], dict[str, Path], dict[str, dict[str, Any]]]:
    """The spec on every node in rounds (OUT/round-NN/NODE/) until `seconds` have passed and at least MIN_ROUNDS
    ran; per node, the trend test across its rounds (harness.gating.burnin) and its machine state per round (read
    on the node). Returns the last round's node runs (a node lost in any round stays lost, with that round named),
    each node's last results file, and each node's burn-in record (its requirement rows under "rows")."""
    import dataclasses

    from harness.gating.burnin import MIN_ROUNDS, burn_in_rows

    t0 = time.monotonic()
    history: dict[str, list[tuple[int, Any]]] = {}
    paths: dict[str, Path] = {}
    lost: dict[str, str] = {}
    n = 0
    while n < MIN_ROUNDS or time.monotonic() - t0 < seconds:
        n += 1
        print(f"burn-in round {n} ({time.monotonic() - t0:.0f} of {seconds:.0f} s)", flush=True)
        where = out / f"round-{n:02d}"
        nodes = one_round(where)
        for node in nodes:
            history.setdefault(node.label, []).append((n, node))
            paths[node.label] = where / node.label / "results.json"
            if node.lost and node.label not in lost:
                lost[node.label] = f"burn-in round {n}: {node.lost}"
        if nodes and all(node.label in lost for node in nodes):
            print("burn-in: every node lost; stopped")
            break
    final, burn = [], {}
    case_ids = [sc.case.id for sc in spec.cases]
    for label, rounds in history.items():
        last = rounds[-1][1]
        final.append(dataclasses.replace(last, lost=lost[label]) if label in lost else last)
        runs = [node.run for _, node in rounds if node.run is not None and not node.lost]
        rows, trends = burn_in_rows(runs, case_ids)
        for t in trends:
            for x in t["trends"]:
                print(visible(f"burn-in {label} {t['case_id']}: {x['text']}"))
        states = [{"round": i, "start": node.machine.get("start") or {}, "end": node.machine.get("end") or {}}
                  for i, node in rounds]
        burn[label] = {"rounds": len(runs), "seconds": time.monotonic() - t0, "machine": states, "trends": trends,
                       "cpu_freq_mhz": [s["end"].get("cpu_freq_mhz") for s in states], "rows": rows}
    return final, paths, burn


COMMANDS = {"baseline": Command(cmd_baseline, plugins=False), "compare": Command(cmd_compare, plugins=False),
            "gate-check": Command(cmd_gate_check), "qualify": Command(cmd_qualify)}
