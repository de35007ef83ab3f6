"""A change point is reported as a regression only once an interleaved A/B of the runs on either side agrees
(docs/history.md, Confirmation); the confirmer is injectable: tests use fakes, `--confirm` uses AbConfirmer."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CONFIRMED = "confirmed"  # the A/B agrees: reported as a regression
DISAGREES = "disagrees"  # the A/B ran and found no regression: reported unconfirmed, not a regression
UNCONFIRMED = "unconfirmed"  # could not be re-measured: reported as the history's regression, unconfirmed


@dataclass(frozen=True)
class Confirmation:
    state: str  # CONFIRMED | DISAGREES | UNCONFIRMED
    reason: str


Confirmer = Callable[[dict[str, Any]], Confirmation]


def not_remeasured(row: dict[str, Any]) -> Confirmation:
    """The confirmer without --confirm: nothing is measured again."""
    return Confirmation(UNCONFIRMED, "not re-measured (`harness history changes --confirm` runs an interleaved "
                                     "A/B of the model files on either side)")


def apply_confirmation(rows: Sequence[dict[str, Any]], confirmer: Confirmer) -> list[dict[str, Any]]:
    """Each regression row asks `confirmer`; the row gets `confirmation` (state) and `confirmation_reason`, and
    `reported` (what the report calls it): "regression" when the A/B agrees or nothing could be re-measured
    (then `confirmation` says unconfirmed), "unconfirmed" when the A/B disagrees. Other rows (improvements,
    spread changes) are reported by their direction and need no confirmation."""
    out = []
    for row in rows:
        row = dict(row)
        if row["direction"] != "regression":
            row.update(confirmation=None, confirmation_reason="", reported=row["direction"])
        else:
            try:
                c = confirmer(row)
            except (OSError, subprocess.SubprocessError, RuntimeError, ValueError) as exc:  # never costs the finding
                c = Confirmation(UNCONFIRMED, f"the A/B failed: {type(exc).__name__}: {exc}")
            row.update(confirmation=CONFIRMED if c.state == CONFIRMED else UNCONFIRMED,
                       confirmation_reason=c.reason,
                       reported="unconfirmed" if c.state == DISAGREES else "regression")
        out.append(row)
    return out


def case_artifact(source: str | None, case: str) -> tuple[str | None, str]:
    """(the case's model file recorded in the run's results.json at `source`, or None; why not)."""
    if not source:
        return None, "the run was recorded without its results.json path"
    path = Path(source)
    if path.is_dir():
        path = path / "results.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return None, f"its results.json {source} cannot be read ({type(exc).__name__})"
    from harness.results.schema import CaseId

    for c in data.get("cases", []) if isinstance(data, dict) else ():
        try:
            cid = CaseId.from_dict(c["case"]).id
        except (KeyError, TypeError, ValueError):
            continue
        if cid == case:
            art = c.get("artifact")
            if not art:
                return None, f"{source} records no model file for the case"
            if not Path(art).is_file():
                return None, f"its model file {art} is no longer on disk"
            return str(art), ""
    return None, f"{source} holds no result of the case"


Runner = Callable[[list[str]], int]


def _run(cmd: list[str]) -> int:
    return subprocess.run(cmd, check=False).returncode


class AbConfirmer:
    """Re-measure a regression's two sides with `harness ab BEFORE AFTER --out DIR` (an interleaved A/B in one
    worker) and read its verdict from DIR/results.json: regressed confirms it; pass, improved or noise
    disagree; inconclusive (a contended machine), a broken case or no results leave it unconfirmed with the
    A/B's reason. `sources`: run id -> the results.json it was recorded from; `case_parts`: case id -> (model,
    runtime, precision, batch, seq); `runner`: runs the command, returns its exit status."""

    def __init__(self, sources: dict[str, str | None], case_parts: dict[str, tuple[str, str, str, int, int | None]],
                 runner: Runner = _run, workdir: Path | None = None) -> None:
        self.sources, self.case_parts, self.runner, self.workdir = sources, case_parts, runner, workdir

    def __call__(self, row: dict[str, Any]) -> Confirmation:
        case = row["case"]
        before, why_b = case_artifact(self.sources.get(row["before_run"]), case)
        after, why_a = case_artifact(self.sources.get(row["after_run"]), case)
        if before is None or after is None:
            side, why = ("before", why_b) if before is None else ("after", why_a)
            return Confirmation(UNCONFIRMED, f"cannot re-measure the run {side} ({row[f'{side}_run']}): {why}")
        if Path(before).resolve() == Path(after).resolve():
            return Confirmation(UNCONFIRMED, "both runs measured the same model file: the change is outside it "
                                             "(runtime, release or machine); `harness bisect` re-measures releases")
        if case not in self.case_parts:
            return Confirmation(UNCONFIRMED, "the case's model and runtime are not recorded")
        import tempfile

        _model, runtime, precision, batch, seq = self.case_parts[case]  # the files are the models of the A/B
        with tempfile.TemporaryDirectory(prefix="harness-confirm-", dir=self.workdir) as tmp:
            out = Path(tmp) / "ab"
            cmd = [sys.executable, "-m", "harness.cli", "ab", before, after, "--runtimes", runtime,
                   "--precisions", precision, "--batch-sizes", str(batch), "--out", str(out)]
            if seq is not None:
                cmd += ["--seq-lens", str(seq)]
            status = self.runner(cmd)
            verdict, reason = _ab_verdict(out / "results.json")
        if verdict == "regressed":
            return Confirmation(CONFIRMED, f"interleaved A/B of the two model files: regressed ({reason})")
        if verdict in ("pass", "improved", "noise"):
            return Confirmation(DISAGREES, f"interleaved A/B of the two model files: {verdict} ({reason})")
        if verdict is not None:
            return Confirmation(UNCONFIRMED, f"the A/B could not judge: {verdict} ({reason})")
        return Confirmation(UNCONFIRMED, f"the A/B left no verdict (`harness ab` exit {status})")


def _ab_verdict(path: Path) -> tuple[str | None, str]:
    """(the first case's A/B verdict, its reason) from a `harness ab` results.json, or (None, "")."""
    try:
        cases = json.loads(path.read_text()).get("cases") or []
    except (OSError, ValueError, AttributeError):
        return None, ""
    ab = cases[0].get("ab") if cases and isinstance(cases[0], dict) else None
    if not isinstance(ab, dict):
        return (str(cases[0].get("status")) if cases and isinstance(cases[0], dict) else None), \
            (str(cases[0].get("reason") or "") if cases and isinstance(cases[0], dict) else "")
    return str(ab.get("verdict")), str(ab.get("reason") or "")
