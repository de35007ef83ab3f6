"""Self-test helper: a copy of a results file with some cases' latency samples scaled (a synthetic slowdown)."""

from __future__ import annotations

import argparse
import copy
import dataclasses
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from harness.results.schema import CaseResult, RunResults, block_p50_ms, load_results
from harness.results.stats import latency_stats, throughput_sps
from harness.results.store import write_results


def scaled_copy(run: RunResults, factor: float, where: Callable[[CaseResult], bool],
                noise_cv: float | None = None) -> RunResults:
    """A deep copy of `run` whose matching measured cases have every sample multiplied by `factor`."""
    out = copy.deepcopy(run)
    cv = noise_cv if noise_cv is not None else float(run.config.get("noise_cv", 0.10) or 0.10)
    for c in out.cases:
        if c.measured and where(c):
            c.samples_ns = [int(round(s * factor)) for s in c.samples_ns]
            stats = latency_stats(c.samples_ns, cv)
            c.latency = stats
            c.throughput_sps = throughput_sps(c.case.batch, stats.p50_ms)
            c.details = {**c.details, "synthetic_scale": factor}
            at = 0
            for i, b in enumerate(c.blocks):
                if b.samples:
                    c.blocks[i] = dataclasses.replace(b, p50_ms=block_p50_ms(c.samples_ns[at:at + b.samples]))
                at += b.samples
    out.run_id = f"{run.run_id}-x{factor:g}"
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m harness.gating.scale", description=__doc__.splitlines()[0])
    p.add_argument("results")
    p.add_argument("--runtime", required=True, help="scale the cases of this runtime")
    p.add_argument("--factor", type=float, required=True, help="e.g. 1.25 for a 25%% slowdown")
    p.add_argument("--out", required=True, help="folder for the scaled results.json")
    a = p.parse_args(argv)
    run = scaled_copy(load_results(a.results), a.factor, lambda c: c.case.runtime == a.runtime)
    path = write_results(run, Path(a.out))
    n = sum(1 for c in run.cases if c.details.get("synthetic_scale") == a.factor)
    print(f"{path}: {n} {a.runtime} case(s) scaled by {a.factor:g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
