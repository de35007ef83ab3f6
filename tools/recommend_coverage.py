"""Repeated capacity searches, each on a fresh activation, of a few configurations (#52): the share of ordered pairs
of searches of one configuration whose capacity lies in the other's stated interval, the search's own interval
(one activation) against the interval over several activations (recommend's --activations), from the same searches.

    python tools/recommend_coverage.py --model bert-mini --traffic specs/traffic/bert-seq32-poisson.toml \
        --runtimes ort-cpu --precisions fp32,int8 --slo-ms 20 --repeats 10 --out /tmp/coverage.json

The configurations' searches are interleaved (a, b, a, b ...); /proc/pressure/cpu is read around each search.
Scored three ways on the same searches: the bisection's bracket (the interval before the probes' bands), the
search's own interval (one activation), the interval over --activations. `--simulate` runs the same searches on
the simulated server (harness.workloads.capacity.simulated: one configuration per --service-ms, no timing):

    python tools/recommend_coverage.py --simulate --traffic specs/traffic/bert-seq32-poisson.toml \
        --service-ms 2.27,1.16 --service-cv 0.1 --slo-ms 20 --repeats 20 --requests 300 --max-requests 600 \
        --probes 6 --tolerance 0.1 --out /tmp/coverage-sim.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def _psi() -> float:
    try:
        first = Path("/proc/pressure/cpu").read_text().splitlines()[0]
        return float(first.split()[1].split("=")[1])
    except (OSError, IndexError, ValueError):
        return float("nan")


def coverage(caps: list[dict], low: str, high: str, est: str) -> tuple[int, int]:
    pairs = [(a, b) for i, a in enumerate(caps) for j, b in enumerate(caps) if i != j]
    return sum(a[low] <= b[est] <= a[high] for a, b in pairs), len(pairs)


def _widths(caps: list[dict], low: str, high: str, est: str) -> float:
    """The median of (high - low) / estimate over the searches with a capacity."""
    w = sorted((c[high] - c[low]) / c[est] for c in caps if c[est] > 0)
    return w[len(w) // 2] if w else float("nan")


def _row(cap, trial: int, psi0: float, t0: float) -> dict:
    """One search's figures: over activations (low, high, estimate) and its own (search_*, raw_estimate)."""
    row = {"trial": trial, "estimate": cap.estimate, "low": cap.low, "high": cap.high,
           "search_low": cap.search_low if cap.search_low is not None else cap.low,
           "search_high": cap.search_high if cap.search_high is not None else cap.high,
           "bracket_low": cap.bracket_low, "bracket_high": cap.bracket_high,
           "cliff": cap.cliff, "activation_cliffs": list(cap.activation_cliffs),
           "spread": cap.activation_spread, "contended": len(cap.contended),
           "retried": sum(p.verdict == "retried" for p in cap.probes),
           "psi_before": psi0, "psi_after": _psi(), "wall_s": time.time() - t0,
           "search_spread": cap.spread, "reason": cap.reason,
           "probes": [[p.kind, p.rate, p.requests, p.value_ms, p.low_ms, p.high_ms, p.verdict] for p in cap.probes]}
    # the search's own estimate: the midpoint of its bisection's bracket (a capacity of 0 stays 0)
    row["raw_estimate"] = ((cap.bracket_low + cap.bracket_high) / 2 if cap.bracket_low is not None and cap.estimate > 0
                           else cap.estimate)
    return row


def _simulated(args: argparse.Namespace):
    """Configurations on the simulated server (harness.workloads.capacity.simulated), one per --service-ms."""
    from harness.traffic.spec import load_traffic
    from harness.workloads.capacity.recommend import Candidate
    from harness.workloads.capacity.simulated import ServiceModel, SimulatedRuntime

    traffic = load_traffic(args.traffic)
    share, hiccup_ms = (float(x) for x in args.hiccup.split(","))
    cands = []
    for i, ms in enumerate(float(x) for x in args.service_ms.split(",")):
        rt = SimulatedRuntime(ServiceModel(ms, args.service_cv, share, hiccup_ms, args.activation_sd), traffic,
                              seed=args.sim_seed * 100 + i)
        cands.append(Candidate(f"simulated {ms:g} ms", {}, rt.probe, reactivate=rt.reactivate))
    return cands, lambda: None


def _live(args: argparse.Namespace):
    from harness.artifacts.cache import default_cache_dir
    from harness.execution.capacity_worker import IsolatedConfig
    from harness.measure.contention import default_contention_limit
    from harness.model import get_model
    from harness.plugins import load_plugins
    from harness.traffic.spec import load_traffic
    from harness.workloads.capacity.live import live_candidates

    load_plugins()
    spec = get_model(args.model)
    traffic = load_traffic(args.traffic)
    return live_candidates(spec, traffic, args.runtimes.split(","), args.precisions.split(","), ["base"],
                           [args.threads], ["none"], default_cache_dir(), opener=IsolatedConfig,
                           contention_limit=default_contention_limit())


def main() -> None:
    from harness.execution.supervisor import stop_forkserver
    from harness.workloads.capacity import recommend, search
    from harness.workloads.capacity.recommend import Evaluated, _search
    from harness.workloads.capacity.search import SearchSettings

    ap = argparse.ArgumentParser()
    ap.add_argument("--model")
    ap.add_argument("--traffic", required=True)
    ap.add_argument("--runtimes", default="ort-cpu")
    ap.add_argument("--precisions", default="fp32,int8")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--slo-ms", type=float, required=True)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--activations", type=int, default=3)
    ap.add_argument("--requests", type=int, default=500)
    ap.add_argument("--max-requests", type=int, default=1000)
    ap.add_argument("--probes", type=int, default=8)
    ap.add_argument("--tolerance", type=float, default=0.05)
    ap.add_argument("--spread-level", type=float, default=search.SPREAD_LEVEL,
                    help="the share of simulated searches' pairs the search spread holds (calibration)")
    ap.add_argument("--spread-trials", type=int, default=search.SPREAD_TRIALS)
    ap.add_argument("--simulate", action="store_true", help="the simulated server instead of --model's runtimes")
    ap.add_argument("--service-ms", default="2.27,1.16", help="simulated: a configuration's mean call time each")
    ap.add_argument("--service-cv", type=float, default=0.1)
    ap.add_argument("--hiccup", default="0,0", help="simulated: SHARE,MEAN_MS of calls with an exponential delay")
    ap.add_argument("--activation-sd", type=float, default=0.0, help="simulated: log sd of an activation's bias")
    ap.add_argument("--sim-seed", type=int, default=0)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    if not args.simulate and not args.model:
        ap.error("--model (or --simulate)")
    search.SPREAD_LEVEL = args.spread_level
    recommend.SPREAD_TRIALS = args.spread_trials
    cands, close = _simulated(args) if args.simulate else _live(args)
    settings = SearchSettings(args.slo_ms, 99.0, args.tolerance, args.probes, args.requests, args.max_requests)
    rows: dict[str, list[dict]] = {c.name: [] for c in cands}
    try:
        for trial in range(args.repeats):
            for c in cands:
                c.reactivate()  # every search on a fresh activation
                e = Evaluated(c)
                psi0, t0 = _psi(), time.time()
                _search(e, settings, trial, 0, {}, lambda s: None, "coverage", activations=args.activations)
                assert e.capacity is not None, e.refusal
                row = _row(e.capacity, trial, psi0, t0)
                rows[c.name].append(row)
                if not args.simulate:
                    print(json.dumps({"name": c.name, **{k: v for k, v in row.items() if k != "probes"}}),
                          flush=True)
    finally:
        close()
        stop_forkserver()
    summary = {}
    for name, caps in rows.items():
        b = coverage(caps, "search_low", "search_high", "raw_estimate")
        a = coverage(caps, "low", "high", "estimate")
        br = coverage(caps, "bracket_low", "bracket_high", "raw_estimate")
        wb, wa = _widths(caps, "search_low", "search_high", "raw_estimate"), _widths(caps, "low", "high", "estimate")
        est = sorted(c["estimate"] for c in caps)
        spreads = sorted(c["search_spread"] for c in caps if c["search_spread"] is not None)
        ss = spreads[len(spreads) // 2] if spreads else float("nan")
        summary[name] = {"before": b, "after": a, "bracket": br, "width_before": wb, "width_after": wa,
                         "median_estimate": est[len(est) // 2], "median_search_spread": ss}
        print(f"{name}: median capacity {est[len(est) // 2]:.4g} ({est[0]:.4g}-{est[-1]:.4g}); the bisection's "
              f"bracket {br[0]}/{br[1]} = {br[0] / br[1]:.0%}; one activation {b[0]}/{b[1]} = {b[0] / b[1]:.0%} "
              f"(median width {wb:.0%}); over {args.activations} activations {a[0]}/{a[1]} = {a[0] / a[1]:.0%} "
              f"(median width {wa:.0%}); search spread median {ss:.3f} ({spreads[0] if spreads else ss:.3f}-"
              f"{spreads[-1] if spreads else ss:.3f})")
    tot = {k: [sum(v[k][i] for v in summary.values()) for i in (0, 1)] for k in ("bracket", "before", "after")}
    print(f"all: the bracket {tot['bracket'][0]}/{tot['bracket'][1]} = {tot['bracket'][0] / tot['bracket'][1]:.0%}; "
          f"one activation {tot['before'][0]}/{tot['before'][1]} = {tot['before'][0] / tot['before'][1]:.0%}; over "
          f"{args.activations} activations {tot['after'][0]}/{tot['after'][1]} = "
          f"{tot['after'][0] / tot['after'][1]:.0%}")
    args.out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows,
                                    "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
