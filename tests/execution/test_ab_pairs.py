"""The A/B's pair loop: activations, quiet waits after a contended pair, more pairs within the budget."""

from __future__ import annotations

import numpy as np

from harness.config import RunConfig
from harness.results.schema import AbBlock
from harness.workloads.ab.pairs import PairLoop, Stop
from harness.results.stored import BlockContention

CONTENDED = BlockContention(contended=True, cause="2 threads, 1.0 core free")


class Fake:
    """Blocks of ~1 ms calls: B `ratio` x A, each activation biased by `biases[activation]`; `contended` pairs
    carry the probe's contended verdict. A fake clock advances by each block's time and each wait."""

    def __init__(self, ratio=1.0, biases=(1.0,), contended=(), noise=0.002, seed=0):
        self.ratio, self.biases, self.contended = ratio, biases, set(contended)
        self.rng = np.random.default_rng(seed)
        self.now, self.activations, self.waits = 0.0, [], []
        self.noise = noise

    def clock(self):
        return self.now

    def measure(self, side, pair, act):
        r = 1.0 if side == "a" else self.ratio * self.biases[act % len(self.biases)]
        samples = (1_000_000 * r * (1 + self.noise * self.rng.standard_normal(20))).astype(int).tolist()
        self.now += 0.05
        return AbBlock(side, pair, samples, CONTENDED if pair in self.contended else None, act)

    def activate(self, act):
        self.activations.append(act)
        self.now += 0.1

    def wait(self, threads, timeout_s, window_s):
        self.waits.append(timeout_s)
        self.now += min(timeout_s, 0.3)
        return {"waited_s": min(timeout_s, 0.3), "quiet": True}


def _loop(fake, **ab):
    cfg = RunConfig.build(workload="ab", **{"ab_pairs": 20, "ab_activations": 4, "ab_budget_s": 10.0, **ab}).ab
    return PairLoop(cfg, 1, fake.measure, fake.activate, clock=fake.clock, wait=fake.wait)


def test_a_quiet_judged_case_measures_its_planned_pairs_only():
    fake = Fake(ratio=1.05)
    loop = _loop(fake)
    order, blocks = loop.run()
    assert len(order) == 20 and len(blocks) == 40 and loop.extra_pairs == 0 and loop.spent_s == 0.0
    assert fake.activations == [1, 2, 3] and not fake.waits  # activations 1..3 made by the loop (0 by the caller)


def test_after_a_contended_pair_the_loop_waits_for_quiet_cores_within_the_budget():
    fake = Fake(ratio=1.05, contended={3, 4})
    loop = _loop(fake, ab_budget_s=1.0)
    loop.run()
    assert fake.waits == [0.5, 0.2]  # after pair 3, after pair 4 (what the wait's half of the budget had left)
    assert abs(loop.waited_s - 0.5) < 1e-9 and loop.extra_pairs == 0


def test_an_unjudged_verdict_buys_more_activations_until_judged_or_the_budget_is_spent():
    """Activations biased +-6%: four of them leave the interval too wide (noise); more activations (5 pairs each,
    new ones) narrow it until it is judged."""
    biases = (1.06, 0.94, 1.05, 0.95, 1.0, 1.01, 0.99, 1.0)
    fake = Fake(ratio=1.0, biases=biases)
    loop = _loop(fake, ab_budget_s=60.0)
    order, blocks = loop.run()
    assert loop.extra_pairs > 0 and loop.extra_pairs % 5 == 0 and len(order) == 20 + loop.extra_pairs
    assert fake.activations == list(range(1, len(order) // 5))
    assert {b.activation for b in blocks} == set(range(len(order) // 5))
    from harness.gating.ab import judge_ab

    v = judge_ab(blocks)
    assert not v.unjudged and v.verdict.value == "pass", v.reason
    spent = loop.spent_s
    none = _loop(Fake(ratio=1.0, biases=biases), ab_budget_s=0.0)
    none.run()
    assert none.extra_pairs == 0 and len(none.order) == 20 and spent <= 60.0 + 2.0


def test_the_budget_bounds_the_extra_pairs_of_a_case_that_stays_unjudged():
    fake = Fake(ratio=1.0, contended=set(range(0, 1000)))  # every pair contended: never judged
    loop = _loop(fake, ab_budget_s=20.0)
    loop.run()
    # the waits after each contended pair and the extra pairs both come out of it; it ends within one more
    # activation's pairs (5 x (0.3 s wait + 2 blocks of 0.05 s) + 0.1 s activation) of the budget
    assert 20.0 <= loop.spent_s < 20.0 + 2.2 and loop.extra_pairs > 0 and loop.waited_s > 0


def test_a_callback_stops_the_loop_with_its_value():
    fake = Fake()

    def failing(side, pair, act):
        if pair == 2:
            raise Stop("side A failed in pair 2")
        return fake.measure(side, pair, act)

    cfg = RunConfig.build(workload="ab", ab_pairs=10).ab
    try:
        PairLoop(cfg, 1, failing, fake.activate, clock=fake.clock, wait=fake.wait).run()
    except Stop as stop:
        assert stop.value == "side A failed in pair 2"
    else:
        raise AssertionError("the loop went on past a failed side")
