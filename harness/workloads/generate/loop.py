"""The timed greedy decode loop over a runtime's Decoder (prefill, then one step per token), clock injectable."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from harness.runtimes.decoding.base import Decoder

Clock = Callable[[], int]  # nanoseconds


@dataclass
class Generation:
    """One greedy generation: the tokens [batch, n], the prefill time (TTFT: prompt in, first token id out),
    each decode step's time (token i -> token i+1), and the logits that chose the first token."""

    tokens: np.ndarray
    ttft_ns: int
    step_ns: list[int] = field(default_factory=list)
    first_logits: np.ndarray | None = None

    @property
    def e2e_ns(self) -> int:
        return self.ttft_ns + sum(self.step_ns)


def greedy_generate(decoder: Decoder, prompt: np.ndarray, new_tokens: int, clock: Clock = time.perf_counter_ns,
                    keep_logits: bool = False) -> Generation:
    """Generate exactly `new_tokens` tokens per sequence (EOS does not stop it: every run does the same work),
    each the argmax of its logits. A step's time covers the decoder call and the argmax: from the previous
    token id on the host to the next one on the host."""
    t0 = clock()
    logits = decoder.prefill(prompt)
    tok = np.argmax(logits, axis=-1).astype(np.int64)
    t1 = clock()
    first = np.array(logits, dtype=np.float32, copy=True) if keep_logits else None
    out = [tok]
    steps = []
    for _ in range(new_tokens - 1):
        a = clock()
        tok = np.argmax(decoder.step(tok), axis=-1).astype(np.int64)
        steps.append(clock() - a)
        out.append(tok)
    return Generation(np.stack(out, axis=1), t1 - t0, steps, first)
