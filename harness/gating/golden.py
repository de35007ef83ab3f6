"""Golden outputs and audits judged for qualification: the store next to the spec (index.json: case id -> record;
SHA256.npz: the outputs), and each case's audit and golden comparison as requirement rows of its certificate."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.gating.qualify import QualifySpec, RequirementResult, SpecError, _toml
from harness.results.schema import CaseResult, RunResults
from harness.results.store import atomic_write_text


def golden_store(spec: QualifySpec) -> Path:
    """The spec's golden store: [golden] store = "DIR" (relative to the spec), else SPEC_DIR/NAME.golden."""
    table = _toml(spec.path).get("golden", {})
    if not isinstance(table, dict) or set(table) - {"store"}:
        raise SpecError(f"{spec.path}: [golden] takes one key: store = \"DIR\" (relative to the spec)")
    store = table.get("store")
    if store is not None and not isinstance(store, str):
        raise SpecError(f"{spec.path}: [golden] store = {store!r} must be a folder name")
    return (spec.path.parent / store if store else spec.path.parent / f"{spec.name}.golden").resolve()


def read_index(store: Path) -> dict[str, Any]:
    path = store / "index.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def write_index(store: Path, run: RunResults) -> dict[str, Any]:
    """index.json of the store from a --record-golden run: every case that recorded outputs (the cases of this
    run replace their earlier records); returns the new index."""
    index = read_index(store)
    for c in run.cases:
        recorded = ((c.details or {}).get("golden") or {}).get("recorded")
        if recorded and c.status == "passed":
            index[c.case.id] = {**recorded, "recorded_from": run.run_id,
                                "machine_fingerprint": run.environment.machine_fingerprint}
    store.mkdir(parents=True, exist_ok=True)
    atomic_write_text(store / "index.json", json.dumps(index, indent=1, sort_keys=True))
    return index


def store_files(store: Path, index: Mapping[str, Any]) -> dict[str, bytes]:
    """The store's files a node needs (index.json and every referenced SHA256.npz), to travel with its shard."""
    files = {"index.json": (store / "index.json").read_bytes()}
    for record in index.values():
        name = f"{record['sha256']}.npz"
        files[name] = (store / name).read_bytes()
    return files


def check_rows(spec: QualifySpec, run: RunResults) -> list[RequirementResult]:
    """Per spec case, a row for its audits (always: qualify audits every case) and one for its golden outputs
    (where it was compared): PASS, FAIL naming the check, or INCONCLUSIVE where a check could not run."""
    by_case = {c.case: c for c in run.cases}
    rows = []
    for sc in spec.cases:
        r = by_case.get(sc.case)
        rows.append(_audit_row(sc.case.id, r))
        golden = ((r.details or {}).get("golden") if r is not None else None) or {}
        if golden and "recorded" not in golden:
            rows.append(_row(sc.case.id, "golden_outputs", "outputs equal the golden outputs", golden.get("passed"),
                             golden.get("detail", "")))
    return rows


def _audit_row(case_id: str, r: CaseResult | None) -> RequirementResult:
    audit = ((r.details or {}).get("audit") if r is not None else None) or {}
    if not audit:
        why = "case not in the results" if r is None else f"no audit ran ({r.status}" + (
            f": {r.reason})" if r.reason else ")")
        return _row(case_id, "audits", "audits inside the timed run", False, why)
    failed = [c for c in audit.get("checks", []) if c["passed"] is False]
    unrun = [c for c in audit.get("checks", []) if c["passed"] is None]
    if failed:
        return _row(case_id, "audits", "audits inside the timed run", False,
                    "; ".join(f"{c['name']}: {c['detail']}" for c in failed))
    if unrun:
        return _row(case_id, "audits", "audits inside the timed run", None,
                    "; ".join(f"{c['name']}: {c['detail']}" for c in unrun))
    return _row(case_id, "audits", "audits inside the timed run", True,
                f"{len(audit.get('checks', []))} checks passed ({audit.get('rule', '')}; "
                f"{audit.get('overhead_s', 0):.2f} s after the timed loop)")


def _row(case_id: str, key: str, label: str, passed: bool | None, reason: str) -> RequirementResult:
    return RequirementResult(case_id, key, label, True, passed, "", bool(passed), None, None, reason,
                             inconclusive=passed is None, unjudged="not run" if passed is None else "")


def wrong_findings(run: RunResults | None) -> list[str]:
    """A node's golden disagreements, one line per case (for harness.gating.fleet.NodeRun.wrong)."""
    if run is None:
        return []
    return [f"{c.case.id}: {c.details['golden']['detail']}" for c in run.cases
            if ((c.details or {}).get("golden") or {}).get("passed") is False]
