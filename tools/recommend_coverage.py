"""Repeated capacity searches, each on a fresh activation, of a few configurations (#52): the share of ordered pairs
of searches of one configuration whose capacity lies in the other's stated interval, the search's own interval
(one activation) against the interval over several activations (recommend's --activations), from the same searches.

    python tools/recommend_coverage.py --model bert-mini --traffic specs/traffic/bert-seq32-poisson.toml \
        --runtimes ort-cpu --precisions fp32,int8 --slo-ms 20 --repeats 10 --out /tmp/coverage.json

The configurations' searches are interleaved (a, b, a, b ...); /proc/pressure/cpu is read around each search.
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


def main() -> None:
    from harness.artifacts.cache import default_cache_dir
    from harness.execution.capacity_worker import IsolatedConfig
    from harness.execution.supervisor import stop_forkserver
    from harness.measure.contention import default_contention_limit
    from harness.model import get_model
    from harness.plugins import load_plugins
    from harness.traffic.spec import load_traffic
    from harness.workloads.capacity.live import live_candidates
    from harness.workloads.capacity.recommend import Evaluated, _search
    from harness.workloads.capacity.search import SearchSettings

    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
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
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    load_plugins()
    spec = get_model(args.model)
    traffic = load_traffic(args.traffic)
    cands, close = live_candidates(spec, traffic, args.runtimes.split(","), args.precisions.split(","), ["base"],
                                   [args.threads], ["none"], default_cache_dir(), opener=IsolatedConfig,
                                   contention_limit=default_contention_limit())
    settings = SearchSettings(args.slo_ms, 99.0, args.tolerance, args.probes, args.requests, args.max_requests)
    rows: dict[str, list[dict]] = {c.name: [] for c in cands}
    try:
        for trial in range(args.repeats):
            for c in cands:
                c.reactivate()  # every search on a fresh activation
                e = Evaluated(c)
                psi0, t0 = _psi(), time.time()
                _search(e, settings, trial, 0, {}, lambda s: None, "coverage", activations=args.activations)
                cap = e.capacity
                assert cap is not None, e.refusal
                row = {"trial": trial, "estimate": cap.estimate, "low": cap.low, "high": cap.high,
                       "raw_estimate": cap.estimate if cap.search_low is None else None,
                       "search_low": cap.search_low if cap.search_low is not None else cap.low,
                       "search_high": cap.search_high if cap.search_high is not None else cap.high,
                       "cliff": cap.cliff, "activation_cliffs": list(cap.activation_cliffs),
                       "spread": cap.activation_spread, "contended": len(cap.contended),
                       "retried": sum(p.verdict == "retried" for p in cap.probes),
                       "psi_before": psi0, "psi_after": _psi(), "wall_s": time.time() - t0}
                # the search's own estimate: the midpoint of its own interval (a capacity of 0 stays 0)
                row["raw_estimate"] = ((row["search_low"] + row["search_high"]) / 2 if cap.search_low is not None
                                       else cap.estimate)
                rows[c.name].append(row)
                print(json.dumps({"name": c.name, **row}), flush=True)
    finally:
        close()
        stop_forkserver()
    summary = {}
    for name, caps in rows.items():
        b = coverage(caps, "search_low", "search_high", "raw_estimate")
        a = coverage(caps, "low", "high", "estimate")
        summary[name] = {"before": b, "after": a}
        print(f"{name}: one activation {b[0]}/{b[1]} = {b[0] / b[1]:.0%}; over {args.activations} activations "
              f"{a[0]}/{a[1]} = {a[0] / a[1]:.0%}")
    tot_b = [sum(v["before"][i] for v in summary.values()) for i in (0, 1)]
    tot_a = [sum(v["after"][i] for v in summary.values()) for i in (0, 1)]
    print(f"all: one activation {tot_b[0]}/{tot_b[1]} = {tot_b[0] / tot_b[1]:.0%}; over {args.activations} "
          f"activations {tot_a[0]}/{tot_a[1]} = {tot_a[0] / tot_a[1]:.0%}")
    args.out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows,
                                    "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
