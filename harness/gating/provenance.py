"""What makes a certificate checkable by a stranger: provenance, a per-field seal, `--verify` and the bands
`--reproduce` judges by (docs/qualification.md#certificates-anyone-can-check)."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from harness.gating.qualify import Certificate, RequirementResult
from harness.results.schema import CaseResult, RunResults, _finite

# A timing figure's reproducibility band: a 95% prediction interval, in log space, for the same figure pooled over
# as many new activations (measurement blocks) as the certificate's: figure x/÷ exp(t(0.975, k-1) x sd(log block
# figure) x sqrt(2/k)) -- the certificate's figure and a re-run's each average k activations of the same spread.
# Where the blocks agree to better than BAND_FLOOR_PCT, the band is that floor around the figure. A figure the
# certificate could not judge for too few samples (a p99 of 30 calls) gets no band: it certified nothing.
# Measured (docs/measurements.md, "A certificate reproduced, quiet"): 10 quiet qualifications of
# specs/cpu-2core.toml scored pairwise, 96.5% of judged figures inside another run's band (the range rule before
# it: 95.0%; both 88-94% when unjudged p99s of 30-80 calls were banded too).
BAND_FLOOR_PCT = 4.0
BAND_LEVEL = 0.975
_FIGURE = {"p50_ms_max": 50, "p90_ms_max": 90, "p95_ms_max": 95, "p99_ms_max": 99}


def _sha(path: Path) -> str | None:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def _block_figures(result: CaseResult, key: str) -> list[float]:
    samples = np.asarray(result.samples_ns, dtype=np.float64) / 1e6
    sizes = [b.samples for b in result.blocks if not b.error] if result.blocks else [samples.size]
    out, start = [], 0
    for n in sizes:
        part = samples[start:start + n]
        start += n
        if not part.size:
            continue
        if key in _FIGURE:
            out.append(float(np.percentile(part, _FIGURE[key])))
        elif key == "mean_ms_max":
            out.append(float(part.mean()))
        elif key == "throughput_sps_min":
            out.append(result.case.batch * 1000.0 / float(np.percentile(part, 50)))
    return out


def band(result: CaseResult | None, req: RequirementResult, floor_pct: float | None = None) -> dict[str, Any] | None:
    """The reproducibility band of a requirement's measured figure (timing figures only), or None. `floor_pct`:
    the least half-width (default BAND_FLOOR_PCT; tools/band_coverage.py scores others)."""
    if result is None or not isinstance(req.measured, (int, float)) or isinstance(req.measured, bool):
        return None
    if req.unjudged == "too few samples":
        return None
    values = [x for x in _block_figures(result, req.requirement) if x > 0 and math.isfinite(x)]
    v = float(req.measured)
    if len(values) < 2 or not v > 0 or not math.isfinite(v):
        return None
    from scipy.stats import t

    k = len(values)
    half = float(t.ppf(BAND_LEVEL, k - 1)) * float(np.std(np.log(values), ddof=1)) * math.sqrt(2 / k)
    half = max(half, math.log1p((BAND_FLOOR_PCT if floor_pct is None else floor_pct) / 100))
    low, high = v * math.exp(-half), v * math.exp(half)
    return {"low": low, "high": high, "blocks": k, "pct": 100.0 * max(v - low, high - v) / v,
            # measured under contention, the spread is the neighbours' and the band says nothing about the machine
            "contended": bool(result.contention and result.contention.contended)}


def provenance(cert: Certificate, golden_store: Path | None = None) -> dict[str, Any]:
    """The certificate's provenance: spec text, artifacts, feeds, golden outputs, environment lock, bands."""
    run: RunResults = cert.run
    env = run.environment
    artifacts, feeds = {}, {}
    for c in run.cases:
        if c.artifact:
            artifacts[c.case.id] = {"path": c.artifact, "sha256": _sha(Path(c.artifact)),
                                    "model_fingerprint": c.model_fingerprint}
        if c.feed_sha256:
            feeds[c.case.id] = {"seed": (run.config or {}).get("seed", 0), "sha256": c.feed_sha256}
    golden = None
    if golden_store is not None and (golden_store / "index.json").is_file():
        index = json.loads((golden_store / "index.json").read_text())
        golden = {"store": str(golden_store), "index_sha256": _sha(golden_store / "index.json"),
                  "outputs": {case: {"sha256": r["sha256"], "rule": r["rule"]} for case, r in index.items()}}
    by_case = {c.case.id: c for c in run.cases}
    bands = {}
    for i, r in enumerate(cert.requirements):
        b = band(by_case.get(r.case_id), r)
        if b is not None:
            bands[f"{i}"] = {"case_id": r.case_id, "requirement": r.requirement, "measured": r.measured, **b}
    from harness.gating.baseline import case_providers

    lock = {"python": env.python, "harness_version": run.harness_version, "git": env.git,
            "libraries": {k: v for k, v in (env.libraries or {}).items() if v},
            # the release of each runtime module every case ran with (its own environment's, else the run's):
            # what --reproduce pins each case to
            "providers": {c.case.id: case_providers(c.environment, env) for c in run.cases}}
    return {"spec_text": cert.spec.path.read_text(), "artifacts": artifacts, "feeds": feeds, "golden": golden,
            "environment_lock": lock, "bands": bands}


# ------------------------------------------------------------------ the seal
def _leaves(value: Any, path: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_leaves(v, f"{path}.{k}" if path else str(k)))
        return out or {path: {}}
    if isinstance(value, list):
        out = {}
        for i, v in enumerate(value):
            out.update(_leaves(v, f"{path}[{i}]"))
        return out or {path: []}
    return {path: value}


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def seal(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The seal of a certificate: the sha256 of its canonical JSON (without the seal) and one per field, so that
    an edit is named."""
    body = {k: v for k, v in doc.items() if k != "seal"}
    return {"sha256": _digest(body), "fields": {p: _digest(v)[:16] for p, v in _leaves(body).items()}}


# ------------------------------------------------------------------ --verify
def verify(cert_path: Path, rejudge: Any) -> list[tuple[bool | None, str]]:
    """Every check of a certificate file as (passed, line): its seal and each field, the spec, the results, the
    artifacts and the golden outputs by their hashes, and the requirements re-judged from the results
    (`rejudge(spec_text, results_path) -> Certificate`). None: could not be checked here (a file absent)."""
    doc = json.loads(Path(cert_path).read_text())
    out: list[tuple[bool | None, str]] = []
    stored = doc.get("seal")
    if not isinstance(stored, dict) or "fields" not in stored:
        return [(False, "no seal: this certificate cannot be verified (written before --verify existed, or the seal "
                        "was removed)")]
    out.append(_seal_check(doc, stored))
    prov = doc.get("provenance") or {}
    spec_text = prov.get("spec_text")
    if spec_text is not None:
        ok = hashlib.sha256(spec_text.encode()).hexdigest() == doc["spec"]["sha256"]
        out.append((ok, "spec: the bundled text " + ("matches" if ok else "does not match") + " spec.sha256"))
    results = Path(doc["results"]["path"])
    if not results.is_absolute() and not results.is_file():
        results = Path(cert_path).parent / results.name
    digest = _sha(results)
    if digest is None:
        out.append((None, f"results: {results} is not here: the figures cannot be re-judged"))
    else:
        ok = digest == doc["results"]["sha256"]
        out.append((ok, f"results: {results} sha256 " + ("matches" if ok else f"is {digest[:16]}..., not the "
                                                                             f"certificate's")))
        if ok and spec_text is not None:
            out += _rejudged(doc, rejudge(spec_text, results))
    return out + _stored_file_checks(prov)


def _seal_check(doc: Mapping[str, Any], stored: Mapping[str, Any]) -> tuple[bool, str]:
    """The certificate's seal recomputed against the `stored` one: matching, or broken with the fields edited."""
    now = seal(doc)
    if now["sha256"] == stored.get("sha256"):
        return True, f"seal: sha256 {now['sha256'][:16]}... matches every field"
    edited = sorted(p for p in set(now["fields"]) | set(stored["fields"])
                    if now["fields"].get(p) != stored["fields"].get(p))
    return False, (f"seal broken: edited field{'s' if len(edited) > 1 else ''} "
                   + ", ".join(edited[:8]) + (f" and {len(edited) - 8} more" if len(edited) > 8 else ""))


def _stored_file_checks(prov: Mapping[str, Any]) -> list[tuple[bool | None, str]]:
    """The artifacts and the golden store (its index and each case's outputs) the provenance names, by their
    hashes; None for a file absent here."""
    out: list[tuple[bool | None, str]] = []
    for case, a in (prov.get("artifacts") or {}).items():
        have = _sha(Path(a["path"]))
        out.append((None if have is None or a.get("sha256") is None else have == a["sha256"],
                    f"artifact of {case}: " + ("absent here" if have is None else "matches" if have == a["sha256"]
                                               else f"sha256 {have[:16]}... differs")))
    golden = prov.get("golden")
    if golden:
        store = Path(golden["store"])
        have = _sha(store / "index.json")
        out.append((None if have is None else have == golden["index_sha256"],
                    "golden index: " + ("absent here" if have is None else "matches" if have == golden["index_sha256"]
                                        else "differs")))
        for case, g in golden["outputs"].items():
            have = _sha(store / f"{g['sha256']}.npz")
            out.append((None if have is None else have == g["sha256"],
                        f"golden outputs of {case}: " + ("absent here" if have is None else "match" if have == g["sha256"]
                                                         else "differ")))
    return out


def _rejudged(doc: Mapping[str, Any], cert: Certificate) -> list[tuple[bool | None, str]]:
    """The certificate's requirement rows against the same requirements judged again from the results."""
    stored = doc.get("requirements") or []
    again = [_finite(r.as_dict()) for r in cert.requirements]
    bad = []
    for i, (a, b) in enumerate(zip(stored, again)):
        for key in ("case_id", "requirement", "status", "measured", "limit"):
            x, y = a.get(key), b.get(key)
            close = isinstance(x, float) and isinstance(y, float) and abs(x - y) <= 1e-9 * max(1.0, abs(y))
            if x != y and not close:
                bad.append(f"requirements[{i}].{key}: the certificate says {x!r}, the results give {y!r}")
    if len(stored) != len(again):
        bad.append(f"requirements: {len(stored)} rows in the certificate, {len(again)} judged from the spec")
    if doc.get("verdict") != cert.verdict:
        bad.append(f"verdict: the certificate says {doc.get('verdict')}, the results give {cert.verdict}")
    return [(not bad, f"re-judged {len(again)} requirements from the results: "
             + ("the same figures and statuses" if not bad else "; ".join(bad[:5])))]


def reproduce_rows(doc: Mapping[str, Any], run: RunResults, cert: Certificate) -> list[dict[str, Any]]:
    """Per banded figure of a certificate, the re-run's figure (this machine, now) against its band: reproduced,
    not reproduced, or not reproduced under contention (said apart: contention only slows)."""
    bands = (doc.get("provenance") or {}).get("bands") or {}
    now = {(r.case_id, r.requirement): r for r in cert.requirements}
    by_case = {c.case.id: c for c in run.cases}
    rows = []
    for b in bands.values():
        r = now.get((b["case_id"], b["requirement"]))
        value = r.measured if r is not None else None
        result = by_case.get(b["case_id"])
        contended = bool(result is not None and result.contention and result.contention.contended)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            status = "not measured"
        elif b.get("contended"):
            status = "band contended"  # the certificate's own figure was contended: no band to reproduce
        elif b["low"] <= value <= b["high"]:
            status = "reproduced"
        else:  # contention only slows: it explains a latency over the band or a throughput under it, never the reverse
            slower = value > b["high"] if b["requirement"].endswith("_max") else value < b["low"]
            status = "contended" if contended and slower else "not reproduced"
        release = ((result.details or {}).get("release") or {}) if result is not None else {}
        rows.append({**b, "now": value, "status": status, "contended": contended,
                     "release": release.get("release") or "this interpreter's release"})
    return rows
