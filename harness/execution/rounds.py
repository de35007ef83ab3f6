"""Later measurement rounds of --repeats: one more block of every case, the whole matrix at a time."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from harness.config import RunConfig
from harness.measure.contention import case_contention
from harness.measure.tracker import merge_tracked, split_fields
from harness.results.schema import Block, CaseResult, RunResults
from harness.results.stats import latency_stats, median_ns, throughput_sps


def pending_rounds(run: RunResults) -> int:
    return max((r.blocks_pending for r in run.cases), default=0)


def later_rounds(run: RunResults, executor: Any, config: RunConfig, after_block: Callable[[], None] = lambda: None,
                 progress: Any = None, stop: Callable[[], bool] = lambda: False) -> int:
    """Measure the pending blocks of `run`'s cases in rounds; returns the blocks added.

    `executor.measure_block(case, config, fresh)` returns {"samples_ns", "device_samples_ns", "warmup_iters",
    "reactivated"} or {"error": reason}. `after_block` runs after every merged block (the session writes the
    results atomically there). `progress` (a RunProgress) shows each block; `stop()` true ends the rounds
    before the next block, as a KeyboardInterrupt does; the cases keep the blocks they have.
    """
    progress = progress or NullProgress()
    added = 0
    rounds = pending_rounds(run)
    progress.start("block", sum(r.blocks_pending for r in run.cases if r.measured))
    for k in range(rounds):
        previous_key = None
        for result in run.cases:
            if not result.measured or result.blocks_pending <= 0:
                continue
            if stop():
                return added
            key = result.case.activation_key
            progress.begin(f"{result.case.id} (round {k + 2}/{rounds + 1})")
            block = executor.measure_block(result.case, config, fresh=key != previous_key)
            previous_key = key if "error" not in block else None
            result.blocks_pending -= 1
            merge_block(result, block, config.measure.noise_cv, "round")
            added += "error" not in block
            after_block()
            progress.end(block_line(result, block, f"round {k + 2}/{rounds + 1}"))
    return added


def confirm_rounds(run: RunResults, case_ids: set[str], executor: Any, config: RunConfig, rounds: int,
                   after_block: Callable[[], None] = lambda: None, progress: Any = None,
                   stop: Callable[[], bool] = lambda: False) -> int:
    """`rounds` more blocks of the cases in `case_ids` (a gate's suspects), in rounds over those cases, each
    block after a fresh activation; they are the case's blocks of kind "confirm". Returns the blocks added."""
    progress = progress or NullProgress()
    added = 0
    suspects = [r for r in run.cases if r.case.id in case_ids and r.measured]
    progress.start("confirm", rounds * len(suspects))
    for k in range(rounds):
        for result in suspects:
            if stop():
                return added
            progress.begin(f"{result.case.id} (confirmation {k + 1}/{rounds})")
            block = executor.measure_block(result.case, config, fresh=True)
            merge_block(result, block, config.measure.noise_cv, "confirm")
            added += "error" not in block
            after_block()
            progress.end(block_line(result, block, f"confirmation {k + 1}/{rounds}"))
    return added


def block_line(result: CaseResult, block: dict[str, Any], which: str) -> str:
    """One line for a finished block: its p50, or why it failed."""
    if "error" in block:
        return f"block   {result.case.id} {which}: {str(block['error']).splitlines()[0][:160]}"
    samples = block.get("samples_ns") or ()
    p50 = f"p50 {median_ns(samples) / 1e6:.4g} ms" if len(samples) else "no samples"
    settle = block.get("settle") or {}
    if settle:  # never silent: the block was contended, waited out (--settle) and measured again
        waited = (settle.get("wait") or {}).get("waited_s")
        again = "contended again" if settle.get("contended_again") else "quiet"
        p50 += f" (re-measured after a contended block, {waited or 0:.1f} s --settle wait: {again})"
    elif (contention := block.get("contention")) and contention.contended:
        p50 += f" (contended: {contention.cause or 'run-queue wait'})"
    return f"block   {result.case.id} {which}: {p50}"


class NullProgress:
    """A progress that shows nothing (library calls and tests)."""

    def start(self, phase: str, total: int) -> None: ...
    def begin(self, label: str) -> None: ...
    def end(self, line: str) -> None: ...
    def note(self, line: str) -> None: ...


def merge_block(result: CaseResult, block: dict[str, Any], noise_cv: float, kind: str = "round") -> None:
    """Append one block of `kind` ("round", "confirm") to a case: samples, its Block record (a failed one says
    why), latency statistics and throughput again."""
    if not result.blocks and result.samples_ns:  # a case measured in one block: that block first
        result.blocks.append(Block.measured(result.samples_ns, "case"))
    reactivated = bool(block.get("reactivated"))
    if "error" in block:
        result.blocks.append(Block.failed(str(block["error"]), kind, reactivated))
        return
    samples = [int(x) for x in block["samples_ns"]]
    if not samples:
        result.blocks.append(Block.failed("the block measured no samples", kind, reactivated))
        return
    result.samples_ns = list(result.samples_ns) + samples
    result.blocks.append(Block.measured(samples, kind, reactivated, block.get("contention")))
    if block.get("settle"):  # --settle re-measured this block: the contended one kept beside, as in the case's own
        settle = result.details.setdefault("settle", {})
        settle.setdefault("remeasured", []).append({**block["settle"], "block": len(result.blocks) - 1})
    contention = case_contention([b.contention for b in result.blocks])
    if contention is not None:
        result.contention = contention
    result.warmup_iters = int(result.warmup_iters or 0) + int(block.get("warmup_iters") or 0)
    merge_tracked_into(result, block.get("tracked") or {})
    stats = latency_stats(result.samples_ns, noise_cv)
    result.latency = stats
    result.throughput_sps = throughput_sps(result.case.batch, stats.p50_ms)
    device = [int(x) for x in block.get("device_samples_ns") or ()]
    if device and result.device_samples_ns:
        result.device_samples_ns = list(result.device_samples_ns) + device
        result.details["device_latency"] = latency_stats(result.device_samples_ns, noise_cv).as_dict()


_DECLARED = {f.name for f in dataclasses.fields(CaseResult)}


def merge_tracked_into(result: CaseResult, tracked: dict[str, dict[str, Any]]) -> None:
    """What the block trackers of a later block filled (by tracker name: its fields), merged into the case by each
    tracker's merge (harness.measure.tracker): a declared field of CaseResult, else the case's details."""
    current = {**result.details, **{k: getattr(result, k) for k in _DECLARED}}
    declared, undeclared = split_fields(merge_tracked(current, tracked), _DECLARED)
    for key, value in declared.items():
        setattr(result, key, value)
    result.details.update(undeclared)
