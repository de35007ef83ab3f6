"""`harness recommend` over RunConfig (its capacity section) and the run session's signal rule: recommend.json after
every search, recommend.md and recommend.html; exit 0 confirmed, 3 could not judge, 128 + a signal."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.errors import UsageError
from harness.gating.verdicts import EXIT_CLEAN, EXIT_UNJUDGED

if TYPE_CHECKING:
    from harness.config import RunConfig

SCHEMA_VERSION = 3  # recommend.json: 1 records every search (rung, seed, settings) so --resume can take it; 2 adds
#                    the verdict and each final capacity's further activations; 3: a capacity's low/high are the
#                    interval a new search would give (the search spread), the bisection's bracket kept apart as
#                    bracket_low/high (files of 1 and 2 are read; their searches without a bracket are re-measured)
READABLE = (1, 2, 3)


def recommend_run(config: RunConfig) -> int:
    """`harness recommend` of a parsed configuration (harness.options.capacity): the model and traffic, the
    configurations in their workers, the search under the session's signal rule, then the verdict's files (or
    what an interruption kept). The plugins are loaded by the command, before its options named a model."""
    from harness.execution.session import HarnessSession
    from harness.traffic.spec import load_traffic
    from harness.workloads.capacity.recommend import Constraints
    from harness.workloads.capacity.search import SearchSettings

    cap = config.capacity
    spec, user_model, traffic = _model(cap.model_ref, cap.traffic, load_traffic(cap.traffic, seed=cap.traffic_seed))
    out = config.outputs.out_dir
    constraints = Constraints(cap.slo_ms, cap.slo_percentile, cap.drift_limit, cap.memory_cap_mb)
    settings = SearchSettings(cap.slo_ms, cap.slo_percentile, cap.search_tolerance, cap.probes, cap.probe_requests,
                              cap.probe_max_requests)
    head = _head(config, spec, traffic, constraints, settings)
    done = _earlier(out / "recommend.json", head) if cap.resume else {}
    out.mkdir(parents=True, exist_ok=True)
    # the workers' logs: removed at the end whatever stopped the command (a signal, a search thread that started a
    # worker while the others were being closed)
    config.outputs.scratch_dir.mkdir(exist_ok=True)
    candidates, close = _candidates(config, spec, traffic, user_model)
    print(f"{len(candidates)} configuration(s) of {spec.name}; traffic: {traffic.describe()}; "
          f"SLO {settings.describe()} -> {out}")
    session = HarnessSession(config)  # no case runs: its run folder, signals and stop
    return _search(session, candidates, close, head, constraints, settings, traffic.seed, done)


def _candidates(config: RunConfig, spec: Any, traffic: Any, user_model: str | None) -> tuple[list[Any], Any]:
    """The grid's configurations (harness.workloads.capacity.live), each in a supervised worker of its own unless
    --no-isolation, and their closer."""
    from harness.execution.capacity_worker import IsolatedConfig
    from harness.workloads.capacity.live import live_candidates

    cap, matrix, process = config.capacity, config.matrix, config.process
    opener = functools.partial(IsolatedConfig, log_dir=str(config.outputs.scratch_dir)) if process.isolation else None
    return live_candidates(spec, traffic, matrix.runtimes, [str(p) for p in matrix.precisions],
                           [v or "base" for v in matrix.variants], cap.thread_counts, cap.batchers,
                           config.artifacts.cache_dir, user_model=user_model, opener=opener,
                           contention_limit=config.measure.contention_limit, envs=process.envs,
                           env_wheels=process.env_wheels, say=lambda line: print(f"  {line}", flush=True))


def _model(ref: str, source: str, traffic: Any) -> tuple[Any, str | None, Any]:
    """(the model's spec, the --model file or factory it was registered from, the traffic): a user model's named
    free axes sized by the traffic (and dropped from it); a model with a problem is a UsageError."""
    from harness.model import get_model
    from harness.model_files import is_user_model_ref, register_user_model

    name, user_model = ref, None
    if is_user_model_ref(name):  # a user model, as run's --model
        axes = _named_axes(traffic, source)
        user_model, name = name, register_user_model(name, axes)
        traffic = _without(traffic, {d for d, _ in axes})  # sized once: no longer a dimension a request varies
    spec = get_model(name)
    if spec.problem:
        problem = spec.problem
        if "--shape" in problem:  # recommend takes no --shape: a named free axis is sized by the traffic
            problem = problem.split("; give it")[0].split("; give them")[0] + (
                f"; recommend sizes a named free axis from the traffic: give {source} a [shapes.NAME] "
                "histogram of one size for it (NAME: the axis's name)")
        raise UsageError(f"--model {ref}: {problem}")
    return spec, user_model, traffic


def _head(config: RunConfig, spec: Any, traffic: Any, constraints: Any, settings: Any) -> dict[str, Any]:
    """What recommend.json says of the run before any search: what --resume must find the same."""
    from harness.results.environment import cpu_fingerprint, cpu_model, library_versions

    cap = config.capacity
    return {"schema_version": SCHEMA_VERSION, "model": spec.name, "traffic": traffic.describe(),
            "traffic_file": cap.traffic, "method": "grid" if cap.grid else "halving",
            "constraints": constraints.__dict__, "settings": dataclasses.asdict(settings),
            "machine": {"cpu_model": cpu_model(), "fingerprint": cpu_fingerprint()}, "libraries": library_versions(),
            "isolation": "worker per configuration" if config.process.isolation else "in-process",
            "activations": cap.capacity_activations, "finished": False}


def _search(session: Any, candidates: list[Any], close: Any, head: dict[str, Any], constraints: Any,
            settings: Any, seed: int, done: Any) -> int:
    """The configurations measured and searched (recommend.json rewritten after every search) under the session's
    signal rule; every worker closed and the scratch removed whatever ends it; then the verdict's files, or what an
    interruption kept. Exit 0 recommended, 3 not judged, 128 + a signal."""
    from harness.execution.supervisor import stop_forkserver
    from harness.results.store import atomic_write_text
    from harness.workloads.capacity.recommend import recommend

    cap, out = session.config.capacity, session.config.outputs.out_dir
    started = time.perf_counter()
    kept: dict[str, Any] = {"candidates": []}  # what finished, as recommend.json holds it after every search

    def saved(evaluated: list[Any]) -> None:
        kept["candidates"] = [e.to_json() for e in evaluated]
        partial = {**head, "candidates": kept["candidates"]}
        atomic_write_text(out / "recommend.json", json.dumps(partial, indent=1, default=_jsonable) + "\n")

    stopped = None
    with session.signals_watched():
        try:
            try:
                measured = []
                for c in candidates:
                    m = c.measure() if hasattr(c, "measure") else c
                    if m.error:
                        print(f"  {c.name}: left out: {m.error}")
                    measured.append(m)
                rec = recommend(measured, constraints, settings, exhaustive=cap.grid, seed=seed,
                                ab_pairs=cap.capacity_ab_pairs, log=lambda s: print(f"  {s}", flush=True),
                                saved=saved, done=done, activations=cap.capacity_activations)
                session.finishing = True  # a signal from here on waits for the verdict's files
            finally:
                close()  # every worker ended, their logs removed
                stop_forkserver()
                shutil.rmtree(session.config.outputs.scratch_dir, ignore_errors=True)
        except KeyboardInterrupt as exc:  # SIGINT or SIGTERM (SignalStop): what finished is kept, no verdict
            stopped = getattr(exc, "signum", None) or session.stop_signal or 2
        if stopped is not None:
            return _interrupted(head, kept["candidates"], out, int(stopped), time.perf_counter() - started)
        _write_verdict({**head, **rec.to_json(), "wall_s": time.perf_counter() - started, "finished": True}, out)
        print(_last_line(rec))
        late = session.stop_signal
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
