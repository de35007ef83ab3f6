"""The closed verdict vocabulary of a comparison against a baseline."""

from __future__ import annotations

from enum import Enum


class Verdict(str, Enum):
    """What happened to one case and metric between a baseline and the current run."""

    PASS = "pass"  # measured in both; no change over the threshold
    IMPROVED = "improved"  # better by more than the threshold, with statistical evidence
    REGRESSED = "regressed"  # worse by more than the threshold, with statistical evidence (or drift over tolerance)
    NOISE = "noise"  # a change over the threshold that the samples cannot tell from noise
    # a timing figure measured while the machine kept the worker from the CPU (harness.measure.contention):
    # never judged pass or regressed; the reason says which run was contended and why
    INCONCLUSIVE = "inconclusive"
    NEW = "new"  # no measured baseline for this case
    BROKE = "broke"  # measured in the baseline; now error / crashed / timeout / oom
    FIXED = "fixed"  # broken in the baseline; measured now
    NOT_COMPARABLE = "not_comparable"  # different model, precision recipe, timing scope or machine (reason given)

    def __str__(self) -> str:
        return self.value


# Verdicts that fail a gate (exit status 1).
FAILING = frozenset({Verdict.REGRESSED, Verdict.BROKE})

# Exit statuses of the commands that decide (compare, run --baseline, gate, ab, bisect, qualify): 0 judged and
# clean, 1 a regression or a broken case, 2 bad input (usage), 3 could not judge: a gated row was not judged
# (contended, too few clean pairs, not reproducible) and the user did not accept that (--allow-unjudged).
EXIT_CLEAN, EXIT_REGRESSION, EXIT_USAGE, EXIT_UNJUDGED = 0, 1, 2, 3
