"""Verdicts of conformance cases (ONNX backend tests) between a baseline and the current run: pass/fail flips."""

from __future__ import annotations

from typing import Any

from harness.gating.verdicts import Verdict
from harness.results.schema import CaseResult

# Statuses that are the runtime's answer being wrong or missing (a regression when the baseline passed), and
# the supervisor's verdicts on the process (broke when the baseline passed).
NOT_PASSING = ("failed", "unsupported", "error", "conversion")
BROKEN = ("crashed", "timeout", "oom")
# Statuses that judge nothing: FP16 left the model as it was, or the expected output is random.
NOT_JUDGED = ("skipped", "nondeterministic")


def conformance_info(r: CaseResult | None) -> dict[str, Any] | None:
    info = (r.details or {}).get("conformance") if r is not None else None
    return info if isinstance(info, dict) else None


def conformance_status(r: CaseResult) -> str | None:
    """A stored case's conformance status (passed, failed, unsupported, error, conversion, nondeterministic,
    crashed, timeout, oom, skipped);
    None for a case that is not a conformance case."""
    info = conformance_info(r)
    return str(info.get("status")) if info is not None else None


def conformance_verdict(b: CaseResult, c: CaseResult) -> tuple[Verdict, str]:
    """The verdict of one conformance case present in both runs. Passed then not: regressed (failed,
    unsupported, error) or broke (crashed, timeout, oom); not passed then passed: fixed; otherwise pass (the
    same answer, or a different way of not passing: noted in the reason), except not passing then crashing:
    broke. Timings of a single inference are not gated."""
    bs, cs = conformance_status(b) or b.status, conformance_status(c) or c.status
    now = f"{cs}: {c.reason}" if c.reason else cs
    if b.model_fingerprint and c.model_fingerprint and b.model_fingerprint != c.model_fingerprint:
        return Verdict.NOT_COMPARABLE, (f"the test case changed (model fingerprint {b.model_fingerprint} vs "
                                        f"{c.model_fingerprint}: another onnx version?); now {now}")
    if bs in NOT_JUDGED and cs in NOT_JUDGED:
        return Verdict.PASS, f"{cs} in both runs: {c.reason}"
    if bs in NOT_JUDGED or cs in NOT_JUDGED:
        return Verdict.NOT_COMPARABLE, f"{bs} in the baseline, now {now}"
    if bs == "passed" and cs == "passed":
        return Verdict.PASS, "passed in both runs"
    if bs == "passed" and cs in BROKEN:
        return Verdict.BROKE, f"passed in the baseline, now {now}"
    if bs == "passed" and cs in NOT_PASSING:
        return Verdict.REGRESSED, f"passed in the baseline, now {now}"
    if cs == "passed":
        return Verdict.FIXED, f"{bs} in the baseline, now passed"
    if cs in BROKEN and bs not in BROKEN:
        return Verdict.BROKE, f"{bs} in the baseline, now {now}"
    if bs == cs:
        return Verdict.PASS, f"{cs} in both runs: {c.reason}" if c.reason else f"{cs} in both runs"
    return Verdict.PASS, f"not passing in either run ({bs} in the baseline, now {now})"
