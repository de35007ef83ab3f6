"""Contention benchmark: the same matrix quiet, with one busy core and with two (planted busy loops, bounded).

    python -m harness_suites.benchmarks.contention [--models resnet18,mlp] [--batch-sizes 1,8] [--out DIR]

Runs `harness run` three times (0, 1, 2 busy loops beside it), prints per case p50, p99, the worst block's
run-queue wait share, PSI and the contended verdict, then `harness compare` of the quiet run against each
loaded one (which must have no `regressed` row: contended rows are inconclusive). The figures for
docs/method.md's calibration and docs/measurements.md.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import subprocess
import sys
import time
from pathlib import Path


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def run_matrix(out: Path, models: str, runtimes: str, batches: str, busy: int, extra: list[str]) -> None:
    ctx = multiprocessing.get_context("fork")
    loops = [ctx.Process(target=_spin, args=(900.0,), daemon=True) for _ in range(busy)]
    for p in loops:
        p.start()
    try:
        cmd = [sys.executable, "-m", "harness.cli", "run", "--models", models, "--runtimes", runtimes,
               "--batch-sizes", batches, "--precisions", "fp32", "--out", str(out), *extra]
        subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL)
    finally:
        for p in loops:
            p.terminate()
            p.join(5)


def rows(out: Path) -> list[dict]:
    doc = json.loads((out / "results.json").read_text())
    table = []
    for c in doc["cases"]:
        if c["status"] not in ("passed", "failed"):
            continue
        k, lat, con = c["case"], c.get("latency") or {}, c.get("contention") or {}
        table.append({"case": f"{k['model']}-{k['runtime']}-b{k['batch']}", "p50_ms": lat.get("p50_ms"),
                      "p99_ms": lat.get("p99_ms"), "wait": con.get("wait_fraction_max"),
                      "psi": con.get("psi_some_max"), "contended": con.get("contended")})
    return table


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet18,mlp")
    ap.add_argument("--runtimes", default="torch-cpu,ort-cpu")
    ap.add_argument("--batch-sizes", default="1,8")
    ap.add_argument("--out", default="reports/contention-bench")
    ap.add_argument("--busy", default="0,1,2", help="busy loops per run, comma-separated")
    ap.add_argument("extra", nargs="*", help="more `harness run` options (after --)")
    a = ap.parse_args(argv)
    root = Path(a.out)
    outs = {}
    for busy in (int(x) for x in a.busy.split(",")):
        outs[busy] = root / f"busy{busy}"
        run_matrix(outs[busy], a.models, a.runtimes, a.batch_sizes, busy, ["--min-time", "1", *a.extra])
    quiet = {r["case"]: r for r in rows(outs[min(outs)])}
    print(f"{'case':28s} {'busy':>4s} {'p50 ms':>9s} {'x quiet':>8s} {'p99 ms':>9s} {'wait':>6s} {'psi':>5s} contended")
    for busy, out in outs.items():
        for r in rows(out):
            q = quiet.get(r["case"], {}).get("p50_ms")
            ratio = f"{r['p50_ms'] / q:.2f}" if q and r["p50_ms"] else "-"
            wait = "-" if r["wait"] is None else f"{r['wait']:.2f}"
            psi = "-" if r["psi"] is None else f"{r['psi']:.2f}"
            print(f"{r['case']:28s} {busy:4d} {r['p50_ms']:9.4g} {ratio:>8s} {r['p99_ms']:9.4g} {wait:>6s} {psi:>5s} "
                  f"{r['contended']}")
    status = 0
    for busy, out in outs.items():
        if busy == min(outs):
            continue
        cmp = subprocess.run([sys.executable, "-m", "harness.cli", "compare", str(outs[min(outs)]), str(out),
                              "--all"], capture_output=True, text=True, check=False)
        print(f"\n$ harness compare busy{min(outs)} busy{busy}  (exit {cmp.returncode})")
        print(cmp.stdout.strip())
        status |= 1 if " regressed " in f" {cmp.stdout} " else 0
    return status


if __name__ == "__main__":
    sys.exit(main())
