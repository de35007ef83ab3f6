"""Typed records of a case's parts (memory, end to end, generation, localisation): built field by field by what
measures them, read by attribute, written as the keys they were given (or read from), in order."""

from __future__ import annotations

import copy
import math
from dataclasses import MISSING, dataclass, field, fields
from typing import Annotated, Any

from pydantic import AfterValidator, Strict, WrapValidator

from harness.results.stored import (MAX_FIGURE, RECORD_CONFIG, Amount, Count, Number, Object, Record, Samples, Share,
                                    Text, Texts)

# How these records are stored: what measures a part of a case (the memory sampler, the end-to-end loop, the
# generation summary, the localiser) builds its record field by field, and the record is stored as the fields it
# was given, in declared order (a CPU case's memory has no GPU keys; a field given as None is written as null).
# The record declares the keys it reads (their types are what the strict reader accepts); one read from a stored
# dict remembers that dict's keys, in order, with any it does not declare (a newer harness may add some):
# `as_dict()` gives that dict back, so results.json does not change by a byte.


def _default(f: Any) -> Any:
    return f.default_factory() if f.default_factory is not MISSING else f.default


class DictRecord(Record):
    """Mixin of a record stored as the fields it was made with, or as the dict it was read from (see above); read,
    like every record, by the one reader (`from_dict`: harness.results.stored.Record)."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        """The record, remembering which fields its maker gave (positionally or by name): those are its keys."""
        rec = super().__new__(cls)
        names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
        given = set(names[:len(args)]) | set(kwargs)
        rec.__dict__["_keys"] = tuple(n for n in names if n in given)
        return rec

    @classmethod
    def schema_type(cls) -> Any:
        return Annotated[cls, Read]  # read from a dict, it remembers that dict's layout

    def _remember(self, d: dict[str, Any]) -> None:
        """Keep the layout of the dict this record was read from: its keys in order and the undeclared ones."""
        names = {f.name for f in fields(self)}  # type: ignore[arg-type]
        self.__dict__["_keys"] = tuple(d)
        self.__dict__["_extra"] = {k: v for k, v in d.items() if k not in names}

    def as_dict(self) -> dict[str, Any]:
        """The stored dict: the keys it was made from (a stored dict's, in their order, or the fields its maker
        gave), then any declared field set since away from its default (a record without either: every field)."""
        declared = fields(self)  # type: ignore[arg-type]
        keys: tuple[str, ...] | None = self.__dict__.get("_keys")
        extra: dict[str, Any] = self.__dict__.get("_extra", {})
        if keys is None:
            keys = tuple(f.name for f in declared)
        else:
            keys += tuple(f.name for f in declared if f.name not in keys and getattr(self, f.name) != _default(f))
        out: dict[str, Any] = {}
        for k in keys:
            v = extra[k] if k in extra else getattr(self, k)
            out[k] = _plain(v)
        return out


def _plain(v: Any) -> Any:
    if isinstance(v, DictRecord):
        return v.as_dict()
    if isinstance(v, list) and any(isinstance(x, DictRecord) for x in v):
        return [_plain(x) for x in v]
    return copy.deepcopy(v)


def _keeps_layout(v: Any, handler: Any) -> Any:
    """The strict reader's hook: the record read from a stored dict remembers that dict's layout."""
    rec = handler(v)
    if isinstance(v, dict) and isinstance(rec, DictRecord):
        rec._remember(v)
    return rec


Read = WrapValidator(_keeps_layout)
Figure = Number | None  # a figure as written: an int or a float, or None where not measured


@dataclass
class MemoryRecord(DictRecord):
    """Memory over a case (harness.measure.memory.MemorySampler), MiB: host RSS before and at its peak (and where
    the peak came from), the GPU's figures where sampled, and the one `gpu_source` names is the case's
    gpu_peak_mb."""

    __pydantic_config__ = RECORD_CONFIG

    covers: Text | None = None  # what the figures cover (activation, warm-up, timed loop ...)
    host_rss_before_mb: Figure = None
    host_rss_peak_mb: Figure = None
    host_delta_mb: Figure = None
    host_peak_source: Text | None = None  # "vmhwm" (the kernel's peak) or "sampled_rss"
    gpu_process_peak_mb: Figure = None
    gpu_device_used_peak_mb: Figure = None
    gpu_device_used_before_mb: Figure = None
    gpu_problem: Text | None = None
    torch_max_allocated_mb: Figure = None
    torch_max_reserved_mb: Figure = None
    gpu_source: Text | None = None  # nvml_process | torch_max_reserved | nvml_device_delta; None: no GPU figure
    sampler: Object | None = None  # how the sampler ran: thread, period_ms, samples, mean_sample_us, busy_fraction


# a statistics dict as LatencyStats.as_dict() writes it: numbers (within +-MAX_FIGURE), flags, or None
StatsDict = Annotated[dict[Text, Annotated[bool, Strict()] | Number | None], Strict()]


@dataclass
class EndToEndRecord(DictRecord):
    """raw input -> pre-processing -> the runtime -> post-processing, timed (harness.measure.end_to_end): the raw
    samples and their statistics, and each step's median with its 95% interval (None: unbounded)."""

    __pydantic_config__ = RECORD_CONFIG

    steps: Text | Texts = ""
    samples_ns: Samples = field(default_factory=list)
    warmup_iters: Count | None = None
    latency: StatsDict = field(default_factory=dict)  # LatencyStats.as_dict(): every value a number or a flag
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
class GenerationStats(DictRecord):
    """Statistics of one kind of generation sample (harness.results.stats.summary_ms), ms; `n` samples."""

    __pydantic_config__ = RECORD_CONFIG

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
class TokenAgreement(DictRecord):
    """A generation against the reference's (harness.workloads.generate.metrics.token_agreement) and the first
    step's logits against the reference's (an AccuracyResult)."""

    __pydantic_config__ = RECORD_CONFIG

    reference: Text | None = None
    first_step_logits: Object | None = None  # AccuracyResult.as_dict()
    exact_match_rate: Share | None = None
    first_divergence: Count | None = None
    first_divergence_per_sequence: Annotated[list[Count | None], Strict()] = field(default_factory=list)
    sequences_identical: Count | None = None
    sequences: Count | None = None
    tokens: Annotated[list[Any], Strict()] = field(default_factory=list)
    reference_tokens: Annotated[list[Any], Strict()] = field(default_factory=list)


Stats = Annotated[GenerationStats, Read]


@dataclass
class GenerationRecord(DictRecord):
    """A generation case's figures with their raw samples (harness.workloads.generate.metrics.summarize): TTFT
    (one per generation), decode steps, end to end, tokens/s, decode latency over context length, and its
    agreement with the reference (`conformance`). The raw samples are checked by the reader
    (schema._check_generation), so they are declared as stored."""

    __pydantic_config__ = RECORD_CONFIG

    batch: Count | None = None
    prompt_len: Count | None = None
    new_tokens: Count | None = None
    generations: Count | None = None
    ttft_ns: Any = None
    decode_ns: Any = None
    e2e_ns: Any = None
    ttft: Stats | None = None
    tpot: Stats | None = None
    e2e: Stats | None = None
    itl: Object | None = None  # a histogram of the inter-token latencies: edges_ms, counts
    tokens_per_s: Amount | None = None
    decode_tokens_per_s: Amount | None = None
    context_p50_ms: Annotated[list[Annotated[list[Number], Strict()]], Strict()] = field(default_factory=list)
    conformance: Annotated[TokenAgreement, Read] | None = None
    kv_cache_mb: Figure = None

    def stat(self, what: str) -> GenerationStats:
        """The statistics of `what` (ttft, tpot, e2e); empty where not measured."""
        s = getattr(self, what)
        return s if isinstance(s, GenerationStats) else GenerationStats()


Memory = Annotated[MemoryRecord, Read]
EndToEnd = Annotated[EndToEndRecord, Read]
Generation = Annotated[GenerationRecord, Read]


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
class LocalizationFinding(DictRecord):
    """A tensor of the FP32 graph whose low-precision counterpart is over tolerance (harness.accuracy.localize)."""

    __pydantic_config__ = RECORD_CONFIG

    node: Text | None = None
    op_type: Text | None = None
    tensor: Text | None = None
    max_abs: Distance = None
    p99_abs: Distance = None
    rel_l2: Distance = None
    cosine: Cosine = None
    nonfinite: Count | None = None


@dataclass
class LocalizationRecord(DictRecord):
    """Where the drift starts (harness.accuracy.localize, a forward case's localisation step): what triggered it,
    the tolerance, the tensors compared and skipped, the first ones over tolerance in topological order, and
    why it stopped early (`truncated`) or could not run (`error`)."""

    __pydantic_config__ = RECORD_CONFIG

    trigger: Text | None = None  # "failure" (the drift failed) or "request" (--localize)
    tolerance: Object | None = None  # max_rel_l2, min_cosine
    checked: Count | None = None
    skipped: Count | None = None
    first_bad: Annotated[list[Annotated[LocalizationFinding, Read]], Strict()] = field(default_factory=list)
    truncated: Text | None = None
    error: Text | None = None


Localization = Annotated[LocalizationRecord, Read]
