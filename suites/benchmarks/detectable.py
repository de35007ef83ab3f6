"""Does `min_detectable_step` say a step the detector finds at its stated power? Checked by simulation.

    python -m harness_suites.benchmarks.detectable [--phi 0.8] [--history 60] [--after 5,10] [--trials 30]
        [--sigma 0.02] [--json FILE]

Per trial (seed s = 0 .. TRIALS-1): AR(1) noise of marginal sigma SIGMA and lag-1 correlation PHI (phi 0:
independent noise) around 100 for HISTORY + AFTER runs (numpy's generator seeded with [s, round(100 PHI),
HISTORY]); `min_detectable_step` of the first HISTORY runs for AFTER runs after (power 0.9, the default p);
that step applied to the next AFTER runs of the same noise; found when `detect` (defaults) puts a level change
point within 3 runs of it. Prints per AFTER the median step said and the trials found (docs/history.md, "The
smallest step a history can show"). Nothing is timed.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path


def trial(seed: int, phi: float, history: int, after: int, sigma: float) -> tuple[float | None, bool]:
    """(the step said, whether `detect` found a step of that size)."""
    import numpy as np

    from harness.history.changes import detect, min_detectable_step
    from harness_suites.benchmarks.changepoints import _ar1

    rng = np.random.default_rng([seed, round(100 * phi), history])
    x = 100 * (1 + _ar1(rng, history + after, phi, sigma))
    step = min_detectable_step(x[:history], after)
    if step is None:
        return None, False
    y = x.copy()
    y[history:] *= 1 + step
    return step, any(c.kind == "level" and abs(c.index - history) <= 3 for c in detect(y))


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m harness_suites.benchmarks.detectable", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--phi", type=float, default=0.8, help="AR(1) lag-1 correlation (0: independent noise)")
    p.add_argument("--history", type=int, default=60, help="runs before the step")
    p.add_argument("--after", default="5,10", help="comma-separated: runs at the new level")
    p.add_argument("--trials", type=int, default=30)
    p.add_argument("--sigma", type=float, default=0.02, help="the noise's marginal sigma (relative)")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    try:
        afters = [int(a) for a in args.after.split(",") if a]
    except ValueError:
        p.error(f"--after {args.after!r}: comma-separated run counts")
    if not 0 <= args.phi < 1 or args.history < 3 or args.trials < 1 or not afters or min(afters) < 3:
        p.error("--phi in [0, 1), --history and every --after at least 3, --trials at least 1")
    import numpy as np

    out = []
    for after in afters:
        rows = [trial(s, args.phi, args.history, after, args.sigma) for s in range(args.trials)]
        said = [r[0] for r in rows if r[0] is not None]
        found = sum(r[1] for r in rows)
        med = float(np.median(said)) if said else None
        out.append({"phi": args.phi, "history": args.history, "after": after, "trials": args.trials,
                    "median_step": med, "found": found})
        step = "-" if med is None else f"{100 * med:.1f}%"
        print(f"phi {args.phi} history {args.history} after {after}: median step said {step}, "
              f"found in {found} of {args.trials}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
