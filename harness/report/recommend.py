"""The recommendation's report section (`harness recommend`): the Pareto chart (capacity against unloaded p99,
the Pareto set marked, the recommendation starred) and the table of every configuration, from recommend.json."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from harness.display import visible
from harness.report.templating import render_template

W, H, PAD = 640, 360, 56
PROVISIONAL = "(best estimate, provisional)"  # the mark of the best estimate of a search that could not judge


def verdict(data: Mapping[str, Any]) -> str:
    """recommended | not_judged | none_feasible; read from a file written before the field (schema 1) by the rule
    that wrote its exit code: anything unjudged, or an A/B that did not confirm, is not judged."""
    if data.get("verdict"):
        return str(data["verdict"])
    if not data.get("chosen"):
        return "none_feasible"
    ab = data.get("ab") or {}
    return "not_judged" if data.get("unjudged") or (ab and not ab.get("confirmed")) else "recommended"


def rows(data: Mapping[str, Any]) -> list[dict[str, Any]]:
    pareto = set(data.get("pareto") or [])
    judged = verdict(data) == "recommended"  # a star only on a recommendation the evidence made
    out = []
    for c in data.get("candidates") or []:
        cap = c.get("capacity") or {}
        best = c["name"] == data.get("chosen")
        out.append({"name": c["name"], "pareto": c["name"] in pareto, "chosen": best and judged,
                    "provisional": best and not judged,
                    "runner_up": c["name"] == data.get("runner_up"),
                    "capacity": cap.get("estimate"), "low": cap.get("low"), "high": cap.get("high"),
                    "activations": cap.get("activations") or (1 if cap else None),
                    "knee": cap.get("knee"), "cliff": cap.get("cliff"), "floor_ms": cap.get("floor_ms"),
                    "probes": cap.get("rates_probed"), "status": cap.get("status"), "drift": c.get("drift"),
                    "memory_mb": c.get("memory_mb"), "rung": c.get("rung"), "cost_s": c.get("cost_s"),
                    "refusal": c.get("refusal") or c.get("not_searched"), "node": c.get("node")})
    return sorted(out, key=lambda r: (r["refusal"] is not None, -(r["capacity"] or 0.0)))


def _num(x: Any, fmt: str = ".4g") -> str:
    return "" if x is None or (isinstance(x, float) and not math.isfinite(x)) else format(x, fmt)


def chart(table: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Points of the SVG chart: x = unloaded p99 (ms), y = capacity (requests/s), in pixels."""
    pts = [r for r in table if r["capacity"] is not None and r["floor_ms"] is not None and not r["refusal"]]
    if not pts:
        return []
    xmax = max(r["floor_ms"] for r in pts) * 1.1 or 1.0
    ymax = max(r["capacity"] for r in pts) * 1.1 or 1.0
    return [{"x": PAD + (W - 2 * PAD) * r["floor_ms"] / xmax, "y": H - PAD - (H - 2 * PAD) * r["capacity"] / ymax,
             "name": r["name"], "pareto": r["pareto"], "chosen": r["chosen"], "provisional": r["provisional"],
             "xmax": xmax, "ymax": ymax}
            for r in pts]


def render_markdown(data: Mapping[str, Any]) -> str:
    c = data.get("constraints") or {}
    drift = _num(c.get("drift_tolerance"), "g") or "none"
    cap = _num(c.get("memory_cap_mb"), "g") + " MB" if c.get("memory_cap_mb") else "none"
    intro = (f"Traffic: {visible(data.get('traffic', ''))}. SLO: p{c.get('percentile', 99):g} <= "
             f"{c.get('bound_ms')} ms; drift tolerance {drift}; memory cap {cap}. Search: {data.get('method')}, "
             f"{_num(data.get('cost_s'), '.1f') or '?'} s of probing"
             + (f" ({data['resumed_searches']} searches taken from the stopped run it resumed)"
                if data.get("resumed_searches") else "") + ".")
    lines = [f"## {heading(data)}: {visible(data.get('model', ''))}", "", intro, ""]
    lines += [f"- {visible(r)}" for r in reasons(data)]
    table = rows(data)
    nodes = any(r["node"] for r in table) or bool(data.get("ray"))  # a run on a cluster: each row names its node
    header = ("| configuration | Pareto | capacity (req/s) | interval | activations | knee | cliff | "
              "unloaded p99 (ms) | drift | memory (MB) | probes | rung | left out |" + (" node |" if nodes else ""))
    lines += ray_lines(data)
    lines += ["", header, "| --- " * (14 if nodes else 13) + "|"]
    for r in table:
        mark = "★" if r["chosen"] else PROVISIONAL if r["provisional"] else "runner-up" if r["runner_up"] else ""
        name = visible(r["name"]).replace("|", "\\|")
        lines.append(f"| {name} {mark} | {'yes' if r['pareto'] else ''} | {_num(r['capacity'])} | "
                     + (f"[{_num(r['low'])}, {_num(r['high'])}]" if r["low"] is not None else "")
                     + f" | {r['activations'] or ''} | {_num(r['knee'])} | {_num(r['cliff'])} | {_num(r['floor_ms'], '.3g')} | "
                     f"{_num(r['drift'], '.3g')} | {_num(r['memory_mb'], '.0f')} | {r['probes'] or ''} | "
                     f"{'' if r['rung'] is None or r['rung'] < 0 else r['rung']} | "
                     f"{visible(r['refusal'] or '').replace('|', '/')} |"
                     + (f" {visible(r['node'] or '')} |" if nodes else ""))
    return "\n".join(lines) + "\n"


def ray_lines(data: Mapping[str, Any]) -> list[str]:
    """A run on a Ray cluster: the hardware class it searched on, its nodes, the nodes left out and where the last
    rung and the A/B ran."""
    ray = data.get("ray")
    if not ray:
        return []
    out = ["", f"Searched on a Ray cluster: {len(ray.get('nodes') or [])} node(s) of hardware class "
               f"{visible(str(ray.get('hardware_class')))} ({visible(', '.join(ray.get('nodes') or []))}); the last "
               f"rung and the A/B on {visible(str(ray.get('final_node') or 'no node'))}."]
    out += [f"- ray: {visible(line)}" for line in ray.get("left_out") or []]
    return out


def reasons(data: Mapping[str, Any]) -> list[str]:
    """The stored reasons; a file written before the verdict (schema 1) that could not judge said "deploy" all the
    same: that line is read as what it was, the best estimate, provisional."""
    out = [str(r) for r in data.get("reasons") or []]
    if verdict(data) == "recommended":
        return out
    return [f"best estimate (provisional, not a recommendation): {r[len('deploy '):]}" if r.startswith("deploy ")
            else r for r in out]


def heading(data: Mapping[str, Any]) -> str:
    """The title says the verdict: a recommendation only when the evidence made one."""
    return {"recommended": "Deployment recommendation", "none_feasible": "Deployment search: nothing holds the SLO"
            }.get(verdict(data), "Deployment search: could not judge (no recommendation)")


def render_html(data: Mapping[str, Any]) -> str:
    table = rows(data)
    return render_template("recommend.html.j2", data=data, rows=table, points=chart(table), W=W, H=H, PAD=PAD,
                           num=_num, heading=heading(data), provisional=PROVISIONAL, reasons=reasons(data),
                           ray=data.get("ray"))
