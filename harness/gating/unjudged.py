"""Gated rows a deciding command did not judge, said in one line, and the exit status that follows (1 a
regression, else 3 a row not judged unless --allow-unjudged, else 0; docs/nightly-gating.md)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from harness.gating.verdicts import EXIT_CLEAN, EXIT_REGRESSION, EXIT_UNJUDGED, FAILING, Verdict

# The short causes a record names in its `unjudged` field (the line groups rows by them)
CONTENDED = "contended"  # the machine kept the worker from the CPU (run-queue wait, steal): the figure is inflated
TOO_FEW_SAMPLES = "too few samples"  # the gated percentile has fewer samples than it is quoted from
TOO_FEW_PAIRS = "too few clean pairs"  # an interleaved A/B kept too few pairs free of contention
NOT_REPRODUCIBLE = "not reproducible"  # side A of a re-measuring gate could not be rebuilt as the baseline ran it
MODEL_CHANGED = "model changed"  # the model fingerprint differs: stored figures of another model say nothing
OTHER_MACHINE = "different machine"  # stored figures from another machine: not comparable, so not judged
TOO_WIDE = "interval too wide"  # an A/B's interval could not rule out a change of twice the minimum effect
INCONCLUSIVE = "inconclusive"  # an inconclusive verdict that named no cause of its own
NOT_COMPARABLE = "not comparable"  # `harness gate`: a stored-figure row the figures could not compare
NODE_LOST = "node lost"  # `harness gate --ray`: the case's Ray node died before the case finished
NOT_PLACED = "no node"  # `harness gate --ray`: no node of the baseline's hardware class has the resource it needs

ALLOW_OPTION = "--allow-unjudged"
MAX_NAMED = 6  # rows named per cause in the line; the rest are counted


class Judged(Protocol):
    """What the line and the exit status read of a record (harness.gating.compare.VerdictRecord has it)."""

    @property
    def case_id(self) -> str: ...

    metric: str
    verdict: Verdict
    timing: bool
    unjudged: str


def unjudged_cause(record: Judged) -> str:
    """The short cause when the record is a gated row that was not judged, else "" (judged, or not gated)."""
    if record.unjudged:
        return record.unjudged
    return INCONCLUSIVE if Verdict(record.verdict) is Verdict.INCONCLUSIVE else ""


def verdict_text(record: Judged) -> str:
    """The verdict as every row shows it: judged (pass, regressed, improved ...) or not judged with its cause, e.g.
    "inconclusive (not judged: contended)", "not_comparable (not judged: model changed)"."""
    cause = unjudged_cause(record)
    value = Verdict(record.verdict).value
    return f"{value} (not judged: {cause})" if cause and cause != value else value


def gated(records: Iterable[Judged]) -> list[Judged]:
    """The gated rows: timing verdicts, and the rows that stand for a gated case that was not judged."""
    return [r for r in records if r.timing or unjudged_cause(r)]


def unjudged_rows(records: Iterable[Judged]) -> dict[str, list[str]]:
    """Cause -> the rows ("CASE METRIC", or the case alone for a whole-case row) not judged for it, in order."""
    out: dict[str, list[str]] = {}
    for r in records:
        cause = unjudged_cause(r)
        if cause:
            out.setdefault(cause, []).append(r.case_id if r.metric in ("case", "ab", "") else f"{r.case_id} {r.metric}")
    return out


def unjudged_line(records: Sequence[Judged], allow_unjudged: bool = False, what: str = "gated timing rows",
                  allowable: bool = True) -> str | None:
    """One line saying how many gated rows were not judged and which, by cause; None when every one was.
    E.g. "could not judge 4 of 8 gated timing rows (contended: a latency_median, b latency_median; model
    changed: c): exit 3, not a pass (--allow-unjudged accepts it)". `allowable`: the command takes
    --allow-unjudged (qualify does not: a certificate is never qualified by a figure it could not judge)."""
    rows = unjudged_rows(records)
    if not rows:
        return None
    n = sum(len(v) for v in rows.values())
    total = len(gated(records))
    parts = []
    for cause, names in rows.items():
        shown = ", ".join(names[:MAX_NAMED]) + (f" and {len(names) - MAX_NAMED} more" if len(names) > MAX_NAMED
                                                 else "")
        parts.append(f"{cause}: {shown}")
    if any(r.verdict in FAILING for r in records):
        tail = "the regression decides the exit status (1)"
    elif allow_unjudged:
        tail = f"accepted ({ALLOW_OPTION}): exit 0, but these rows were not judged"
    else:
        tail = f"exit {EXIT_UNJUDGED}, not a pass" + (f" ({ALLOW_OPTION} accepts it)" if allowable else "")
    return f"could not judge {n} of {total} {what} ({'; '.join(parts)}): {tail}"


def decide_exit(records: Iterable[Judged], allow_unjudged: bool = False) -> int:
    """1 when a row regressed or broke, whatever else happened; else 3 when a gated row was not judged
    (contended, too few samples or clean pairs, not reproducible, a changed model, another machine), 0 with
    `allow_unjudged`; else 0. A row that was not judged is never counted as a pass."""
    records = list(records)
    if any(r.verdict in FAILING for r in records):
        return EXIT_REGRESSION
    if not allow_unjudged and any(unjudged_cause(r) for r in records):
        return EXIT_UNJUDGED
    return EXIT_CLEAN


_STATE_UNJUDGED = "COULD NOT JUDGE"


def gate_state(records: Sequence[Judged], allow_unjudged: bool = False) -> str:
    """The one word for a deciding command's state, the same in every command and file: FAIL (a row regressed or
    broke), COULD NOT JUDGE (a gated row was not judged; "... (accepted: --allow-unjudged)" when accepted), OK."""
    if any(r.verdict in FAILING for r in records):
        return "FAIL"
    if unjudged_rows(records):
        return _STATE_UNJUDGED + (f" (accepted: {ALLOW_OPTION})" if allow_unjudged else "")
    return "OK"


def gate_headline(records: Sequence[Judged], allow_unjudged: bool = False, what: str = "gate") -> str:
    """The state and the counts in one line, worded alike by compare, `run --baseline`, `harness gate`, verdicts.md,
    gate.md and summary.md: the gated timing rows judged (pass / regressed / improved ...) and those not judged with
    their causes, then the other rows (drift, whole-case states) apart, so a drift pass is never counted as a
    timing pass. E.g. "gate COULD NOT JUDGE: 2 pass, 2 not judged (contended: 2) of 4 gated timing rows; other
    rows: 4 drift pass"."""
    records = list(records)
    timing = [r for r in records if r.timing or unjudged_cause(r)]
    timing_ids = {id(r) for r in timing}
    order = {v: i for i, v in enumerate((Verdict.REGRESSED, Verdict.BROKE, Verdict.IMPROVED, Verdict.FIXED,
                                         Verdict.PASS, Verdict.NOISE, Verdict.NEW, Verdict.NOT_COMPARABLE,
                                         Verdict.INCONCLUSIVE))}
    judged: dict[Verdict, int] = {}
    for r in timing:
        if not unjudged_cause(r):
            judged[Verdict(r.verdict)] = judged.get(Verdict(r.verdict), 0) + 1
    parts = [f"{n} {v.value}" for v, n in sorted(judged.items(), key=lambda kv: order[kv[0]])]
    rows = unjudged_rows(records)
    if rows:
        by_cause = ", ".join(f"{cause}: {len(v)}" for cause, v in rows.items())
        parts.append(f"{sum(len(v) for v in rows.values())} not judged ({by_cause})")
    text = f"{what} {gate_state(records, allow_unjudged)}: {', '.join(parts) or 'none'} of {len(timing)} gated " \
           "timing rows"
    others: dict[tuple[str, str], int] = {}
    for r in records:
        if id(r) not in timing_ids:
            key = (r.metric or "case", Verdict(r.verdict).value)
            others[key] = others.get(key, 0) + 1
    if others:
        text += "; other rows: " + ", ".join(f"{n} {m} {v}" for (m, v), n in others.items())
    return text


class _Row:
    """A verdict row read back from its dict (verdicts.json, the report's verdict rows)."""

    def __init__(self, d: dict) -> None:
        self.case_id = str(d.get("case_id") or d.get("case") or "")
        self.metric = str(d.get("metric") or "")
        self.verdict = Verdict(d["verdict"])
        self.timing = bool(d.get("timing"))
        self.unjudged = str(d.get("unjudged") or "")


def verdict_rows(dicts: Iterable[dict]) -> list[Judged]:
    """Stored verdict dicts (VerdictRecord.as_dict, the report's verdict rows) as records the line reads."""
    return [_Row(d) for d in dicts]
