"""The verdict of an interleaved A/B measurement (`harness ab`): a paired test on the block medians."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from harness.gating.verdicts import Verdict
from harness.results.schema import AbBlock
from harness.results.stats import PairedRatio, paired_ratio

MIN_PAIRS = 4  # clean pairs needed for any verdict (a t interval from fewer is too wide to say anything)


@dataclass(frozen=True)
class AbVerdict:
    verdict: Verdict
    reason: str
    ratio: PairedRatio | None
    pairs_used: int


def _contended(block: AbBlock) -> bool:
    return bool((block.contention or {}).get("contended"))


def judge_ab(blocks: Sequence[AbBlock], min_effect: float = 0.02, confidence: float = 0.99) -> AbVerdict:
    """B against A in compare's vocabulary. Pairs with a contended block (the worker waited for a CPU: harness.
    measure.contention) are left out; with fewer than MIN_PAIRS clean pairs, or fewer than half, the answer is
    inconclusive. Then, with r = B/A from the pairs' median ratios (Hodges-Lehmann on their logs) and its
    Wilcoxon signed-rank interval (harness.results.stats.paired_ratio):
    |r - 1| at least `min_effect` and the interval excluding 1 -> regressed (r > 1) or improved; else the interval
    within 1 +- 2 x min_effect -> pass (any change is small, and the pairs show it); else noise (the pairs cannot
    tell: a wide interval is never called a pass)."""
    pairs: dict[int, dict[str, AbBlock]] = {}
    for b in blocks:
        pairs.setdefault(b.pair, {})[b.side] = b
    whole = {i: p for i, p in pairs.items() if "a" in p and "b" in p and p["a"].samples_ns and p["b"].samples_ns}
    clean = {i: p for i, p in whole.items() if not (_contended(p["a"]) or _contended(p["b"]))}
    if len(clean) < max(MIN_PAIRS, math.ceil(len(whole) / 2)):
        causes = sorted({str((b.contention or {}).get("cause") or "") for p in whole.values() for b in p.values()
                         if _contended(b)} - {""})
        why = (f"contended: {len(whole) - len(clean)} of {len(whole)} pairs had a block whose threads waited for "
               f"a CPU" + (f" ({causes[0]})" if causes else "")) if len(clean) < len(whole) else \
            f"{len(whole)} pairs measured; at least {MIN_PAIRS} are needed"
        return AbVerdict(Verdict.INCONCLUSIVE, why, None, len(clean))
    order = sorted(clean)
    r = paired_ratio([clean[i]["a"].samples_ns for i in order], [clean[i]["b"].samples_ns for i in order],
                     confidence)
    if r is None:
        return AbVerdict(Verdict.INCONCLUSIVE, f"{len(clean)} clean pairs are too few for a {confidence:.0%} "
                         f"signed-rank interval (99%: 8 pairs; 95%: 6)", None, len(clean))
    text = f"B/A {r.ratio:.4f} [{r.low:.4f}, {r.high:.4f}] ({confidence:.0%} interval, {r.pairs} pairs)"
    big = abs(math.log(r.ratio)) >= math.log1p(min_effect)
    if big and r.low > 1.0:
        return AbVerdict(Verdict.REGRESSED, f"{text}: B is slower", r, len(clean))
    if big and r.high < 1.0:
        return AbVerdict(Verdict.IMPROVED, f"{text}: B is faster", r, len(clean))
    band = 1.0 + 2 * min_effect
    if 1.0 / band < r.low and r.high < band:
        return AbVerdict(Verdict.PASS, f"{text}: no change of {2 * min_effect:.0%} or more", r, len(clean))
    return AbVerdict(Verdict.NOISE, f"{text}: too wide to rule out a {2 * min_effect:.0%} change", r, len(clean))
