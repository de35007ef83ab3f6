"""What the audit costs inside the timed loop: bare calls against the audited callable, interleaved in one process.

    python -m harness_suites.benchmarks.audit_overhead [--models resnet18,bert-mini] [--pairs 40] [--seconds 0.25]

`harness run --audit` (and qualify, and golden outputs) wraps the timed callable in `audit.keep_last`: one store
of the output's reference per call; every other audit check runs after the timed loop, outside the case's figures.
Whole runs with and without --audit cannot show a 1% effect here: activations of one model differ by up to 30%
in p50 on this machine (docs/measurements.md). So this measures the wrapper where it runs, on one ONNX Runtime
session (the harness's settings, one thread): PAIRS pairs of blocks of SECONDS each, bare and audited, in an
alternating order (ABBA), each block's median kept; per model the median of the paired ratios (audited/bare)
with its distribution-free 95% interval (order statistics of the binomial: a block the machine disturbed moves
it by one rank, not by its size) and the mean with a t interval beside it. Prints one line per model.
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import numpy as np


def _block(call, seconds: float) -> float:
    """The median call time (ns) of a block of `seconds`."""
    samples = []
    end = time.perf_counter_ns() + int(seconds * 1e9)
    while time.perf_counter_ns() < end or len(samples) < 10:
        t0 = time.perf_counter_ns()
        call()
        samples.append(time.perf_counter_ns() - t0)
    return float(np.median(samples))


def main(argv: list[str] | None = None) -> int:
    import onnxruntime as ort
    from scipy.stats import binom, t

    from harness.artifacts import ArtifactCache, onnx_for_model
    from harness.artifacts.cache import default_cache_dir
    from harness.data import make_feed
    from harness.model import get_model
    from harness.plugins import load_plugins
    from harness.workloads.forward.audit import keep_last

    load_plugins()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="resnet18,bert-mini")
    p.add_argument("--pairs", type=int, default=40)
    p.add_argument("--seconds", type=float, default=0.25, help="seconds per block")
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    for name in args.models.split(","):
        spec = get_model(name)
        path = str(onnx_for_model(spec, ArtifactCache(default_cache_dir())).path)
        feed = make_feed(spec, {"batch": 1, "seq": args.seq_len}, 0)
        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads = args.threads, 1
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        names = [o.name for o in sess.get_outputs()]
        feed = {i.name: feed[i.name] for i in sess.get_inputs()}

        def bare():
            return sess.run(names, feed)

        audited = keep_last(bare, [None])
        for _ in range(20):
            bare()
        ratios, medians = [], []
        for i in range(args.pairs):
            order = (bare, audited) if i % 2 == 0 else (audited, bare)  # ABBA: drift cancels
            got = {fn: _block(fn, args.seconds) for fn in order}
            ratios.append(got[audited] / got[bare])
            medians.append(got[bare])
        srt = sorted(ratios)
        n = len(srt)
        lo_rank = max(int(binom.ppf(0.025, n, 0.5)) - 1, 0)
        hi_rank = min(n - 1 - lo_rank, n - 1)
        logs = np.log(ratios)
        half = float(t.ppf(0.975, len(logs) - 1)) * float(np.std(logs, ddof=1)) / math.sqrt(len(logs))
        mean = float(np.mean(logs))
        p50 = float(np.median(medians)) / 1e6
        print(f"{name:<10} p50 {p50:.4f} ms  audited/bare: median of {n} pair ratios {float(np.median(srt)):.5f} "
              f"[{srt[lo_rank]:.5f}, {srt[hi_rank]:.5f}] (upper bound {100 * (srt[hi_rank] - 1):+.2f}% of p50); "
              f"mean {math.exp(mean):.5f} [{math.exp(mean - half):.5f}, {math.exp(mean + half):.5f}]; "
              f"blocks of {args.seconds} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
