"""How often a certificate's reproducibility bands hold a re-run's figures (#54): N qualifications of one spec on
this machine (`harness qualify SPEC --out DIR`, or `--reproduce` folders: any folder with a results.json), each
judged by the spec; for every ordered pair (i, j), i != j, the bands run i's certificate would state against run
j's figures, as `harness qualify --reproduce` compares them. Scored for several floors of the band (the least
half-width) and for the range rule the bands used before (the figure's range over its activations, widened by
that range each side).

    python tools/band_coverage.py specs/cpu-2core.toml RUN_DIR [RUN_DIR ...] [--floors 2,3,4,5]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np


def main() -> None:
    import harness.options  # noqa: F401  (the spec's [measure] tables' parsers)
    from harness.execution.qualify_run import spec_case
    from harness.gating import load_run
    from harness.gating.provenance import _block_figures, band
    from harness.gating.qualify import judge, load_spec

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("spec")
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--floors", default="2,3,4,5")
    args = ap.parse_args()
    from harness.plugins import load_plugins

    load_plugins()  # the zoo, for the spec's model names
    spec = load_spec(args.spec, spec_case)
    runs = []
    for d in args.runs:
        run = load_run(Path(d) / "results.json")
        cert = judge(spec, run, Path(d) / "results.json")
        by_case = {c.case.id: c for c in run.cases}
        runs.append((d, {(r.case_id, r.requirement): (r, by_case.get(r.case_id)) for r in cert.requirements}))

    def range_rule(result, req):
        values = _block_figures(result, req.requirement)
        if req.unjudged == "too few samples" or len(values) < 2:
            return None
        lo, hi, v = min(values), max(values), float(req.measured)
        sp = hi - lo
        return {"low": max(0.0, min(lo - sp, v - 0.02 * v)), "high": max(hi + sp, v + 0.02 * v)}

    rules = {"range +- range, floor 2% (before)": range_rule}
    for f in (float(x) for x in args.floors.split(",")):
        rules[f"95% prediction interval, floor {f:g}%"] = lambda res, req, f=f: band(res, req, floor_pct=f)
    print(f"{len(runs)} runs, {len(runs) * (len(runs) - 1)} ordered pairs")
    for name, rule in rules.items():
        hit = total = 0
        widths, per = [], {}
        for i, (_, a) in enumerate(runs):
            for j, (_, b) in enumerate(runs):
                if i == j:
                    continue
                for key, (req, res) in a.items():
                    other = b.get(key)
                    if res is None or other is None or not isinstance(other[0].measured, (int, float)):
                        continue
                    if (res.contention and res.contention.contended) or (
                            other[1] and other[1].contention and other[1].contention.contended):
                        continue  # a contended figure is said apart by --reproduce, never scored here
                    bd = rule(res, req)
                    if bd is None:
                        continue
                    ok = bd["low"] <= float(other[0].measured) <= bd["high"]
                    hit += ok
                    total += 1
                    widths.append(100 * (bd["high"] - bd["low"]) / 2 / float(req.measured))
                    c = per.setdefault(key[1], [0, 0])
                    c[0] += ok
                    c[1] += 1
        print(f"{name:<40} {hit}/{total} ({100 * hit / max(total, 1):.1f}%) inside; median half-width "
              f"{float(np.median(widths)):.1f}%; " + ", ".join(f"{k} {h}/{n}" for k, (h, n) in sorted(per.items())))


if __name__ == "__main__":
    main()
