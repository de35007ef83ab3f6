"""The paired verdict of an interleaved A/B measurement, on block samples with known ratios."""

from __future__ import annotations

import re

import numpy as np
import pytest

from harness.gating.ab import judge_ab
from harness.gating.verdicts import Verdict
from harness.results.schema import AbBlock
from harness.results.stored import BlockContention


def _blocks(ratio, pairs=10, noise=0.01, seed=0, contended=()):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(pairs):
        drift = 1 + 0.3 * np.sin(i)  # the machine's slow drift: both blocks of a pair share it
        for side, r in (("a", 1.0), ("b", ratio)):
            samples = (1_000_000 * drift * r * (1 + noise * rng.standard_normal(40))).astype(int).tolist()
            c = BlockContention(contended=True, cause="2 threads, 1.0 core free") if (i, side) in contended else None
            out.append(AbBlock(side, i, samples, c))
    return out


def test_a_planted_5_percent_is_found_and_an_equal_pair_is_not():
    v = judge_ab(_blocks(1.05))
    assert v.verdict is Verdict.REGRESSED and v.ratio.low > 1.0 and abs(v.ratio.ratio - 1.05) < 0.01
    assert v.reason.startswith("B/A 1.05") and "99% interval, 10 pairs" in v.reason
    assert judge_ab(_blocks(1 / 1.05)).verdict is Verdict.IMPROVED
    same = judge_ab(_blocks(1.0))
    assert same.verdict is Verdict.PASS and same.ratio.low < 1.0 < same.ratio.high


def test_drift_between_pairs_does_not_count_against_b():
    """A 30% swing of the machine across pairs (sin drift above) is shared by each pair: no false alarm."""
    for seed in range(20):
        assert judge_ab(_blocks(1.0, seed=seed)).verdict is Verdict.PASS


def test_small_and_unclear_effects():
    assert judge_ab(_blocks(1.01, noise=0.001)).verdict is Verdict.PASS  # real, under the 2% minimum effect
    wide = judge_ab(_blocks(1.04, pairs=10, noise=0.3, seed=3))
    assert wide.verdict is Verdict.NOISE and "too wide to rule out a 4% change" in wide.reason  # never a pass
    assert judge_ab(_blocks(1.05), min_effect=0.10).verdict is Verdict.PASS


def test_contended_pairs_are_left_out_or_make_it_inconclusive():
    few = judge_ab(_blocks(1.05, contended={(0, "a"), (3, "b")}))
    assert few.verdict is Verdict.REGRESSED and few.pairs_used == 8 and few.ratio.pairs == 8
    most = judge_ab(_blocks(1.05, contended={(i, "b") for i in range(7)}))
    # not judged, but its estimate over every pair is shown (a 5% change is not beyond what contention adds)
    assert most.verdict is Verdict.INCONCLUSIVE and most.ratio is not None and most.ratio.pairs == 10
    assert most.reason.startswith("contended: 7 of 10 pairs") and "(2 threads, 1.0 core free)" in most.reason
    assert "over all 10 pairs, contended ones included: B/A 1.05" in most.reason


@pytest.mark.parametrize("pairs", [0, 1, 3])
def test_too_few_pairs_is_inconclusive(pairs):
    v = judge_ab(_blocks(1.5, pairs=pairs))
    assert v.verdict is Verdict.INCONCLUSIVE and "at least 4" in v.reason


def test_the_interval_needs_8_pairs_at_99_percent_and_6_at_95():
    assert judge_ab(_blocks(1.5, pairs=7)).reason.startswith("7 clean pairs are too few for a 99% signed-rank")
    assert judge_ab(_blocks(1.5, pairs=8)).verdict is Verdict.REGRESSED
    assert judge_ab(_blocks(1.5, pairs=6), confidence=0.95).verdict is Verdict.REGRESSED


def test_one_pair_thrown_far_off_by_a_disturbed_block_does_not_hide_a_5_percent_slowdown():
    """Seen here (gate-check --ab, mlp): nine pairs near +7%, one at +41%; a t interval on the mean said noise."""
    blocks = _blocks(1.05, noise=0.005)
    for b in blocks:
        if b.pair == 2 and b.side == "b":
            b.samples_ns = [int(x * 1.35) for x in b.samples_ns]
    v = judge_ab(blocks)
    assert v.verdict is Verdict.REGRESSED and abs(v.ratio.ratio - 1.05) < 0.01


def test_gate_check_of_ab_counts_false_alarms_and_power():
    from harness.gating.gatecheck import ab_gate_check
    from harness.results.schema import CaseId

    cases = [CaseId("m", "r", "fp32", 1, None, "cpu"), CaseId("n", "r", "fp32", 1, None, "cpu")]

    def verdict_of(case, inject, trial):  # a planted gate: 5% found from trial 1 on, one A/A false alarm
        if inject == 0.0:
            return "regressed" if (case.model, trial) == ("m", 3) else "pass"
        return "regressed" if inject >= 0.10 or trial > 0 else "noise"

    ran = []
    r = ab_gate_check(cases, verdict_of, trials=10, levels=(0.05, 0.10),
                      execute=lambda fn, *a: ran.append(a[-1]) or fn(*a))
    assert ran == list(range(10))  # one execute (one worker session) per trial
    assert r.aa == {"pass": 19, "regressed": 1} and r.false_alarm_rate == 0.05
    assert r.power(0.05) == 0.9 and r.power(0.10) == 1.0 and r.smallest_detected == 0.10
    md = r.markdown()
    assert "| 0% (A/A) | 20 | pass 19, regressed 1 | false alarms 5.0% |" in md and "95% power: 10%" in md


def _activated(biases, ratio=1.0, pairs_each=10, noise=0.01, seed=0):
    """Blocks of len(biases) activations: each activation's B runs `bias` off A (the activation's own layout
    bias), on top of the true ratio."""
    out = []
    for k, bias in enumerate(biases):
        for blk in _blocks(ratio * bias, pairs=pairs_each, noise=noise, seed=seed + k):
            out.append(AbBlock(blk.side, blk.pair + k * pairs_each, blk.samples_ns, blk.contention, k))
    return out


def test_activations_that_differ_are_judged_on_the_activations_not_the_pairs():
    """A against itself, four activations biased +9%, +2%, -5%, +6% (as 0.03 ms mlp on 2 threads measured):
    the pairs alone would call it regressed; judged on the activations the interval is wide: noise, never a false
    alarm."""
    biases = (1.09, 1.02, 0.95, 1.06)
    one = [AbBlock(b.side, b.pair, b.samples_ns, b.contention, 0) for b in _activated(biases)]
    assert judge_ab(one).verdict is Verdict.REGRESSED  # what a single activation's pairs say
    v = judge_ab(_activated(biases))
    assert v.verdict is Verdict.NOISE and v.unjudged == "interval too wide", v.reason
    assert "its 4 activations differ (Kruskal-Wallis p" in v.reason and v.ratio.pairs == 40
    assert v.ratio.low < 1.0 < v.ratio.high


def test_activations_that_agree_keep_the_pairs_power():
    """No activation bias: the pairs decide as with one activation (5% found, the same interval)."""
    v = judge_ab(_activated((1.0, 1.0, 1.0, 1.0), ratio=1.05))
    assert v.verdict is Verdict.REGRESSED and "activations differ" not in v.reason, v.reason
    same = judge_ab(_activated((1.0,) * 4))
    assert same.verdict is Verdict.PASS


def test_a_real_slowdown_is_found_through_differing_activations():
    """Activations that differ by +-1% around a 10% slowdown: judged on the activations, still regressed."""
    v = judge_ab(_activated((1.01, 0.99, 1.012, 0.988, 1.0, 1.005), ratio=1.10, noise=0.002))
    assert "activations differ" in v.reason and v.verdict is Verdict.REGRESSED and v.ratio.low > 1.05, v.reason


def test_which_activation_measures_a_pair():
    from harness.gating.ab import activation_of

    assert [activation_of(i, 40, 4) for i in (0, 9, 10, 39, 40, 55)] == [0, 0, 1, 3, 4, 5]
    assert {activation_of(i, 40, 1) for i in range(60)} == {0}
    assert [activation_of(i, 10, 4) for i in range(10)] == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3]


def test_what_a_case_can_detect_comes_from_its_activations_when_they_differ():
    from harness.gating.ab import case_detect_line

    same = case_detect_line(_activated((1.0,) * 4))
    assert same.startswith("can detect a slowdown of") and "with 40 pairs" in same
    differ = case_detect_line(_activated((1.09, 1.02, 0.95, 1.06)), target=0.05)
    m = re.search(r"can detect a slowdown of ([\d.]+)% with 4 activations .*Kruskal-Wallis p", differ)
    assert m and float(m.group(1)) > 10.0, differ  # a 6% spread of 4 activations: only large slowdowns
    assert differ.endswith("--detect 5.0%: not reached (more activations: --ab-budget)")
