"""A fleet certificate rendered: the terminal lines, fleet-certificate.json and fleet-certificate.html."""

from __future__ import annotations

import json
from pathlib import Path

from harness.display import visible
from harness.gating.fleet import FleetCertificate
from harness.report.certificate import _fmt
from harness.report.templating import render_template
from harness.results.schema import _finite
from harness.results.store import atomic_write_text


def fleet_text(cert: FleetCertificate) -> str:
    """One line per node (its verdict, placement, its certificate's count, the first reason), the rows that placed
    a node anywhere but ok, then the fleet's verdict line."""
    doc = cert.as_dict()
    lines = []
    for label, n in doc["nodes"].items():
        spec = f"{n['spec_verdict']} {n['spec_passed']}/{n['spec_total']}" if n["spec_verdict"] else "no results"
        lines.append(visible(f"{n['verdict']:<13} {label:<28} {n['placement']:<13} spec {spec}; "
                             f"{n['reasons'][0]}"))
        lines += [visible(f"{'':<13}   {r}") for r in n["reasons"][1:4]]
        if len(n["reasons"]) > 4:
            lines.append(f"{'':<13}   ... and {len(n['reasons']) - 4} more (fleet-certificate.html)")
    counts: dict[str, int] = {}
    for n in doc["nodes"].values():
        counts[n["verdict"]] = counts.get(n["verdict"], 0) + 1
    lines.append(visible(f"fleet {cert.verdict}: " + ", ".join(f"{v} {k.lower()}" for k, v in counts.items())
                         + f" of {len(doc['nodes'])} node(s) ({cert.spec.name}; within "
                           f"{cert.judgement.within_pct:g}% of peers, false-flag rate "
                           f"{cert.judgement.false_flag_rate:g} per node)"))
    return "\n".join(lines)


def write_fleet_certificate(cert: FleetCertificate, out_dir: Path) -> dict[str, Path]:
    doc = cert.as_dict()
    html = render_template("fleet-certificate.html.j2", c=doc, fmt=_fmt)
    return {"fleet_certificate_json": atomic_write_text(out_dir / "fleet-certificate.json",
                                                        json.dumps(_finite(doc), indent=1)),
            "fleet_certificate_html": atomic_write_text(out_dir / "fleet-certificate.html", html)}
