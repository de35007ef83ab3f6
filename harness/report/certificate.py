"""A qualification certificate rendered: the terminal lines, certificate.json and certificate.html."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.display import visible
from harness.gating.qualify import Certificate
from harness.report.templating import render_template
from harness.results.schema import _finite
from harness.results.store import atomic_write_text


def certificate_text(cert: Certificate) -> str:
    """One line per requirement (status, case, label, detail, margin), then the verdict line."""
    lines = []
    reqs = list(cert.requirements)
    w = [max((len(visible(str(x))) for x in col), default=0)
         for col in ([r.status for r in reqs], [r.case_id for r in reqs], [r.label for r in reqs])]
    for r in reqs:  # each column as wide as its widest cell (an INCONCLUSIVE row no longer shifts the rest)
        margin = "" if r.margin_pct is None else f"  margin {r.margin_pct:+.1f}%"
        lines.append(visible(f"{r.status:<{w[0]}}  {r.case_id:<{w[1]}}  {r.label:<{w[2]}}  {_fmt(r.reason)}{margin}"))
    lines.append(visible(f"{cert.verdict}: {sum(r.passed for r in cert.requirements)}/{len(cert.requirements)} "
                         f"requirements met ({cert.spec.name}; results sha256 {cert.results_sha256[:16]}...)"))
    return "\n".join(lines)


def write_certificate(cert: Certificate, out_dir: Path, extra: dict[str, Any] | None = None) -> dict[str, Path]:
    """certificate.json and a self-contained certificate.html in `out_dir`; `extra` (its provenance) joins the
    JSON, which is then sealed (harness.gating.provenance.seal: `harness qualify --verify` checks it)."""
    from harness.gating.provenance import seal

    doc = _finite({**cert.as_dict(), **(extra or {})})
    doc["seal"] = seal(doc)
    html = render_template("certificate.html.j2", c=doc, fmt=_fmt)
    return {"certificate_json": atomic_write_text(out_dir / "certificate.json", json.dumps(doc, indent=1)),
            "certificate_html": atomic_write_text(out_dir / "certificate.html", html)}


def _fmt(v: Any) -> str:
    """A requirement value or a machine fact as a reader reads it: numbers to 4 figures, yes/no, a mapping as
    "key value, key value" and a list comma-separated (never a raw dict or list)."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, dict):
        return "; ".join(f"{str(k).replace('_', ' ')} {_fmt(x)}" for k, x in v.items()) or "-"
    if isinstance(v, (list, tuple, set, frozenset)):
        return ", ".join(_fmt(x) for x in v) or "-"
    return str(v)
