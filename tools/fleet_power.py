"""Power and false flags of the fleet placement (harness.gating.fleet) on simulated fleets: for each fleet size and
spread of activations, the share of trials in which a node slowed by each amount is placed `slow`, and the share
of node-trials of an identical fleet flagged anything. Usage: python tools/fleet_power.py [TRIALS]"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "gating"))

from fleet_synth import CASES, fleet  # noqa: E402

from harness.gating.fleet import OK, SLOW, place_fleet  # noqa: E402


def main(trials: int = 200) -> None:
    print("| nodes | activation spread (block sd) | identical: node-trials flagged | "
          + " | ".join(f"+{s}% found" for s in (3, 5, 6, 8, 10, 15)) + " |")
    print("|---|---|---|" + "---|" * 6)
    for n, block_sd in ((4, 0.005), (4, 0.01), (4, 0.02), (8, 0.01), (8, 0.02)):
        rng = np.random.default_rng(2026)
        flagged = sum(p.placement != OK for _ in range(trials)
                      for p in place_fleet(fleet(rng, n, block_sd=block_sd), CASES).nodes.values())
        found = []
        for s in (3, 5, 6, 8, 10, 15):
            hit = sum(place_fleet(fleet(rng, n, {0: 1 + s / 100}, block_sd=block_sd), CASES).nodes["n0"].placement
                      == SLOW for _ in range(trials))
            found.append(f"{100 * hit / trials:.1f}%")
        print(f"| {n} | {100 * block_sd:g}% | {flagged}/{trials * n} ({100 * flagged / (trials * n):.2f}%) | "
              + " | ".join(found) + " |")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200)
