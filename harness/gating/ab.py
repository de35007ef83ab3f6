"""The verdict of an interleaved A/B measurement (`harness ab`): a paired test on the block medians."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from harness.gating.unjudged import CONTENDED, TOO_FEW_PAIRS, TOO_WIDE
from harness.gating.verdicts import Verdict
from harness.results.schema import BROKEN, AbBlock, AbResult, CaseResult
from harness.results.stats import PairedRatio, _signed_rank_critical, hodges_lehmann, median_ns, paired_ratio

MIN_PAIRS = 4  # clean pairs needed for any verdict (a t interval from fewer is too wide to say anything)


@dataclass(frozen=True)
class AbVerdict:
    verdict: Verdict
    reason: str
    ratio: PairedRatio | None
    pairs_used: int
    unjudged: str = ""  # inconclusive: the short cause (harness.gating.unjudged), "" when judged
    under_load: bool = False  # judged on every pair, contended ones included (judge_under_load)


def _contended(block: AbBlock) -> bool:
    return bool(block.contention and block.contention.contended)


def judge_ab(blocks: Sequence[AbBlock], min_effect: float = 0.02, confidence: float = 0.99, under_load: bool = True,
             widen: float | None = None) -> AbVerdict:
    """B against A in compare's vocabulary. Pairs with a contended block (the worker waited for a CPU: harness.
    measure.contention) are left out; with fewer than MIN_PAIRS clean pairs, or fewer than half, the answer is
    inconclusive, its estimate over every pair shown, unless that estimate decides under load (judge_under_load;
    `under_load` False: never, as before; `widen`: the allowance for contention, default UNDER_LOAD_WIDEN). Then,
    with r = B/A from the pairs' median ratios (Hodges-Lehmann on their logs) and its
    Wilcoxon signed-rank interval (harness.results.stats.paired_ratio):
    |r - 1| at least `min_effect` and the interval excluding 1 -> regressed (r > 1) or improved; else the interval
    within 1 +- 2 x min_effect -> pass (any change is small, and the pairs show it); else noise (the pairs cannot
    tell: a wide interval is never called a pass)."""
    whole, clean = _pairs(blocks)
    if len(clean) < max(MIN_PAIRS, math.ceil(len(whole) / 2)):
        return _few_clean_pairs(whole, clean, min_effect, confidence, under_load, widen)
    order = sorted(clean)
    groups = activation_log_ratios(clean)
    p_differ = activations_differ(groups)
    how = ""
    if p_differ is not None and p_differ < ACTIVATIONS_DIFFER_P:
        # the activation, not the pair, is the unit that varies: judged on the activations' own estimates
        r = activation_ratio(groups, confidence)
        how = (f"; its {len(groups)} activations differ (Kruskal-Wallis p {p_differ:.2g}): judged on their "
               "estimates, not the pairs")
        if r is None:
            return AbVerdict(Verdict.NOISE, f"the {len(groups)} activations of the two sides differ (Kruskal-Wallis "
                             f"p {p_differ:.2g}) and are too few to judge on (at least 3)", None, len(clean),
                             TOO_WIDE)
    else:
        r = paired_ratio([clean[i]["a"].samples_ns for i in order], [clean[i]["b"].samples_ns for i in order],
                         confidence)
    if r is None:
        return AbVerdict(Verdict.INCONCLUSIVE, f"{len(clean)} clean pairs are too few for a {confidence:.0%} "
                         f"signed-rank interval (99%: 8 pairs; 95%: 6)", None, len(clean), TOO_FEW_PAIRS)
    text = f"B/A {r.ratio:.4f} [{r.low:.4f}, {r.high:.4f}] ({confidence:.0%} interval, {r.pairs} pairs{how})"
    big = abs(math.log(r.ratio)) >= math.log1p(min_effect)
    if big and r.low > 1.0:
        return AbVerdict(Verdict.REGRESSED, f"{text}: B is slower", r, len(clean))
    if big and r.high < 1.0:
        return AbVerdict(Verdict.IMPROVED, f"{text}: B is faster", r, len(clean))
    band = 1.0 + 2 * min_effect
    if 1.0 / band < r.low and r.high < band:
        return AbVerdict(Verdict.PASS, f"{text}: no change of {2 * min_effect:.0%} or more", r, len(clean))
    # too wide to say: neither a pass nor a regression was shown, so a deciding command counts it as not judged
    return AbVerdict(Verdict.NOISE, f"{text}: too wide to rule out a {2 * min_effect:.0%} change", r, len(clean),
                     TOO_WIDE)


# ------------------------------------------------------------------ large effects judged under load
# Each pair's two blocks run back to back, so a neighbour that stays slows both alike; one that comes and goes
# lands on some blocks and not others and widens the pairs' spread, which the signed-rank interval over every pair
# carries. What contention adds beyond that spread (a bias of the paired estimate under load: an inflation that
# scales with the call's length, or a fixed wait that shrinks a ratio) is allowed for by widening the interval by
# UNDER_LOAD_WIDEN each way. Measured before it was adopted (docs/nightly-gating.md, "Large effects under load"):
# A/A and planted slowdowns under quiet, one busy core, two busy loops and bursty neighbours, re-scored on the
# same blocks (suites/benchmarks/ab_underload.py, ab_rescore --underload).
UNDER_LOAD_WIDEN = 0.03
# "pass" under load: the widened interval entirely inside [1 / (1 + t), 1 + t] for the threshold t (min_effect):
# no change of t or more, contention allowed for (stricter than a clean row's pass band, 1 +- 2t). Unreachable at
# the default t of 2% (a 3% widening each way is wider than that band), so it decides only where a command's
# threshold is larger (`--ab-min-effect`, bisect's median gate). Measured before it was adopted, re-scoring the
# 1,280 measurements of the under-load collection at t 5% to 50% (ab_rescore --underload DIR --threshold ...,
# docs/nightly-gating.md): no planted slowdown beyond the threshold was ever passed under load (20% at t 5-20%:
# 0 of 960; 60% at t 5-50%: 0 of 1,920); A/A passed in 0% (t 5%), 0.3% (10%), 17.5% (20%) and 86% (50%) of rows.
# PASS_UNDER_LOAD_MAX is the largest threshold measured against a planted effect beyond it; above, it stays off
PASS_UNDER_LOAD = True
PASS_UNDER_LOAD_MAX = 0.50


def _inside(min_effect: float) -> str:
    return f"entirely inside 1 +- {min_effect:.0%}"


Pairs = dict[int, dict[str, AbBlock]]  # pair index -> {"a": block, "b": block}


def _few_clean_pairs(whole: Pairs, clean: Pairs, min_effect: float, confidence: float, under_load: bool,
                     widen: float | None) -> AbVerdict:
    """judge_ab's answer when too few pairs are clean (contention, or too few pairs measured): inconclusive with
    the estimate over every pair shown, unless that estimate decides under load (judge_under_load)."""
    causes = sorted({str((b.contention.cause if b.contention else None) or "") for p in whole.values() for b in p.values()
                     if _contended(b)} - {""})
    contended = len(clean) < len(whole)
    why = (f"contended: {len(whole) - len(clean)} of {len(whole)} pairs had a block whose threads waited for "
           f"a CPU" + (f" ({causes[0]})" if causes else "")) if contended else \
        f"{len(whole)} pairs measured; at least {MIN_PAIRS} are needed"
    everything, how = all_pairs_ratio(whole, confidence)
    if everything is None:
        return AbVerdict(Verdict.INCONCLUSIVE, why, None, len(clean), CONTENDED if contended else TOO_FEW_PAIRS)
    text = (f"over all {len(whole)} pairs, contended ones included: B/A {everything.ratio:.4f} "
            f"[{everything.low:.4f}, {everything.high:.4f}] ({confidence:.0%} interval{how})")
    loaded = judge_under_load(everything, min_effect, widen) if contended and under_load else None
    if loaded is not None:
        verdict, note = loaded
        return AbVerdict(verdict, f"judged under load: {text}; {note}", everything, len(whole), under_load=True)
    w = UNDER_LOAD_WIDEN if widen is None else widen
    tail = (f": not judged (its interval, widened by {w:.1%} for contention, lies neither entirely beyond "
            f"{min_effect:.0%} either way nor {_inside(min_effect)})") if contended and under_load else \
        ": not judged"
    return AbVerdict(Verdict.INCONCLUSIVE, f"{why}; {text}{tail}", everything, len(clean),
                     CONTENDED if contended else TOO_FEW_PAIRS)


def all_pairs_ratio(whole: dict[int, dict[str, AbBlock]], confidence: float) -> tuple[PairedRatio | None, str]:
    """B/A from every measured pair, contended ones included, by the estimator the clean pairs would get: the
    activations' estimates when they differ (activations_differ), else the pairs' Hodges-Lehmann estimate and
    signed-rank interval; and a note on which ("" for the pairs). None when too few for an interval."""
    groups = activation_log_ratios(whole)
    p = activations_differ(groups)
    if p is not None and p < ACTIVATIONS_DIFFER_P:
        r = activation_ratio(groups, confidence)
        if r is not None:
            return r, f"; on its {len(groups)} activations, which differ (Kruskal-Wallis p {p:.2g})"
    order = sorted(whole)
    return paired_ratio([whole[i]["a"].samples_ns for i in order], [whole[i]["b"].samples_ns for i in order],
                        confidence), ""


def judge_under_load(r: PairedRatio, min_effect: float, widen: float | None = None
                     ) -> tuple[Verdict, str] | None:
    """The verdict of an estimate over every pair (contended included) when its interval, widened by `widen`
    (UNDER_LOAD_WIDEN) each way for what contention adds, lies entirely beyond the threshold (regressed: above 1
    + min_effect; improved: below 1 / (1 + min_effect)) or entirely inside [1 / (1 + min_effect), 1 + min_effect]
    (pass: no change of min_effect or more; where PASS_UNDER_LOAD and min_effect is at most PASS_UNDER_LOAD_MAX,
    the thresholds it was measured safe at); None when it does none of these (the row stays not judged, its
    figure shown)."""
    w = UNDER_LOAD_WIDEN if widen is None else widen
    low, high = r.low / (1.0 + w), r.high * (1.0 + w)
    span = f"widened by {w:.1%} for contention: [{low:.4f}, {high:.4f}]"
    if low > 1.0 + min_effect:
        return Verdict.REGRESSED, f"{span}, entirely above 1 + {min_effect:.0%}: B is slower"
    if high < 1.0 / (1.0 + min_effect):
        return Verdict.IMPROVED, f"{span}, entirely below 1 - {min_effect:.0%}: B is faster"
    if pass_under_load(min_effect) and 1.0 / (1.0 + min_effect) < low and high < 1.0 + min_effect:
        return Verdict.PASS, f"{span}, {_inside(min_effect)}: no change of {min_effect:.0%} or more"
    return None


def pass_under_load(min_effect: float) -> bool:
    """Whether a row under load may be judged `pass` at this threshold (PASS_UNDER_LOAD, PASS_UNDER_LOAD_MAX)."""
    return PASS_UNDER_LOAD and min_effect <= PASS_UNDER_LOAD_MAX + 1e-12


# Two activations of one model differ by a bias of their own that lasts the activation's life (buffer addresses,
# the thread pool's placement): 0.03 ms mlp on 2 threads, A against itself, 1.157 [1.062, 1.244] in one activation
# and 1.000 in the next (docs/measurements.md). Measured in several activations, a case whose activations differ
# more than their pairs' spread explains (Kruskal-Wallis on the pairs' log ratios by activation, below this p) is
# judged on the activations' estimates (a t interval on K values: the unit that varies is the unit counted, as
# Kalibera & Jones, "Rigorous benchmarking in reasonable time", ISMM 2013); otherwise on the pairs.
ACTIVATIONS_DIFFER_P = 0.2


def activation_log_ratios(clean: dict[int, dict[str, AbBlock]]) -> dict[int, list[float]]:
    """log(B/A) of the clean pairs' block medians, by the activation that measured them."""
    out: dict[int, list[float]] = {}
    for i in sorted(clean):
        a, b = median_ns(clean[i]["a"].samples_ns), median_ns(clean[i]["b"].samples_ns)
        if a > 0 and b > 0:
            out.setdefault(clean[i]["b"].activation, []).append(math.log(b / a))
    return out


def activations_differ(groups: dict[int, list[float]]) -> float | None:
    """The Kruskal-Wallis p-value that the activations' log ratios come from one distribution; None with fewer
    than two activations (nothing to compare)."""
    from scipy.stats import kruskal

    values = [v for v in groups.values() if v]
    if len(values) < 2:
        return None
    try:
        return float(kruskal(*values).pvalue)
    except ValueError:  # every value identical: no difference at all
        return 1.0


def activation_ratio(groups: dict[int, list[float]], confidence: float) -> PairedRatio | None:
    """B/A from the activations' own estimates (Hodges-Lehmann of each one's pairs): their mean and its Student t
    interval on K - 1 degrees of freedom; None under 3 activations."""
    from scipy.stats import t as student_t

    est = np.array([hodges_lehmann(v) for v in groups.values() if v])
    k = est.size
    if k < 3:
        return None
    half = float(student_t.ppf(0.5 + confidence / 2.0, k - 1)) * float(est.std(ddof=1)) / math.sqrt(k)
    mean = float(est.mean())
    return PairedRatio(math.exp(mean), math.exp(mean - half), math.exp(mean + half),
                       sum(len(v) for v in groups.values()), confidence)


def activation_of(pair: int, pairs: int, activations: int) -> int:
    """Which activation measures pair `pair` of a planned `pairs` (--ab-activations: a new one every pairs / N
    pairs; the pairs --detect adds go on in activations of the same length; 1: one activation throughout)."""
    if activations <= 1:
        return 0
    return pair // max(1, math.ceil(pairs / activations))


def _pairs(blocks: Sequence[AbBlock]) -> tuple[dict[int, dict[str, AbBlock]], dict[int, dict[str, AbBlock]]]:
    """The pairs with both blocks measured, and those of them with neither block contended, by pair index."""
    pairs: dict[int, dict[str, AbBlock]] = {}
    for b in blocks:
        pairs.setdefault(b.pair, {})[b.side] = b
    whole = {i: p for i, p in pairs.items() if "a" in p and "b" in p and p["a"].samples_ns and p["b"].samples_ns}
    clean = {i: p for i, p in whole.items() if not (_contended(p["a"]) or _contended(p["b"]))}
    return whole, clean


# ------------------------------------------------------------------ the smallest slowdown a budget can detect
DETECT_POWER = 0.95  # "can detect": a slowdown of that size is judged regressed 95 times in 100
# The signed-rank test / Hodges-Lehmann estimate against the mean under normal errors (asymptotic relative
# efficiency 3/pi): n pairs judged by it carry the information of 0.955 n pairs judged by a t interval.
HL_EFFICIENCY = 3.0 / math.pi
DETECT_PILOT_PAIRS = 10  # --detect: pairs measured first, from whose spread the pairs per case are chosen
DETECT_MAX_PAIRS = 200  # --detect: at most this many pairs per case (0.05 s blocks: about 20 s of measuring)


def pair_log_ratios(blocks: Sequence[AbBlock]) -> list[float]:
    """log(B/A) of each clean pair's block medians, in pair order (what the paired test judges)."""
    _, clean = _pairs(blocks)
    out = []
    for i in sorted(clean):
        a, b = median_ns(clean[i]["a"].samples_ns), median_ns(clean[i]["b"].samples_ns)
        if a > 0 and b > 0:
            out.append(math.log(b / a))
    return out


SPREAD_CONFIDENCE = 0.95  # the signed-rank interval the spread is read from (exists from 6 pairs)


def log_ratio_spread(log_ratios: Sequence[float]) -> float | None:
    """The spread of the pairs' log ratios as the paired test sees it (a standard deviation): read from the width
    of their Wilcoxon signed-rank interval of the Hodges-Lehmann estimate at SPREAD_CONFIDENCE, se = width / (2
    z(0.975)), spread = se x sqrt(n x HL_EFFICIENCY). Distribution-free and robust to the odd disturbed pair, as
    the test is, and steadier from a 10-pair pilot than a median absolute deviation; None under 6 pairs."""
    d = np.asarray(log_ratios, dtype=np.float64)
    n = d.size
    k = _signed_rank_critical(n, 1.0 - SPREAD_CONFIDENCE) if n >= 2 else -1
    if k < 0:
        return None
    i, j = np.triu_indices(n)
    walsh = np.sort((d[i] + d[j]) / 2.0)
    se = float(walsh[len(walsh) - 1 - k] - walsh[k]) / (2.0 * _z(0.5 + SPREAD_CONFIDENCE / 2.0))
    return se * math.sqrt(n * HL_EFFICIENCY)


def _z(p: float) -> float:
    return NormalDist().inv_cdf(p)


def min_pairs(confidence: float) -> int:
    """The fewest pairs for which a signed-rank interval at `confidence` exists (99%: 8; 95%: 6), at least
    MIN_PAIRS."""
    n = MIN_PAIRS
    while _signed_rank_critical(n, 1.0 - confidence) < 0:
        n += 1
    return n


def detectable_slowdown(spread: float, pairs: int, confidence: float = 0.99, min_effect: float = 0.02,
                        power: float = DETECT_POWER) -> float:
    """The smallest slowdown (a fraction: 0.05 is 5%) that `pairs` clean pairs with this log-ratio `spread` judge
    regressed with probability `power` (normal approximation of judge_ab's rule). The estimate's standard error
    is se = spread / sqrt(pairs x HL_EFFICIENCY); judge_ab calls a slowdown regressed when the estimate is at
    least log(1 + min_effect) and its interval's lower end (about estimate - z(1 - a/2) se) is above 0, so a true
    slowdown d is caught with that power when log(1 + d) = max(z(1 - a/2) se, log(1 + min_effect)) + z(power) se.
    """
    if pairs < 1:
        raise ValueError("detectable_slowdown needs at least one pair")
    se = max(0.0, spread) / math.sqrt(pairs * HL_EFFICIENCY)
    z_a, z_p = _z(1.0 - (1.0 - confidence) / 2.0), _z(power)
    return math.expm1(max(z_a * se, math.log1p(min_effect)) + z_p * se)


def pairs_for_detect(spread: float, target: float, confidence: float = 0.99, min_effect: float = 0.02,
                     power: float = DETECT_POWER, max_pairs: int = DETECT_MAX_PAIRS) -> tuple[int, bool]:
    """The fewest pairs with which a `target` slowdown (a fraction) is detected (detectable_slowdown <= target),
    bounded by max_pairs, and whether the target is reached with them. Solved in closed form: the condition
    max(z_a se, L_m) + z_p se <= L_t holds when se <= min(L_t / (z_a + z_p), (L_t - L_m) / z_p)."""
    floor = min_pairs(confidence)
    lt, lm = math.log1p(target), math.log1p(min_effect)
    z_a, z_p = _z(1.0 - (1.0 - confidence) / 2.0), _z(power)
    se_max = min(lt / (z_a + z_p), (lt - lm) / z_p) if z_p > 0 else lt / z_a
    if se_max <= 0:  # a target at or under the minimum effect is never detected with the power asked
        return max_pairs, False
    if spread <= 0:
        return floor, True
    n = max(floor, math.ceil((spread / se_max) ** 2 / HL_EFFICIENCY))
    while n > floor and detectable_slowdown(spread, n - 1, confidence, min_effect, power) <= target:
        n -= 1  # the ceiling above may overshoot by one through rounding
    while detectable_slowdown(spread, n, confidence, min_effect, power) > target and n < max_pairs:
        n += 1
    return min(n, max_pairs), detectable_slowdown(spread, min(n, max_pairs), confidence, min_effect,
                                                  power) <= target


def next_pairs(log_ratios: Sequence[float], target: float, confidence: float = 0.99, min_effect: float = 0.02,
               max_pairs: int = DETECT_MAX_PAIRS) -> int:
    """--detect: how many clean pairs a case needs in all, given the clean pairs measured so far (a pilot of
    DETECT_PILOT_PAIRS): at least as many as measured, at most max_pairs (the A/B workload measures the
    difference, then judges)."""
    spread = log_ratio_spread(log_ratios)
    if spread is None:
        return max(len(log_ratios), min(max_pairs, DETECT_PILOT_PAIRS))
    need, _ = pairs_for_detect(spread, target, confidence, min_effect, max_pairs=max_pairs)
    return max(len(log_ratios), need)


def more_pairs(blocks: Sequence[AbBlock], target: float, confidence: float = 0.99, min_effect: float = 0.02,
               max_pairs: int = DETECT_MAX_PAIRS) -> int:
    """--detect, for the A/B workload's loop: after a pilot of DETECT_PILOT_PAIRS pairs (and after each
    extension), how many more pairs to measure so that the clean pairs reach next_pairs(); 0 when they do, or
    when max_pairs pairs (clean or not) were measured. Pairs lost to contention are made up for."""
    measured = len({b.pair for b in blocks})
    ratios = pair_log_ratios(blocks)
    need = next_pairs(ratios, target, confidence, min_effect, max_pairs)
    return max(0, min(need - len(ratios), max_pairs - measured))


def detect_line(log_ratios: Sequence[float], confidence: float = 0.99, min_effect: float = 0.02,
                target: float | None = None, max_pairs: int = DETECT_MAX_PAIRS) -> str:
    """ "can detect a slowdown of 3.1% with 40 pairs" from the clean pairs' spread (and, with a --detect target,
    how many pairs that target needs); what is missing when the pairs are too few to say."""
    n = len(log_ratios)
    spread = log_ratio_spread(log_ratios)
    if spread is None:
        return f"{n} clean pair(s): too few to estimate the smallest detectable slowdown"
    d = detectable_slowdown(spread, n, confidence, min_effect)
    text = (f"can detect a slowdown of {d:.1%} with {n} pairs ({DETECT_POWER:.0%} power, {confidence:.0%} "
            f"interval; pair spread {spread:.2%})")
    if target is not None:
        need, ok = pairs_for_detect(spread, target, confidence, min_effect, max_pairs=max_pairs)
        if not ok:
            text += (f"; --detect {target:.1%}: not reachable within {max_pairs} pairs" if target > min_effect else
                     f"; --detect {target:.1%}: must exceed the minimum effect {min_effect:.1%}")
        elif need <= n:
            text += f"; --detect {target:.1%}: reached ({need} pairs suffice)"
        else:
            text += f"; --detect {target:.1%}: needs {need} pairs"
    return text


def case_detect_line(blocks: Sequence[AbBlock], confidence: float = 0.99, min_effect: float = 0.02,
                     target: float | None = None) -> str:
    """What one case's measurement can detect: from its pairs' spread (detect_line), or, when its activations
    differ (judge_ab then judges on them), from the spread of the activations' estimates: se = sd / sqrt(K) and
    the Student t quantile on K - 1 degrees of freedom in place of the normal one."""
    _, clean = _pairs(blocks)
    groups = activation_log_ratios(clean)
    p = activations_differ(groups)
    if p is None or p >= ACTIVATIONS_DIFFER_P:
        return detect_line(pair_log_ratios(blocks), confidence, min_effect, target)
    from scipy.stats import t as student_t

    est = np.array([hodges_lehmann(v) for v in groups.values() if v])
    k = est.size
    if k < 3:
        return f"its {k} activations differ: too few to estimate the smallest detectable slowdown (at least 3)"
    se = float(est.std(ddof=1)) / math.sqrt(k)
    t_a = float(student_t.ppf(0.5 + confidence / 2.0, k - 1))
    d = math.expm1(max(t_a * se, math.log1p(min_effect)) + _z(DETECT_POWER) * se)
    text = (f"can detect a slowdown of {d:.1%} with {k} activations ({DETECT_POWER:.0%} power, {confidence:.0%} "
            f"interval; they differ, Kruskal-Wallis p {p:.2g}: sd of their estimates {float(est.std(ddof=1)):.2%})")
    if target is not None:
        text += f"; --detect {target:.1%}: " + ("reached" if d <= target else "not reached (more activations: "
                                                                              "--ab-budget)")
    return text


def ab_cause(ab: AbResult) -> str:
    """Why a stored A/B verdict was not judged ("" when judged): an inconclusive one's cause as judge_ab gives it
    from the kept blocks, a noise one's too-wide interval."""
    verdict = Verdict(ab.verdict)
    if verdict is Verdict.INCONCLUSIVE:
        return judge_ab(ab.blocks, ab.min_effect if ab.min_effect is not None else 0.02,
                        ab.confidence or 0.99).unjudged or TOO_FEW_PAIRS
    return TOO_WIDE if verdict is Verdict.NOISE else ""


def ab_records(cases: Sequence[CaseResult]) -> list:
    """The A/B cases' verdicts as gated rows (harness.gating.compare.VerdictRecord, metric "ab"), so that
    `harness ab` ends as every deciding command does (harness.gating.unjudged): an inconclusive case is not
    judged, with its cause."""
    from harness.gating.compare import VerdictRecord

    out = []
    for c in cases:
        ab = c.ab
        if ab is None or not ab.verdict:
            if c.status in BROKEN:  # a case that could not be measured (error, crash, timeout, OOM): it broke
                out.append(VerdictRecord(c.case, "ab", Verdict.BROKE, reason=f"{c.status}: {c.reason}",
                                         timing=True))
            continue
        verdict = Verdict(ab.verdict)
        cause = ab_cause(ab)  # inconclusive, or noise (the interval could not rule out a real change): not judged
        out.append(VerdictRecord(c.case, "ab", verdict, ratio=ab.ratio, ci_low=ab.ci_low, ci_high=ab.ci_high,
                                 reason=ab.reason, timing=True, unjudged=cause))
    return out
