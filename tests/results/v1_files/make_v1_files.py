"""Writes schema_version-1 results files with block details (run with the harness at 1695fe7)."""
import sys
from pathlib import Path

import numpy as np

from harness.execution.rounds import confirm_rounds, later_rounds
from harness.gating import GateConfig, compare_runs, parse_gate
from harness.gating.compare import comparison_json
from harness.measure.stats import latency_stats, throughput_sps
from harness.results import write_results
from harness.results.schema import SCHEMA_VERSION, CaseId, CaseResult, RunResults

assert SCHEMA_VERSION == 1
out = Path(sys.argv[1])
ENV = {"cpu_model": "x", "cpu_cores_logical": 2, "libraries": {"numpy": "1"}}
A = CaseId("mlp", "ort-cpu", "fp32", 1, None, "cpu")
B = CaseId("mlp", "ort-cpu", "fp32", 2, None, "cpu")
C = CaseId("mlp", "ort-cpu", "fp32", 4, None, "cpu")


def ns(median_us, n, seed):
    rng = np.random.default_rng(seed)
    return [int(v) for v in rng.normal(median_us * 1000, median_us * 20, n)]


def first(case, samples, pending, repeats):
    stats = latency_stats(samples, 0.1)
    details = {"activation_reused": False}
    if repeats > 1:
        details.update({"blocks": [len(samples)], "block_reactivated": 0,
                        "block_p50_ms": [round(float(np.median(samples)) / 1e6, 6)]})
        if pending:
            details["blocks_pending"] = pending
    return CaseResult(case, "passed", samples_ns=samples, latency=stats,
                      throughput_sps=throughput_sps(case.batch, stats.mean_ms), warmup_iters=2,
                      accuracy={"passed": True, "rel_l2": 1e-7, "max_abs": 1e-7}, model_fingerprint="fp",
                      timing_scope="host_to_host", details=details)


class Blocks:
    def __init__(self, plan):
        self.plan = plan  # case id -> list of blocks (samples or an error string)

    def measure_block(self, case, config, fresh=True):
        b = self.plan[case.id].pop(0)
        if isinstance(b, str):
            return {"error": b}
        return {"samples_ns": b, "device_samples_ns": [], "warmup_iters": 1, "reactivated": fresh}


class Cfg:
    noise_cv = 0.1


def run(run_id, a_medians, b_median, seed, extra=None, confirm=None):
    a = first(A, ns(a_medians[0], 120, seed), 2, 3)
    b = first(B, ns(b_median, 300, seed + 1), 0, 1)
    c = CaseResult(C, "error", reason="RuntimeError: boom", phase="load")
    r = RunResults(run_id, "2026-11-23T00:00:00+00:00", ENV, {"repeats": 3}, cases=[a, b, c], complete=True,
                   finished_at="2026-11-23T00:01:00+00:00", harness_version="0.1.0")
    plan = {A.id: [ns(m, 120, seed + 10 + i) for i, m in enumerate(a_medians[1:])]}
    if extra:
        plan[A.id].insert(extra[0], extra[1])
        a.details["blocks_pending"] += 1
    later_rounds(r, Blocks(plan), Cfg())
    if confirm:
        confirm_rounds(r, {A.id}, Blocks({A.id: [ns(m, 120, seed + 20 + i) for i, m in enumerate(confirm)]}),
                       Cfg(), len(confirm))
    return r


base = run("base", [30, 40, 33], 20, 0)
cur = run("cur", [45, 30.5, 46], 25, 100, extra=(1, "crashed: worker killed by SIGSEGV in phase run"),
          confirm=[31, 47])
write_results(base, out / "base")
write_results(cur, out / "cur")
cmp = compare_runs(base, cur, GateConfig(gates=(parse_gate("median:10%"), parse_gate("p99:20%"))))
(out / "verdicts.json").write_text(comparison_json(cmp) + "\n")
print(cmp.summary())
for c in cur.cases:
    print(c.case.id, c.details)
