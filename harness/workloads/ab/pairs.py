"""The interleaved pairs of an A/B (`harness ab`, `harness gate`; driven from the parent): the drawn order, new
activations (new workers on one CPU), quiet waits after a contended pair, more pairs while unjudged and time lasts."""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness.config import AbConfig
from harness.gating.ab import DETECT_PILOT_PAIRS, activation_of, judge_ab, more_pairs
from harness.measure.contention import wait_quiet
from harness.results.schema import AbBlock

# after a contended pair, the loop looks at the machine in windows this long until the cores are free (a window of
# 5 of /proc/stat's 10 ms ticks; the case's own threads are idle then, so what it sees is the others' load) ...
QUIET_WINDOW_S = 0.05
# ... for at most this long per pair (and never past the case's --ab-budget): a neighbour's burst that outlasts it
# is measured through, its pairs left out as contended and made up for by the budget's extra pairs
QUIET_WAIT_MAX_S = 2.0
# the waits may spend at most this share of the budget: under a load that does not go away waiting buys nothing,
# and the rest is kept for more pairs
WAIT_SHARE = 0.5


def block_order(pairs: int, seed: int) -> list[str]:
    """"ab" or "ba" per pair: as many of each as the count allows (one more drawn for an odd count), shuffled."""
    rng = random.Random(seed)
    order = ["ab", "ba"] * (pairs // 2) + ([rng.choice(["ab", "ba"])] if pairs % 2 else [])
    rng.shuffle(order)
    return order


def renews_workers() -> bool:
    """Whether each activation of a case after its first runs in new workers: where this process may use one CPU
    (the supervisor, the sides' workers and, on a Ray node, Ray's own processes share the core that measures).
    There a model activated again in the same worker kept a bias of that process's own through every activation
    of the run: the gate's A/A on mlp, one run's activations at -3.5, -3.1, -2.4, -3.2% (`improved`; 4 false
    alarms in 20 rows), new workers 0 in 20; `harness ab` base against base, 9 false verdicts in 32 rows with its
    activations in one worker. With two CPUs the gate's activations in one worker were measured sound (0 false
    alarms in 320 A/A rows), and new workers there gave one in 4 (a single gate): they stay in one worker.
    docs/measurements.md, "A new worker per activation"."""
    from harness.results.environment import default_threads

    return default_threads() == 1


def failed_block_status(reply: dict[str, Any]) -> str:
    """The row status of a block request that failed: the supervisor's "timeout: exceeded --case-timeout ...",
    "crashed: ..." or the worker's oom, by its `status` or its error's first word; anything else "crashed"."""
    from harness.results.schema import BROKEN

    status = str(reply.get("status") or str(reply["error"]).split(":", 1)[0])
    return status if status in BROKEN else "crashed"


class Stop(Exception):
    """Raised by a callback to end the pairs early with `value` (a failed side: the caller's result)."""

    def __init__(self, value: Any) -> None:
        super().__init__(str(value))
        self.value = value


@dataclass
class PairLoop:
    """Measure one case's pairs. `measure(side, pair, activation)` times one block and returns its AbBlock;
    `activate(activation)` activates both sides anew (called from the second activation on: the caller made the
    first). The planned pairs (`ab_pairs`, or --detect's pilot and the pairs its spread asks for) come first; then,
    while judge_ab leaves the case unjudged (contended pairs, too few clean ones, an interval too wide) and the
    case's `ab_budget_s` lasts, one more activation's worth of pairs at a time. After a pair with a contended
    block the loop waits for quiet cores (wait_quiet, bounded) before the next; the waiting is paid from the
    budget too, at most WAIT_SHARE of it. `spent_s`: the budget used (waits and extra pairs); `extra_pairs`: the
    pairs it bought."""

    ab: AbConfig
    threads: int
    measure: Callable[[str, int, int], AbBlock]
    activate: Callable[[int], None]
    clock: Callable[[], float] = time.perf_counter
    wait: Callable[..., dict[str, Any]] = wait_quiet
    order: list[str] = field(default_factory=list)
    blocks: list[AbBlock] = field(default_factory=list)
    waited_s: float = 0.0
    extra_s: float = 0.0
    extra_pairs: int = 0
    _active: int = 0

    @property
    def spent_s(self) -> float:
        return self.waited_s + self.extra_s

    def run(self) -> tuple[list[str], list[AbBlock]]:
        ab = self.ab
        self._extend(block_order(DETECT_PILOT_PAIRS if ab.ab_detect else ab.ab_pairs, ab.ab_seed))
        while ab.ab_detect and (more := more_pairs(self.blocks, ab.ab_detect, ab.ab_confidence,
                                                   ab.ab_min_effect)) > 0:
            self._extend(block_order(more, ab.ab_seed + len(self.order)))
        group = max(1, math.ceil(ab.ab_pairs / max(1, ab.ab_activations)))
        while self.spent_s < ab.ab_budget_s and judge_ab(self.blocks, ab.ab_min_effect, ab.ab_confidence).unjudged:
            t0, w0, before = self.clock(), self.waited_s, len(self.order)
            self._extend(block_order(group, ab.ab_seed + before))
            self.extra_pairs += len(self.order) - before
            self.extra_s += max(0.0, self.clock() - t0 - (self.waited_s - w0))  # its waits are counted there
        return self.order, self.blocks

    def _extend(self, more: list[str]) -> None:
        start = len(self.order)
        self.order += more
        for i, sides in enumerate(more, start):
            if (act := activation_of(i, self.ab.ab_pairs, self.ab.ab_activations)) != self._active:
                self._active = act  # both sides anew: the activation's own bias drawn again (judge_ab)
                self.activate(act)
            wait_left = min(self.ab.ab_budget_s * WAIT_SHARE - self.waited_s, self.ab.ab_budget_s - self.spent_s)
            if self.blocks and self._last_contended() and wait_left > 0:
                seen = self.wait(self.threads, min(QUIET_WAIT_MAX_S, wait_left), window_s=QUIET_WINDOW_S)
                self.waited_s += float(seen.get("waited_s") or 0.0)
            for s in sides:
                self.blocks.append(self.measure(s, i, act))

    def _last_contended(self) -> bool:
        last = self.blocks[-1].pair
        return any(b.contention and b.contention.contended for b in self.blocks[-2:] if b.pair == last)
