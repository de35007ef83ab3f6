"""Typed records of a case's parts (memory, end to end, generation, localisation): built field by field by what
measures them, read by attribute, written as the fields they hold, in declared order."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Annotated, Any

from pydantic import AfterValidator, Strict

from harness.results.stats import LatencyStats
from harness.results.stored import (MAX_FIGURE, RECORD_DICT, Amount, Count, Number, Object, Record, Samples, Share,
                                    Text, Texts, when_set)

# How these records are stored: like every record (harness.results.stored.Record.as_dict), as their fields in
# declared order, read back by the one reader. A field declared `when_set()` is written only when it holds a value:
# what measures a part gives such a field only where it has one (a CPU case's memory has no GPU keys, a
# localisation that ran to its end no `truncated`), so a stored dict keeps the keys it was written with, and a
# file from before a key existed keeps its layout when written again. The other fields are written always, None
# as null (an unbounded interval, a generation that never diverged). Keys a record does not declare (a newer
# harness may add some) are kept and written after its fields (RECORD_DICT).

Figure = Number | None  # a figure as written: an int or a float, or None where not measured


# the GPU's keys of a case's memory: written together where the GPU was sampled (any of them holds a value)
GPU = ("gpu_process_peak_mb", "gpu_device_used_peak_mb", "gpu_device_used_before_mb", "gpu_problem", "gpu_source")


@dataclass
class MemoryRecord(Record):
    """Memory over a case (harness.measure.memory.MemorySampler), MiB: host RSS before and at its peak (and where
    the peak came from), the GPU's figures where sampled, and the one `gpu_source` names is the case's
    gpu_peak_mb. Every field is written only where given: a CPU case has no GPU keys, a case without torch's
    allocator no torch keys; where the GPU was sampled its figures and source are written, None as null."""

    __pydantic_config__ = RECORD_DICT

    covers: Text | None = when_set()  # what the figures cover (activation, warm-up, timed loop ...)
    host_rss_before_mb: Figure = when_set()
    host_rss_peak_mb: Figure = when_set()
    host_delta_mb: Figure = when_set()
    host_peak_source: Text | None = when_set()  # "vmhwm" (the kernel's peak) or "sampled_rss"
    gpu_process_peak_mb: Figure = when_set(GPU)
    gpu_device_used_peak_mb: Figure = when_set(GPU)
    gpu_device_used_before_mb: Figure = when_set(GPU)
    gpu_problem: Text | None = when_set()  # only where there was one
    torch_max_allocated_mb: Figure = when_set()
    torch_max_reserved_mb: Figure = when_set()
    gpu_source: Text | None = when_set(GPU)  # nvml_process | torch_max_reserved | nvml_device_delta
    sampler: Object | None = when_set()  # how it ran: thread, period_ms, samples, mean_sample_us, busy_fraction


@dataclass
class EndToEndRecord(Record):
    """raw input -> pre-processing -> the runtime -> post-processing, timed (harness.measure.end_to_end): the raw
    samples and their statistics, and each step's median with its 95% interval (None: unbounded)."""

    __pydantic_config__ = RECORD_DICT

    steps: Text | Texts = ""
    samples_ns: Samples = field(default_factory=list)
    warmup_iters: Count | None = None
    latency: LatencyStats | None = None  # the statistics of samples_ns (latency_stats)
    throughput_sps: Figure = None
    pre_p50_ms: Figure = None
    pre_p50_ci_low_ms: Figure = None
    pre_p50_ci_high_ms: Figure = None
    model_p50_ms: Figure = None  # the inference inside the same loop
    model_p50_ci_low_ms: Figure = None
    model_p50_ci_high_ms: Figure = None
    post_p50_ms: Figure = None
    post_p50_ci_low_ms: Figure = None
    post_p50_ci_high_ms: Figure = None


@dataclass
class GenerationStats(Record):
    """Statistics of one kind of generation sample (harness.results.stats.summary_ms), ms; `n` samples."""

    __pydantic_config__ = RECORD_DICT

    p50_ms: Figure = None
    p90_ms: Figure = None
    p99_ms: Figure = None
    p50_ci_low_ms: Figure = None
    p50_ci_high_ms: Figure = None
    p99_ci_low_ms: Figure = None
    p99_ci_high_ms: Figure = None
    mean_ms: Figure = None
    min_ms: Figure = None
    max_ms: Figure = None
    n: Count | None = None

    def figure(self, key: str) -> Any:
        """A figure by its stored name (p50_ms, mean_ms ...); None where not stored."""
        return getattr(self, key, None) if key in {f.name for f in fields(self)} else None


@dataclass
class TokenAgreement(Record):
    """A generation against the reference's (harness.workloads.generate.metrics.token_agreement) and the first
    step's logits against the reference's (an AccuracyResult)."""

    __pydantic_config__ = RECORD_DICT

    reference: Text | None = None
    first_step_logits: Object | None = None  # AccuracyResult.as_dict()
    exact_match_rate: Share | None = None
    first_divergence: Count | None = None
    first_divergence_per_sequence: Annotated[list[Count | None], Strict()] = field(default_factory=list)
    sequences_identical: Count | None = None
    sequences: Count | None = None
    tokens: Annotated[list[Any], Strict()] = field(default_factory=list)
    reference_tokens: Annotated[list[Any], Strict()] = field(default_factory=list)


@dataclass
class GenerationRecord(Record):
    """A generation case's figures with their raw samples (harness.workloads.generate.metrics.summarize): TTFT
    (one per generation), decode steps, end to end, tokens/s, decode latency over context length, and its
    agreement with the reference (`conformance`). The raw samples are checked by the reader
    (schema._check_generation), so they are declared as stored."""

    __pydantic_config__ = RECORD_DICT

    batch: Count | None = None
    prompt_len: Count | None = None
    new_tokens: Count | None = None
    generations: Count | None = None
    ttft_ns: Any = None
    decode_ns: Any = None
    e2e_ns: Any = None
    ttft: GenerationStats | None = None
    tpot: GenerationStats | None = None
    e2e: GenerationStats | None = None
    itl: Object | None = None  # a histogram of the inter-token latencies: edges_ms, counts
    tokens_per_s: Amount | None = None
    decode_tokens_per_s: Amount | None = None
    context_p50_ms: Annotated[list[Annotated[list[Number], Strict()]], Strict()] = field(default_factory=list)
    conformance: TokenAgreement | None = when_set()  # set where a reference generated too
    kv_cache_mb: Figure = when_set()

    def stat(self, what: str) -> GenerationStats:
        """The statistics of `what` (ttft, tpot, e2e); empty where not measured."""
        s = getattr(self, what)
        return s if isinstance(s, GenerationStats) else GenerationStats()


def _drift_figure(v: Any) -> Any:
    if v is None or (isinstance(v, str) and v in ("nan", "inf", "-inf")):
        return v
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or abs(v) > MAX_FIGURE:
        raise ValueError('expected a finite number, or "nan" / "inf" (a tensor that held them)')
    return v


# a drift figure as localisation writes it: a number, or "nan" / "inf" where the tensor held one
Drift = Annotated[Any, AfterValidator(_drift_figure)]


def _non_negative(v: Any) -> Any:
    if isinstance(v, (int, float)) and v < 0:
        raise ValueError("a distance is never negative")
    return v


def _cosine(v: Any) -> Any:
    if isinstance(v, (int, float)) and not -1.0 - 1e-6 <= v <= 1.0 + 1e-6:
        raise ValueError("a cosine similarity lies in [-1, 1]")
    return v


Distance = Annotated[Drift, AfterValidator(_non_negative)]  # max |diff|, p99 |diff|, rel L2
Cosine = Annotated[Drift, AfterValidator(_cosine)]


@dataclass
class LocalizationFinding(Record):
    """A tensor of the FP32 graph whose low-precision counterpart is over tolerance (harness.accuracy.localize)."""

    __pydantic_config__ = RECORD_DICT

    node: Text | None = None
    op_type: Text | None = None
    tensor: Text | None = None
    max_abs: Distance = None
    p99_abs: Distance = None
    rel_l2: Distance = None
    cosine: Cosine = None
    nonfinite: Count | None = None


@dataclass
class LocalizationRecord(Record):
    """Where the drift starts (harness.accuracy.localize, a forward case's localisation step): what triggered it,
    the tolerance, the tensors compared and skipped, the first ones over tolerance in topological order, and
    why it stopped early (`truncated`) or could not run (`error`)."""

    __pydantic_config__ = RECORD_DICT

    trigger: Text | None = None  # "failure" (the drift failed) or "request" (--localize)
    tolerance: Object | None = None  # max_rel_l2, min_cosine
    checked: Count | None = None
    skipped: Count | None = when_set()
    first_bad: Annotated[list[LocalizationFinding], Strict()] = field(default_factory=list)
    truncated: Text | None = when_set()
    error: Text | None = when_set()

