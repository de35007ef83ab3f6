"""`harness recommend`: its parser and its run; writes recommend.json (after every configuration), recommend.md
and recommend.html; exit 0 confirmed, 3 could not judge, 2 bad input (docs/recommend.md)."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import shutil
import time
from pathlib import Path
from typing import Any

from harness.commands.common import Command
from harness.errors import UsageError
from harness.gating.verdicts import EXIT_CLEAN, EXIT_UNJUDGED

SCHEMA_VERSION = 2  # recommend.json: 1 records every search (rung, seed, settings) so --resume can take it; 2 adds
#                    the verdict and each final capacity's further activations (a file of 1 is read and resumed)
READABLE = (1, 2)


def add_parser(sub: Any) -> None:
    p = sub.add_parser("recommend", help="replay a traffic against runtime x precision x variant x threads x "
                                         "batcher, find each capacity under an SLO, and recommend one")
    p.add_argument("--traffic", required=True, metavar="FILE",
                   help="traffic spec (TOML or JSON) or a trace (.jsonl, .csv; AIPerf's mooncake and single_turn "
                        "too): docs/traffic.md")
    p.add_argument("--model", required=True, help="one model: of the zoo, a plugin's, an ONNX file or "
                                                  "pkg.module:factory (as run's --model)")
    p.add_argument("--runtimes", default="ort-cpu", help="comma-separated runtimes (default ort-cpu)")
    p.add_argument("--precisions", default="fp32", help="comma-separated precisions (default fp32)")
    p.add_argument("--variants", default="base", help="comma-separated variants, e.g. base,opt=basic (as run)")
    p.add_argument("--threads", default="1", help="comma-separated intra-op thread counts (default 1)")
    p.add_argument("--batchers", default="none",
                   help="semicolon-separated: none or max=N,wait=MS each (default none), e.g. 'none;max=8,wait=2'")
    p.add_argument("--slo-ms", type=float, required=True, help="the latency bound (ms) at --percentile")
    p.add_argument("--percentile", type=float, default=99.0, help="the SLO's percentile (default 99)")
    p.add_argument("--drift-tolerance", type=float, default=None,
                   help="largest rel_l2 drift against the FP32 reference (default: none)")
    p.add_argument("--memory-cap-mb", type=float, default=None, help="largest resident memory growth (MB)")
    p.add_argument("--tolerance", type=float, default=0.03,
                   help="the capacity interval's width at which a search stops, relative (default 0.03)")
    p.add_argument("--probes", type=int, default=25, help="most probed rates per search (default 25)")
    p.add_argument("--requests", type=int, default=2000, help="requests per probe (default 2000; doubled "
                                                               "while a probe cannot decide)")
    p.add_argument("--max-requests", type=int, default=16000, help="most requests per probe (default 16000)")
    p.add_argument("--ab-pairs", type=int, default=8, help="interleaved A/B pairs (default 8)")
    p.add_argument("--activations", type=int, default=3,
                   help="activations each final capacity is measured over: its search on one, the saturation replay "
                        "on the others, whose spread widens its interval (default 3; 1: the search's activation "
                        "only)")
    p.add_argument("--grid", action="store_true", help="search every configuration fully (the exhaustive "
                                                       "grid) instead of successive halving")
    p.add_argument("--resume", action="store_true",
                   help="go on with the stopped run in --out: the searches its recommend.json holds are taken from "
                        "it, the rest measured (the same model, traffic, constraints, settings, machine, library "
                        "versions and isolation only)")
    p.add_argument("--no-isolation", action="store_true",
                   help="every configuration in this process (default: each in a worker process of its own, as "
                        "the matrix runs its cases; for debugging)")
    p.add_argument("--envs", choices=("auto", "off"), default="auto",
                   help="runtime environments, as run's --envs: `auto` runs a runtime whose packages this interpreter "
                        "lacks (or a pinned NAME@VERSION) in a virtual environment of its own, built on first use "
                        "into the cache and reused; `off`: such a configuration is left out (default: auto)")
    p.add_argument("--env-wheels", default=None, metavar="DIR",
                   help="build runtime environments from this folder of wheels only (as run's --env-wheels)")
    p.add_argument("--seed", type=int, default=None, help="the traffic's seed (default: the file's)")
    p.add_argument("--out", type=Path, default=None, help="output folder (default reports/recommend-TIME)")
    p.add_argument("--cache-dir", type=Path, default=None, help="artifact cache (default: the harness's)")


def _split(text: str, sep: str = ",") -> list[str]:
    return [t.strip() for t in text.split(sep) if t.strip()]


def _check(args: argparse.Namespace) -> list[int]:
    """Every number bounded as `harness run` bounds its own (harness.options.values), before anything is set up:
    a count of 1e9 or a NaN cap is a usage error here, not an hour of measuring or an OverflowError."""
    from harness.options.values import MAX_THREADS, float_at_least, int_at_least
    from harness.traffic.spec import MAX_REQUESTS

    bounded = (("requests", args.requests, int_at_least(100, MAX_REQUESTS, "a probe's schedule is held in memory")),
               ("max-requests", args.max_requests, int_at_least(100, MAX_REQUESTS, "a probe's schedule is held in "
                                                                                   "memory")),
               ("probes", args.probes, int_at_least(3, 1000, "a search that needs more rates cannot narrow")),
               ("ab-pairs", args.ab_pairs, int_at_least(5, 10_000, "harness ab's own maximum")),  # 5: with 4 pairs the signed-rank test cannot reach p < 0.05
               ("slo-ms", args.slo_ms, float_at_least(1e-6, 1e7, "over two hours")),
               ("seed", args.seed, int_at_least(0)),
               ("memory-cap-mb", args.memory_cap_mb, float_at_least(1e-3, 1e9, "a petabyte")),
               ("drift-tolerance", args.drift_tolerance, float_at_least(0.0, 1e6, "no drift is that large")))
    for name, value, parse in bounded:
        if value is not None:
            parse(value, name)  # a UsageError naming the option, the value and the bound
    try:
        threads = [int(t) for t in _split(args.threads)]
    except ValueError:
        raise UsageError(f"--threads {args.threads!r}: whole numbers, comma-separated") from None
    for t in threads or [0]:
        int_at_least(1, MAX_THREADS, "more threads than any machine has cores")(t, "threads")
    _check_rest(args)
    return threads


def _check_rest(args: argparse.Namespace) -> None:
    """What the bounds above cannot say: ranges open at both ends, and options that go together."""
    if not 0 < args.percentile < 100:
        raise UsageError(f"--percentile {args.percentile}: must be in (0, 100)")
    if not 0 < args.tolerance < 1:
        raise UsageError(f"--tolerance {args.tolerance}: must be in (0, 1)")
    if not 100 <= args.requests <= args.max_requests:
        raise UsageError(f"--requests {args.requests} / --max-requests {args.max_requests}: 100 <= requests <= "
                         f"max-requests")
    if args.resume and args.out is None:
        raise UsageError("--resume needs --out DIR: the folder of the run to go on with")
    if not 1 <= args.activations <= 20:
        raise UsageError(f"--activations {args.activations}: 1 to 20")


def run(args: argparse.Namespace) -> int:
    """`harness recommend`: checked arguments, the model and traffic, the configurations in their workers, the
    search under the signals' rule, then the verdict's files (or what an interruption kept)."""
    from harness.artifacts.cache import default_cache_dir
    from harness.execution.capacity_worker import IsolatedConfig
    from harness.measure.contention import default_contention_limit
    from harness.options.process import wheel_folder
    from harness.plugins import load_plugins
    from harness.traffic.spec import load_traffic
    from harness.workloads.capacity.live import live_candidates
    from harness.workloads.capacity.recommend import Constraints
    from harness.workloads.capacity.search import SearchSettings

    threads = _check(args)
    env_wheels = wheel_folder(args.env_wheels, "env-wheels") if args.env_wheels else None
    load_plugins()
    spec, user_model, traffic = _model(args, load_traffic(args.traffic, seed=args.seed))
    out = args.out or Path("reports") / time.strftime("recommend-%Y%m%d-%H%M%S")
    constraints = Constraints(args.slo_ms, args.percentile, args.drift_tolerance, args.memory_cap_mb)
    settings = SearchSettings(args.slo_ms, args.percentile, args.tolerance, args.probes, args.requests,
                              args.max_requests)
    head = _head(args, spec, traffic, constraints, settings)
    done = _earlier(out / "recommend.json", head) if args.resume else {}
    out.mkdir(parents=True, exist_ok=True)
    scratch = out / ".scratch"  # the workers' logs: removed at the end whatever stopped the command (a signal, a
    scratch.mkdir(exist_ok=True)  # search thread that started a worker while the others were being closed)
    candidates, close = live_candidates(spec, traffic, _split(args.runtimes), _split(args.precisions),
                                        _split(args.variants), threads, _split(args.batchers, ";"),
                                        args.cache_dir or default_cache_dir(), user_model=user_model,
                                        opener=None if args.no_isolation else functools.partial(
                                            IsolatedConfig, log_dir=str(scratch)),
                                        contention_limit=default_contention_limit(), envs=args.envs,
                                        env_wheels=env_wheels, say=lambda line: print(f"  {line}", flush=True))
    print(f"{len(candidates)} configuration(s) of {spec.name}; traffic: {traffic.describe()}; "
          f"SLO {settings.describe()} -> {out}")
    return _search(args, candidates, close, head, out, scratch, constraints, settings, traffic.seed, done)


def _model(args: argparse.Namespace, traffic: Any) -> tuple[Any, str | None, Any]:
    """(the model's spec, the --model file or factory it was registered from, the traffic): a user model's named
    free axes sized by the traffic (and dropped from it); a model with a problem is a UsageError."""
    from harness.model import get_model
    from harness.model_files import is_user_model_ref, register_user_model

    name, user_model = args.model, None
    if is_user_model_ref(name):  # a user model, as run's --model
        axes = _named_axes(traffic, args.traffic)
        user_model, name = name, register_user_model(name, axes)
        traffic = _without(traffic, {d for d, _ in axes})  # sized once: no longer a dimension a request varies
    spec = get_model(name)
    if spec.problem:
        problem = spec.problem
        if "--shape" in problem:  # recommend takes no --shape: a named free axis is sized by the traffic
            problem = problem.split("; give it")[0].split("; give them")[0] + (
                f"; recommend sizes a named free axis from the traffic: give {args.traffic} a [shapes.NAME] "
                "histogram of one size for it (NAME: the axis's name)")
        raise UsageError(f"--model {args.model}: {problem}")
    return spec, user_model, traffic


def _head(args: argparse.Namespace, spec: Any, traffic: Any, constraints: Any, settings: Any) -> dict[str, Any]:
    """What recommend.json says of the run before any search: what --resume must find the same."""
    from harness.results.environment import cpu_fingerprint, cpu_model, library_versions

    return {"schema_version": SCHEMA_VERSION, "model": spec.name, "traffic": traffic.describe(),
            "traffic_file": str(args.traffic), "method": "grid" if args.grid else "halving",
            "constraints": constraints.__dict__, "settings": dataclasses.asdict(settings),
            "machine": {"cpu_model": cpu_model(), "fingerprint": cpu_fingerprint()}, "libraries": library_versions(),
            "isolation": "in-process" if args.no_isolation else "worker per configuration",
            "activations": args.activations, "finished": False}


def _search(args: argparse.Namespace, candidates: list[Any], close: Any, head: dict[str, Any], out: Path,
            scratch: Path, constraints: Any, settings: Any, seed: int, done: Any) -> int:
    """The configurations measured and searched (recommend.json rewritten after every search) under the signals'
    rule; every worker closed and the scratch removed whatever ends it; then the verdict's files, or what an
    interruption kept. Exit 0 recommended, 3 not judged, 128 + a signal."""
    from harness.execution.supervisor import stop_forkserver
    from harness.results.store import atomic_write_text
    from harness.workloads.capacity.recommend import recommend

    started = time.perf_counter()
    kept: dict[str, Any] = {"candidates": []}  # what finished, as recommend.json holds it after every search

    def saved(evaluated: list[Any]) -> None:
        kept["candidates"] = [e.to_json() for e in evaluated]
        partial = {**head, "candidates": kept["candidates"]}
        atomic_write_text(out / "recommend.json", json.dumps(partial, indent=1, default=_jsonable) + "\n")

    stopped = None
    with _stop_on_signals() as signals:
        try:
            try:
                measured = []
                for c in candidates:
                    m = c.measure() if hasattr(c, "measure") else c
                    if m.error:
                        print(f"  {c.name}: left out: {m.error}")
                    measured.append(m)
                rec = recommend(measured, constraints, settings, exhaustive=args.grid, seed=seed,
                                ab_pairs=args.ab_pairs, log=lambda s: print(f"  {s}", flush=True), saved=saved,
                                done=done, activations=args.activations)
                signals["finishing"] = 1  # a signal from here on waits for the verdict's files
            finally:
                close()  # every worker ended, their logs removed
                stop_forkserver()
                shutil.rmtree(scratch, ignore_errors=True)
        except KeyboardInterrupt as exc:  # SIGINT or SIGTERM (SignalStop): what finished is kept, no verdict
            stopped = getattr(exc, "signum", None) or signals.get("signum") or 2
        if stopped is not None:
            return _interrupted(head, kept["candidates"], out, int(stopped), time.perf_counter() - started)
        _write_verdict({**head, **rec.to_json(), "wall_s": time.perf_counter() - started, "finished": True}, out)
        print(_last_line(rec))
        late = signals.get("signum")
    if late:  # the signal came after the verdict: its files are whole; the exit still says the signal came
        return 128 + int(late)
    return EXIT_CLEAN if rec.verdict == "recommended" else EXIT_UNJUDGED


def _write_verdict(data: dict[str, Any], out: Path) -> None:
    """recommend.json, recommend.md and recommend.html of a finished run; the Markdown printed."""
    from harness.report.recommend import render_html, render_markdown
    from harness.results.store import atomic_write_text

    atomic_write_text(out / "recommend.json", json.dumps(data, indent=1, default=_jsonable) + "\n")
    md = render_markdown(data)
    atomic_write_text(out / "recommend.md", md)
    atomic_write_text(out / "recommend.html", render_html(data))
    print(md)


class _stop_on_signals:
    """SIGINT and SIGTERM as `harness run` takes them: the first stops the command (a SignalStop raised in the main
    thread, carrying the signal), any further one during the stop is absorbed; the old handlers come back after."""

    def __enter__(self) -> dict[str, int]:
        import signal

        from harness.errors import SignalStop

        self.seen: dict[str, int] = {}
        self.old: dict[int, Any] = {}

        def handler(signum: int, frame: Any) -> None:
            if "signum" in self.seen:
                return
            self.seen["signum"] = signum
            if not self.seen.get("finishing"):  # once the verdict is made, its files are written first
                raise SignalStop(signum, signal.Signals(signum).name)

        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self.old[sig] = signal.signal(sig, handler)
            except ValueError:  # not the main thread (a library call): the caller's handlers stay
                pass
        return self.seen

    def __exit__(self, *exc: Any) -> None:
        import signal

        for sig, old in self.old.items():
            signal.signal(sig, old)


def _interrupted(head: dict[str, Any], candidates: list[Any], out: Path, signum: int, wall_s: float) -> int:
    """A run stopped by a signal: recommend.json keeps the searches that finished (not finished: --resume goes on
    from them), recommend.md / .html say it was interrupted and recommend nothing; exit 128 + the signal."""
    import signal

    from harness.report.recommend import render_html, render_markdown
    from harness.results.store import atomic_write_text

    name = signal.Signals(signum).name
    searched = sum(len(c.get("searches") or ()) for c in candidates if isinstance(c, dict))
    why = (f"interrupted by {name} after {searched} search(es): nothing is recommended; what finished is kept "
           "(harness recommend ... --resume --out THIS FOLDER goes on from it)")
    cost = sum(float((s.get("capacity") or {}).get("cost_s") or 0.0) for c in candidates if isinstance(c, dict)
               for s in c.get("searches") or () if isinstance(s, dict))
    data = {**head, "candidates": candidates, "finished": False, "interrupted": name, "verdict": "not_judged",
            "not_judged": why, "reasons": [why], "wall_s": wall_s, "cost_s": cost, "chosen": None}
    atomic_write_text(out / "recommend.json", json.dumps(data, indent=1, default=_jsonable) + "\n")
    atomic_write_text(out / "recommend.md", render_markdown(data))
    atomic_write_text(out / "recommend.html", render_html(data))
    print(f"recommend: {why}; {out / 'recommend.json'}", flush=True)
    return 128 + signum


def _named_axes(traffic: Any, source: str) -> tuple[tuple[str, int], ...]:
    """The sizes of a user ONNX model's named free axes (neither batch nor seq) as the traffic gives them: one
    size each (a configuration is set up at one shape of such an axis); several sizes are a UsageError."""
    from harness.model import BATCH, SEQ

    out = []
    for dim in sorted(traffic.dims - {BATCH, SEQ}):
        if traffic.process == "trace":
            sizes = sorted({int(r.dims[dim]) for r in traffic.trace if dim in r.dims})
        else:
            sizes = sorted({int(v) for v, w in traffic.shapes.get(dim, ()) if w > 0})
        if len(sizes) != 1:
            raise UsageError(f"--traffic {source}: dimension {dim!r} takes {len(sizes)} sizes "
                             f"({', '.join(map(str, sizes[:8]))}); recommend sets a model up at one size of a named "
                             "axis: give it one")
        out.append((dim, sizes[0]))
    return tuple(out)


def _without(traffic: Any, dims: set[str]) -> Any:
    """The traffic with `dims` dropped from its shapes (a trace's records too)."""
    if not dims:
        return traffic
    if traffic.process == "trace":
        import dataclasses as dc

        return traffic.with_(trace=tuple(dc.replace(r, dims={k: v for k, v in r.dims.items() if k not in dims})
                                         for r in traffic.trace))
    return traffic.with_(shapes={k: v for k, v in traffic.shapes.items() if k not in dims})


def _last_line(rec: Any) -> str:
    """The verdict in one line, the reason first: a recommendation only when the evidence made one."""
    best = rec.get(rec.chosen)
    estimate = (f"{best.name} at {best.capacity.estimate:.4g} requests/s ([{best.capacity.low:.4g}, "
                f"{best.capacity.high:.4g}])") if best is not None and best.capacity is not None else ""
    if rec.unjudged:  # the loaded machine made figures the decision used: never a recommendation to act on
        return (f"recommend: could not judge, the machine was loaded ({len(rec.unjudged)}): " + "; ".join(rec.unjudged)
                + (f"; best estimate (provisional): {estimate}" if estimate else ""))
    if rec.not_judged:
        return f"recommend: could not judge: {rec.not_judged}; best estimate (provisional): {estimate}"
    if best is None:
        return "recommend: no configuration holds the SLO at any rate on this traffic"
    return f"recommend: {estimate}" + (" (confirmed by the A/B)" if rec.ab is not None else
                                       " (the only configuration that holds the SLO)")


def _earlier(path: Path, head: dict[str, Any]) -> dict[Any, Any]:
    """The searches of the run in `path` that --resume goes on with, once its model, traffic, method,
    constraints, settings, machine and library versions are this run's."""
    from harness.workloads.capacity.recommend import searches_from_json

    if not path.is_file():
        raise UsageError(f"--resume: {path} does not exist (no run to go on with in that folder)")
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"--resume: {path} cannot be read: {exc}") from None
    if not isinstance(data, dict) or data.get("schema_version") not in READABLE:
        raise UsageError(f"--resume: {path} is not a recommend.json of schema version {' or '.join(map(str, READABLE))}"
                         f" (written before runs could be resumed?): start anew without --resume")
    keys = ("model", "traffic", "method", "constraints", "settings", "machine", "libraries", "isolation")
    differ = [k for k in keys if data.get(k) != head[k]]
    if differ:
        was = "; ".join(f"{k}: {data.get(k)!r} there, {head[k]!r} here" for k in differ)
        raise UsageError(f"--resume: {path} was measured with another {', '.join(differ)} ({was})")
    try:
        return searches_from_json(data["candidates"])
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"--resume: {path}: a recorded search cannot be taken: {exc}") from None


def _jsonable(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return str(x)


COMMANDS = {"recommend": Command(run, plugins=False)}
