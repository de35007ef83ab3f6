"""Fidelity benchmark: the harness's ort-cpu median and p99 vs a bare `session.run` loop on the same file and feed.

    python -m harness_suites.benchmarks.fidelity [--models resnet18,mlp] [--rounds 3] [--no-isolation]

For each model (batch 1), alternates rounds of (a) a bare loop timed with time.perf_counter_ns around
`session.run` in this process and (b) the harness measuring the same case through its supervised worker
(isolation on by default), with the same ONNX file, seeded inputs, thread count and session options.
Prints the median of the per-round p50s and p99s, their ratios and the harness's 95% intervals; exits 1 if a
ratio is outside 1 +/- tolerance (the tail fidelity of issue 30: p99 within 5% of the bare loop's).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path



def bare_stats(path: str, feed: dict, threads: int, seconds: float, warmup: int = 20,
               into: list[int] | None = None) -> tuple[float, float]:
    """(p50, p99) in ms of a bare loop (the harness's own statistics on its samples); the samples go `into`."""
    from harness.results.stats import latency_stats

    samples = bare_samples_ns(path, feed, threads, seconds, warmup)
    if into is not None:
        into.extend(samples)
    st = latency_stats(samples)
    return st.p50_ms, st.p99_ms


def bare_samples_ns(path: str, feed: dict, threads: int, seconds: float, warmup: int = 20) -> list[int]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    for _ in range(warmup):
        sess.run(names, feed)
    samples = []
    end = time.perf_counter_ns() + int(seconds * 1e9)
    while time.perf_counter_ns() < end or len(samples) < 20:
        t0 = time.perf_counter_ns()
        sess.run(names, feed)
        samples.append(time.perf_counter_ns() - t0)
    return samples


def main(argv: list[str] | None = None) -> int:
    from harness.artifacts import ArtifactCache, onnx_for_model
    from harness.config import RunConfig
    from harness.data import make_feed
    from harness.execution.session import HarnessSession
    from harness.matrix import case_ids
    from harness.model import get_model
    from harness.plugins import load_plugins
    from harness.results.environment import cpu_busy_percent

    load_plugins()  # the zoo (a library caller loads the registries' plugins itself)

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="resnet18,mlp")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=2.0, help="measured seconds per round and side")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--tolerance", type=float, default=0.05)
    p.add_argument("--no-isolation", action="store_true")
    args = p.parse_args(argv)

    from harness.measure.memory import default_case_memory_gb
    from harness.measure.timer import TimingPolicy

    config = RunConfig.build(models=tuple(m.strip() for m in args.models.split(",") if m.strip()),
                             runtimes=("ort-cpu",), batch_sizes=(1,),
                             timing=TimingPolicy(warmup_iters=20, min_time_s=args.seconds),
                             **({"threads": args.threads} if args.threads else {}), isolation=not args.no_isolation,
                             case_memory_gb=default_case_memory_gb(), out_dir=Path("/tmp/harness-fidelity"),
                             repeats=1)  # one block of --seconds per round, as the bare loop
    m = config.matrix
    session = HarnessSession(config)  # the run session, as `harness run` drives a case (results in /tmp)
    print(f"CPU busy before the benchmark: {cpu_busy_percent(1.0):.1f}% (other jobs; rerun if high)")
    print(f"threads={config.measure.threads} isolation={'off' if args.no_isolation else 'on'} rounds={args.rounds} "
          f"seconds/round/side={args.seconds}")
    ok = True
    try:
        for name in m.models:
            spec = get_model(name)
            path = str(onnx_for_model(spec, ArtifactCache(config.artifacts.cache_dir), config.artifacts.exporter).path)
            feed = make_feed(spec, {"batch": 1}, config.inputs.seed)
            (case,) = case_ids((name,), m.runtimes, m.precisions, m.batch_sizes, m.seq_lens[:1])
            bare, harness, bare99, harness99, ci99 = [], [], [], [], []
            pooled_bare: list[int] = []
            pooled_harness: list[int] = []
            for _ in range(args.rounds):
                b50, b99 = bare_stats(path, feed, config.measure.threads, args.seconds, into=pooled_bare)
                bare.append(b50)
                bare99.append(b99)
                result = session.execute(case)
                session.run.cases.pop()  # measured again next round: results.json keeps case ids unique
                if result.status != "passed":
                    print(f"{name}: harness case {result.status}: {result.reason}")
                    return 1
                harness.append(result.latency.p50_ms)
                pooled_harness.extend(result.samples_ns)
                harness99.append(result.latency.p99_ms)
                ci99.append((result.latency.p99_ci_low_ms, result.latency.p99_ci_high_ms))
            for what, bs, hs in (("p50", bare, harness), ("p99", bare99, harness99)):
                b, h = statistics.median(bs), statistics.median(hs)
                ratio = h / b
                good = abs(ratio - 1) <= args.tolerance
                ok &= good
                print(f"{name:<10} bare {what} {b:9.4f} ms  harness {what} {h:9.4f} ms  ratio {ratio:.3f}  "
                      f"{'OK' if good else 'OUTSIDE'} (+/-{args.tolerance:.0%})  rounds bare={[round(x, 4) for x in bs]}"
                      f" harness={[round(x, 4) for x in hs]}")
            print(f"{name:<10} harness p99 95% intervals per round: {ci99}")
            # every sample of every round pooled: both sides saw the same alternation of the machine's episodes
            from harness.results.stats import latency_stats

            pb, ph = latency_stats(pooled_bare), latency_stats(pooled_harness)
            for what, b, h in (("p50", pb.p50_ms, ph.p50_ms), ("p99", pb.p99_ms, ph.p99_ms)):
                print(f"{name:<10} pooled {what}: bare {b:.4f} ms (n={pb.iterations})  harness {h:.4f} ms "
                      f"(n={ph.iterations})  ratio {h / b:.3f}")
    finally:
        session.finish(interrupted=False)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
