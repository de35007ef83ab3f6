"""Re-choose a qualification spec's limits from a clean run of the same cases (docs/qualification.md).

    python tools/spec_limits.py RESULTS.json TEMPLATE.toml OUT.toml [--name NAME] [--description TEXT]

TEMPLATE names the cases (model, runtime, precision, batch, seq) and which requirements each has; RESULTS is a
clean run on a reference machine of the kind the spec qualifies. Each limit becomes the measured figure with the
headroom below, rounded outwards to two significant figures:

- latency p50 / p90 / p95 / p99 and mean: measured x 1.5 (x 2.0 for p99: the tail moves most between machines
  and drivers of one kind);
- throughput: measured / 1.5;
- GPU memory peak: measured x 1.25 (the CUDA context and library workspaces are most of it and vary little);
- drift (rel_l2_max, max_abs_max): the precision's tolerance stays the judge (drift_within_tolerance); a
  template's explicit drift limit is kept.

A case of the template that the run did not measure cleanly (skipped, failed, contended or noisy) is left out of
OUT with a comment that says why: a limit is never invented. The method and the source run are written at the
top of OUT.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import tomllib

HEADROOM = {"p50_ms_max": 1.5, "p90_ms_max": 1.5, "p95_ms_max": 1.5, "p99_ms_max": 2.0, "mean_ms_max": 1.5,
            "gpu_peak_mb_max": 1.25}
THROUGHPUT_HEADROOM = 1.5


def _round_out(x: float, up: bool) -> float:
    """Two significant figures, rounded away from the measured figure (up for a maximum, down for a minimum)."""
    if x <= 0 or not math.isfinite(x):
        raise ValueError(f"not a positive finite figure: {x}")
    e = math.floor(math.log10(x)) - 1
    q = 10.0 ** e
    v = (math.ceil(x / q) if up else math.floor(x / q)) * q
    return float(f"{v:.6g}")


def _measured(case: dict, key: str) -> float | None:
    lat = case.get("latency") or {}
    if key.endswith("_ms_max"):
        return lat.get(key[: -len("_max")])
    if key == "throughput_sps_min":
        return case.get("throughput_sps")
    if key == "gpu_peak_mb_max":
        return case.get("gpu_peak_mb")
    return None


def _why_unclean(case: dict | None) -> str | None:
    if case is None:
        return "not in the run"
    if case.get("status") != "passed":
        return f"{case.get('status')}: {(case.get('reason') or '')[:160]}"
    if (case.get("contention") or {}).get("contended"):
        return "contended in the reference run"
    if (case.get("latency") or {}).get("noisy"):
        return "noisy in the reference run"
    return None


def derive(results: dict, template: dict) -> tuple[list[dict], list[str]]:
    by_key = {}
    for c in results["cases"]:
        k = c["case"]
        by_key[(k["model"], k["runtime"], k["precision"], k["batch"], k.get("seq"))] = c
    kept, dropped = [], []
    for t in template.get("case", []):
        key = (t["model"], t["runtime"], t.get("precision", "fp32"), t.get("batch", 1), t.get("seq"))
        c = by_key.get(key)
        if c is None and key[4] is None:  # a sequence model's case measured at the run's seq
            c = next((v for k, v in by_key.items() if k[:4] == key[:4]), None)
        why = _why_unclean(c)
        label = f"{key[0]} {key[1]} {key[2]} b{key[3]}" + (f" s{key[4]}" if key[4] else "")
        if why:
            dropped.append(f"{label}: {why}")
            continue
        require = {}
        for name, old in (t.get("require") or {}).items():
            if name in HEADROOM:
                m = _measured(c, name)
                if m is None:
                    dropped.append(f"{label}: {name} was not measured")
                    continue
                require[name] = _round_out(m * HEADROOM[name], up=True)
            elif name == "throughput_sps_min":
                require[name] = _round_out(c["throughput_sps"] / THROUGHPUT_HEADROOM, up=False)
            else:
                require[name] = old
        case = {k: v for k, v in t.items() if k != "require"}
        case["require"] = require
        case["_measured"] = {n: _measured(c, n) for n in require if _measured(c, n) is not None}
        kept.append(case)
    return kept, dropped


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v)
    return repr(v)


def render(template: dict, kept: list[dict], dropped: list[str], source: str, env: dict, name: str | None,
           description: str | None) -> str:
    gpus = (env.get("gpu") or {}).get("gpus") or [{}] if isinstance(env.get("gpu"), dict) else [{}]
    gpu = dict(gpus[0], driver=(env.get("gpu") or {}).get("driver"))
    lines = [
        "# Limits re-chosen by tools/spec_limits.py from a clean reference run (the method is in its docstring:",
        "# latency x1.5, p99 x2.0, throughput /1.5, GPU memory x1.25, two significant figures, rounded outwards).",
        f"# Reference run: {source}",
        f"# Reference machine: {gpu.get('name') or env.get('gpu_name') or 'see the run'}; "
        f"driver {gpu.get('driver') or '?'}; run id {env.get('_run_id', '?')}",
    ]
    for d in dropped:
        lines.append(f"# left out: {d}")
    lines.append(f"name = {_toml_value(name or template.get('name', 'spec'))}")
    lines.append(f"description = {_toml_value(description or template.get('description', ''))}")
    for section in ("measure",):
        if template.get(section):
            lines += ["", f"[{section}]"] + [f"{k} = {_toml_value(v)}" for k, v in template[section].items()]
    if (template.get("defaults") or {}).get("require"):
        lines += ["", "[defaults.require]"] + [f"{k} = {_toml_value(v)}"
                                               for k, v in template["defaults"]["require"].items()]
    for c in kept:
        measured = c.pop("_measured")
        lines += ["", "[[case]]"] + [f"{k} = {_toml_value(v)}" for k, v in c.items() if k != "require"]
        lines.append("[case.require]")
        for k, v in c["require"].items():
            m = measured.get(k)
            lines.append(f"{k} = {_toml_value(v)}" + (f"  # measured {m:.4g}" if m is not None else ""))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("results", type=Path)
    p.add_argument("template", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--name")
    p.add_argument("--description")
    a = p.parse_args(argv)
    results = json.loads(a.results.read_text())
    template = tomllib.loads(a.template.read_text())
    kept, dropped = derive(results, template)
    if not kept:
        print(f"{a.results}: no case of {a.template} was measured cleanly:\n  " + "\n  ".join(dropped),
              file=sys.stderr)
        return 1
    env = dict(results.get("environment") or {})
    env["_run_id"] = results.get("run_id")
    a.out.write_text(render(template, kept, dropped, str(a.results), env, a.name, a.description))
    print(f"{a.out}: {len(kept)} case(s) with re-chosen limits, {len(dropped)} left out")
    for d in dropped:
        print(f"  left out: {d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
