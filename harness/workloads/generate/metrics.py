"""Generation metrics from raw per-step samples (TTFT, TPOT, ITL, end to end, tokens/s) and token agreement."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from harness.results.records import GenerationRecord, GenerationStats, TokenAgreement
from harness.results.stats import column_medians_ms, summary_ms
from harness.workloads.generate.loop import Generation

PERCENTILES = (50, 90, 99)


def _stats(samples_ns: Sequence[int]) -> GenerationStats | None:
    summary = summary_ms(samples_ns, PERCENTILES)
    return None if summary is None else GenerationStats(**summary)


def itl_histogram(samples_ns: Sequence[int], bins: int = 20) -> dict[str, list[float] | list[int]]:
    """Inter-token latencies as a histogram: `edges_ms` (bins + 1) and `counts` (the raw samples are stored
    beside it, so this is a convenience for reports)."""
    if not len(samples_ns):
        return {"edges_ms": [], "counts": []}
    ms = np.asarray(samples_ns, dtype=np.float64) / 1e6
    counts, edges = np.histogram(ms, bins=bins)
    return {"edges_ms": [float(e) for e in edges], "counts": [int(c) for c in counts]}


def summarize(runs: Sequence[Generation], batch: int, prompt_len: int) -> GenerationRecord:
    """The metrics of repeated generations with their raw samples (docs/generation.md defines each).

    ttft: prefill, one sample per generation. tpot: every decode step of every generation (percentiles over
    tokens). itl: the gaps between consecutive tokens; in this loop each token arrives when its step ends,
    so they are the decode steps. e2e: TTFT + the decode steps, per generation. tokens_per_s: batch x tokens
    / mean e2e; decode_tokens_per_s: batch x (tokens - 1) / mean decode time. context_p50_ms: the median
    decode step at each context length (prompt + tokens already generated), over generations."""
    new_tokens = int(runs[0].tokens.shape[1]) if runs else 0
    ttft = [r.ttft_ns for r in runs]
    steps = [list(r.step_ns) for r in runs]
    flat = [s for st in steps for s in st]
    e2e = [r.e2e_ns for r in runs]
    mean_e2e_s = float(np.mean(e2e)) / 1e9 if e2e else 0.0
    decode_s = [sum(st) / 1e9 for st in steps]
    mean_decode_s = float(np.mean(decode_s)) if decode_s else 0.0
    context = []
    if steps and steps[0]:
        per_pos = column_medians_ms(steps)
        # step i feeds token i (0-based) with prompt_len + i tokens already in the cache
        context = [[prompt_len + i + 1, float(v)] for i, v in enumerate(per_pos)]
    return GenerationRecord(
        batch=batch, prompt_len=prompt_len, new_tokens=new_tokens, generations=len(runs),
        ttft_ns=ttft, decode_ns=steps, e2e_ns=e2e,
        ttft=_stats(ttft), tpot=_stats(flat), e2e=_stats(e2e), itl=itl_histogram(flat),
        tokens_per_s=batch * new_tokens / mean_e2e_s if mean_e2e_s > 0 else None,
        decode_tokens_per_s=batch * (new_tokens - 1) / mean_decode_s if mean_decode_s > 0 else None,
        context_p50_ms=context)


def token_agreement(tokens: np.ndarray, reference: np.ndarray, reference_name: str | None = None,
                    first_step_logits: dict[str, Any] | None = None) -> TokenAgreement:
    """Greedy tokens [batch, n] against the reference's (`reference_name`, with the first step's logits judged
    against its: an AccuracyResult.as_dict()): exact-match rate over all positions, the first
    position (0-based, over the batch) where any sequence differs (None: none does), per sequence too.
    After a divergence the two continue from different contexts, so positions past it say little."""
    tokens, reference = np.asarray(tokens), np.asarray(reference)
    if tokens.shape != reference.shape:
        raise ValueError(f"token shapes differ: {tokens.shape} vs reference {reference.shape}")
    same = tokens == reference
    per_seq: list[int | None] = []
    for row in same:
        bad = np.flatnonzero(~row)
        per_seq.append(int(bad[0]) if bad.size else None)
    firsts = [p for p in per_seq if p is not None]
    return TokenAgreement(reference=reference_name, first_step_logits=first_step_logits,
                          exact_match_rate=float(same.mean()) if same.size else 1.0,
                          first_divergence=min(firsts) if firsts else None, first_divergence_per_sequence=per_seq,
                          sequences_identical=int(sum(p is None for p in per_seq)), sequences=int(same.shape[0]),
                          tokens=tokens.tolist(), reference_tokens=reference.tolist())
