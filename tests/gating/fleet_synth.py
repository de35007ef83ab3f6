"""Simulated fleets for the fleet statistics' tests: node runs whose samples come from a seeded noise model."""

from __future__ import annotations

import numpy as np

from harness.gating.fleet import NodeRun
from harness.results.schema import Block, CaseId, CaseResult, RunResults
from harness.results.stats import latency_stats
from harness.results.stored import BlockContention, CaseContentionRecord
from harness.results.stored import RunEnvironmentRecord

CASES = (CaseId("m", "rt", "fp32", 1, None, "cpu"), CaseId("m", "rt", "fp32", 8, None, "cpu"))
BASE_MS = {1: 2.0, 8: 11.0}


def node_run(label: str, rng: np.random.Generator, *, factor: float = 1.0, blocks: int = 3, samples: int = 120,
             block_sd: float = 0.01, sample_sd: float = 0.03, node_sd: float = 0.003, fingerprint: str = "fp-a",
             contended: bool = False, noisy: float = 1.0, cases=CASES) -> NodeRun:
    """One node: per case, `blocks` activations whose medians move by `block_sd` (log), samples lognormal
    around them by `sample_sd` (times `noisy`), the node itself off by `node_sd` (identical hardware is never
    exactly identical) and `factor` (a slow node)."""
    out = []
    node_off = rng.normal(0, node_sd)
    for case in cases:
        all_ns, bl = [], []
        for _ in range(blocks):
            centre = BASE_MS[case.batch] * factor * np.exp(node_off + rng.normal(0, block_sd))
            ns = (centre * np.exp(rng.normal(0, sample_sd * noisy, samples)) * 1e6).astype(np.int64).tolist()
            all_ns += ns
            bl.append(Block.measured(ns, "case", contention=BlockContention(contended=contended) if contended else None))
        stats = latency_stats(all_ns)
        out.append(CaseResult(case, "passed", samples_ns=all_ns, blocks=bl, latency=stats,
                              contention=CaseContentionRecord(contended=contended, cause="test") if contended else None))
    run = RunResults(run_id=f"r-{label}", started_at="", environment=RunEnvironmentRecord.from_dict({"machine_fingerprint": fingerprint}),
                     cases=out, complete=True)
    return NodeRun(label, run)


def fleet(rng: np.random.Generator, n: int = 4, slow: dict[int, float] | None = None, **kw) -> list[NodeRun]:
    return [node_run(f"n{i}", rng, factor=(slow or {}).get(i, 1.0), **kw) for i in range(n)]
