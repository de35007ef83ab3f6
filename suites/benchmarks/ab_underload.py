"""Measure the paired A/B test (`harness ab`, `harness gate`) under load, and keep every block for re-scoring.

Per condition (quiet, one busy core, two busy loops, bursty neighbours that start and stop inside pairs) this runs
ROUNDS x (A/A + each planted slowdown) interleaved A/B measurements of the zoo's mlp on ONNX Runtime (1 thread):
each measurement 24 pairs of 0.02 s blocks in the drawn balanced order (harness.workloads.ab.pairs.block_order),
both sides activated anew (a new InferenceSession each) 4 times, every block timed call by call with its contention
read by the harness's own probe (harness.measure.contention.ContentionProbe, the worker's 10% run-queue limit). B's
planted slowdown is gate-check's: a busy wait of LEVEL x A's warm p50 after each call. The kernel's CPU pressure
(PSI, /proc/pressure/cpu) is recorded per condition. Each block is kept as its median and contention record (the
paired test reads nothing else of a block) in OUT/CONDITION.jsonl; re-score both rules with ab_rescore --underload.

    python -m harness_suites.benchmarks.ab_underload OUT [--rounds 80] [--conditions quiet,one,two,bursty]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from harness.results.stored import stored

BUSY = "while True: pass"
# on and off for 10-150 ms each, drawn anew every time: a neighbour that comes and goes inside the pairs
BURSTY = ("import random, time\nr = random.Random({seed})\nwhile True:\n    t = time.perf_counter() + "
          "r.uniform(0.01, 0.15)\n    while time.perf_counter() < t: pass\n    time.sleep(r.uniform(0.01, 0.15))\n")
CONDITIONS = {"quiet": [], "one": [BUSY], "two": [BUSY, BUSY], "bursty": [BURSTY.format(seed=1), BURSTY.format(seed=2)]}
LEVELS = (0.0, 0.05, 0.20, 0.60)
PAIRS, BLOCK_S, ACTIVATIONS, THREADS = 24, 0.02, 4, 1


def psi() -> dict[str, float]:
    """/proc/pressure/cpu's `some` line: avg10, avg60, avg300 and the total in microseconds."""
    try:
        line = next(x for x in Path("/proc/pressure/cpu").read_text().splitlines() if x.startswith("some "))
    except (OSError, StopIteration):
        return {}
    return {k: float(v) for k, v in (f.split("=") for f in line.split()[1:])}


def mlp_onnx(folder: Path) -> Path:
    import torch

    from harness_zoo.mlp import CONFIG, build

    path = folder / "mlp.onnx"
    torch.onnx.export(build(), (torch.randn(1, CONFIG["in_features"]),), str(path), input_names=["x"],
                      output_names=["logits"], dynamo=False)
    return path


def session(path: Path):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = THREADS, 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def measurement(path: Path, feed: dict, level: float, seed: int) -> dict:
    from harness.gating.ab import activation_of
    from harness.measure.contention import ContentionProbe
    from harness.workloads.ab.pairs import block_order

    clock = time.perf_counter_ns
    blocks, inject_ns, act = [], 0, -1
    sessions: dict[str, object] = {}
    for i, sides in enumerate(block_order(PAIRS, seed)):
        if activation_of(i, PAIRS, ACTIVATIONS) != act:
            act = activation_of(i, PAIRS, ACTIVATIONS)
            sessions = {s: session(path) for s in ("a", "b")}
            for s in ("a", "b"):
                for _ in range(20):
                    sessions[s].run(None, feed)
            if not inject_ns and level:
                warm = []
                for _ in range(200):
                    t0 = clock()
                    sessions["a"].run(None, feed)
                    warm.append(clock() - t0)
                inject_ns = int(level * float(np.median(warm)))
        for s in sides:
            run = sessions[s].run
            for _ in range(5):
                run(None, feed)
            probe = ContentionProbe(THREADS)
            probe.start()
            samples = []
            end = clock() + int(BLOCK_S * 1e9)
            while True:
                t0 = clock()
                run(None, feed)
                if s == "b" and inject_ns:
                    stop = clock() + inject_ns
                    while clock() < stop:
                        pass
                t1 = clock()
                samples.append(t1 - t0)
                if t1 >= end and len(samples) >= 5:
                    break
            blocks.append({"side": s, "pair": i, "median_ns": float(np.median(samples)), "n": len(samples),
                           "contention": stored(probe.stop()), "activation": act})
    return {"level": level, "seed": seed, "inject_ns": inject_ns, "blocks": blocks}


def run_condition(name: str, rounds: int, path: Path, out: Path) -> dict:
    feed = {"x": np.random.default_rng(0).standard_normal((1, 256), dtype=np.float32)}
    neighbours = [subprocess.Popen([sys.executable, "-c", code]) for code in CONDITIONS[name]]
    try:
        time.sleep(1.0)
        p0, t0 = psi(), time.time()
        with open(out / f"{name}.jsonl", "w") as f:
            for r in range(rounds):
                for level in LEVELS:
                    m = measurement(path, feed, level, seed=r)
                    m["round"] = r
                    f.write(json.dumps(m) + "\n")
                f.flush()
        p1, t1 = psi(), time.time()
    finally:
        for n in neighbours:
            os.kill(n.pid, signal.SIGTERM)
            n.wait()
    wall = t1 - t0
    info = {"condition": name, "neighbours": CONDITIONS[name], "rounds": rounds, "levels": LEVELS, "pairs": PAIRS,
            "block_s": BLOCK_S, "activations": ACTIVATIONS, "threads": THREADS, "wall_s": round(wall, 1),
            "psi_some_share": round((p1.get("total", 0) - p0.get("total", 0)) / 1e6 / wall, 3),
            "psi_before": p0, "psi_after": p1, "loadavg_after": os.getloadavg(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t0))}
    (out / f"{name}.json").write_text(json.dumps(info, indent=1))
    return info


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--rounds", type=int, default=80)
    p.add_argument("--conditions", default="quiet,one,two,bursty")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = mlp_onnx(Path(tempfile.mkdtemp(prefix="ab-underload-")))
    for name in args.conditions.split(","):
        info = run_condition(name, args.rounds, path, out)
        print(json.dumps({k: info[k] for k in ("condition", "wall_s", "psi_some_share", "started")}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
