"""`harness conform --ray` against one node: the wall time of a conformance run on a local Ray cluster of two one-core
nodes, on one of its nodes alone, and locally, with the rows of each run checked against the local run's.

One cluster for the whole measurement (tools/fleet_real.py's Fleet: a head pinned to core 0 and a worker pinned to
core 1, one CPU each; the raylet and every process it starts inherit the core at the node's start). Each repeat runs,
in this order:

- `local`: `harness conform --runtimes R` on this machine (no Ray), as docs/conformance.md measured it;
- `one`:   `harness conform --runtimes R --ray ADDRESS --placement 'R=fleet_node_0'`: every case on the head node
           (core 0), the worker node idle;
- `two`:   `harness conform --runtimes R --ray ADDRESS`: the cases spread over both nodes (cores 0 and 1).

Each is the real command in a subprocess; its wall time is taken around it (start to exit: the driver's collection of
ONNX's cases, about 5 s, is in it) and the command's own `wall N s` line (after the driver's collection) is kept too.
Every run's rows ({case id: status, conformance status}) are compared with the local run's of the same repeat: the
table counts the rows that differ (there should be none). The 1-minute load average before and after each run is
kept: a measurement is worth something only on a quiet machine.

    python tools/conform_ray_wall.py --runtimes ort-cpu --repeats 2 --out /tmp/conform-ray

It needs the [ray] extra and the runtime; it writes OUT/REPEAT-SETUP/ (each run's folder and its output) and
OUT/conform-ray-wall.json, prints the table, and ends every process the cluster started (Ctrl-C too).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

SETUPS = ("local", "one", "two")


def rows(folder: Path) -> dict[str, tuple[str, str]]:
    from harness.gating.conformance import conformance_status
    from harness.results import load_results

    return {c.case.id: (c.status, conformance_status(c)) for c in load_results(folder / "results.json").cases}


def node_figures(folder: Path) -> dict[str, Any]:
    """Each node's rows, the sum of its cases' durations and the cores it was pinned to (its environment)."""
    from harness.results import load_results

    out = {}
    for path in sorted(folder.glob("*/results.json")):
        run = load_results(path)
        out[path.parent.name] = {"rows": len(run.cases), "cases_s": round(sum(c.duration_s or 0 for c in run.cases), 1),
                                 "cpu_affinity": run.environment.extra("cpu_affinity")}
    return out


def one_run(setup: str, runtimes: str, address: str, out: Path, extra: list[str]) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "harness.cli", "conform", "--runtimes", runtimes, "--out", str(out), *extra]
    if setup != "local":
        cmd += ["--ray", address]
    if setup == "one":
        cmd += ["--placement", ",".join(f"{r}=fleet_node_0" for r in runtimes.split(","))]
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    (out.parent / f"{out.name}.log").write_text(proc.stdout + proc.stderr)
    said = re.search(r"^wall (\d+) s;", proc.stdout, re.M)
    return {"setup": setup, "command": " ".join(cmd), "exit": proc.returncode, "wall_s": round(wall, 2),
            "wall_after_collect_s": int(said.group(1)) if said else None,
            "load_before": round(load0, 2), "load_after": round(os.getloadavg()[0], 2),
            "nodes": node_figures(out) if setup != "local" else {}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runtimes", default="ort-cpu")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--cores", default="0,1", help="the cores of the head and the worker node")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--setups", default=",".join(SETUPS), help="which of local,one,two to run (in that order); the "
                   "rows are compared with the first one's")
    p.add_argument("--extra", default="", help="more options for every `harness conform`, e.g. '--ops Conv'")
    args = p.parse_args(argv)
    from fleet_real import Fleet

    args.out.mkdir(parents=True, exist_ok=True)
    cores = [int(c) for c in args.cores.split(",")]
    fleet = Fleet(2, cores)
    runs: list[dict[str, Any]] = []
    doc: dict[str, Any] = {"runtimes": args.runtimes, "cores": cores, "runs": runs, "complete": False}
    try:
        fleet.start()
        address = fleet.cluster.address
        for r in range(args.repeats):
            setups = [x for x in SETUPS if x in args.setups.split(",")]
            for setup in setups:
                folder = args.out / f"{r}-{setup}"
                run = one_run(setup, args.runtimes, address, folder, args.extra.split())
                got = rows(folder) if (folder / "results.json").is_file() else {}
                first = args.out / f"{r}-{setups[0]}"
                local = rows(first) if (first / "results.json").is_file() else {}
                run.update(repeat=r, cases=len(got), rows_differing_from_local=sum(
                    got.get(k) != local.get(k) for k in set(got) | set(local)))
                runs.append(run)
                print(f"repeat {r} {setup:>5}: exit {run['exit']}, {run['cases']} rows, wall {run['wall_s']:.1f} s "
                      f"(after collection {run['wall_after_collect_s']} s), {run['rows_differing_from_local']} rows "
                      f"differ from {setups[0]}'s, load {run['load_before']} -> {run['load_after']}"
                      + "".join(f"\n    {k}: {v}" for k, v in run["nodes"].items()), flush=True)
                (args.out / "conform-ray-wall.json").write_text(json.dumps(doc, indent=1))
        doc["complete"] = True
    except KeyboardInterrupt:
        print("interrupted: the runs that finished are in the table")
    finally:
        fleet.kill()
        (args.out / "conform-ray-wall.json").write_text(json.dumps(doc, indent=1))
    print("\n| setup | runs | wall s (median; each) | after collection s | rows differing from local | exit |")
    print("| --- | ---: | --- | --- | ---: | --- |")
    for setup in SETUPS:
        mine = [x for x in runs if x["setup"] == setup]
        if mine:
            walls = [x["wall_s"] for x in mine]
            print(f"| {setup} | {len(mine)} | {statistics.median(walls):.1f} ({', '.join(f'{w:.1f}' for w in walls)})"
                  f" | {', '.join(str(x['wall_after_collect_s']) for x in mine)} | "
                  f"{sum(x['rows_differing_from_local'] for x in mine)} | "
                  f"{', '.join(str(x['exit']) for x in mine)} |")
    return 0 if doc["complete"] else 130


if __name__ == "__main__":
    sys.exit(main())
