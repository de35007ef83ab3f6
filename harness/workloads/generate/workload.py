"""The generation workload: a case is prompt, warm-up, timed greedy generations, reference tokens, drift."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.accuracy import compare
from harness.artifacts.cache import set_active_cache_dir
from harness.config import RunConfig
from harness.data import case_feed, feed_digest
from harness.errors import UnsupportedModelError
from harness.matrix import case_ids
from harness.measure.memory import MemoryReport, MemorySampler
from harness.measure.timer import Timer
from harness.model import ModelSpec, get_model
from harness.precision import Precision
from harness.results.schema import CaseId, CaseResult, RunResults
from harness.results.stats import latency_stats, throughput_sps
from harness.runtimes import Availability, Runtime, get_runtime
from harness.runtimes.decoding.base import Decoder
from harness.workloads.base import PhaseCallback, WorkerState, Workload
from harness.workloads.common import check_case, ensure_user_models, runtime_options
from harness.workloads.generate.loop import Clock, Generation, greedy_generate
from harness.workloads.generate.metrics import summarize, token_agreement

MIN_GENERATIONS = 3
# (model, fingerprint, batch, prompt length, new tokens, prompt digest, threads) -> (tokens, first logits) of
# the reference
_REFERENCES: dict[tuple[Any, ...], tuple[np.ndarray, np.ndarray]] = {}


def prompt_ids(spec: ModelSpec, batch: int, prompt_len: int, config: RunConfig) -> np.ndarray:
    """The prompt: the case's feed at (batch, seq = prompt_len) under the run's input options (`--feeds`
    rows, `--input-value`/`--input-range`, else the model's seeded feed), its integer token input."""
    feed, _ = case_feed(spec, {"batch": batch, "seq": prompt_len}, config.inputs)
    ints = [t.name for t in spec.inputs if "int" in t.dtype]
    if not ints:
        raise UnsupportedModelError(f"model {spec.name!r} has no integer token input to prompt with")
    return np.ascontiguousarray(feed[ints[0]], dtype=np.int64)


def timed_generations(decoder: Decoder, prompt: np.ndarray, new_tokens: int, min_time_s: float, max_runs: int,
                      clock: Clock = time.perf_counter_ns) -> list[Generation]:
    """At least MIN_GENERATIONS timed generations, more until `min_time_s` has passed, at most `max_runs`
    (never fewer than MIN_GENERATIONS)."""
    runs: list[Generation] = []
    start = clock()
    cap = max(MIN_GENERATIONS, max_runs)
    while len(runs) < MIN_GENERATIONS or (clock() - start < min_time_s * 1e9 and len(runs) < cap):
        runs.append(greedy_generate(decoder, prompt, new_tokens, clock))
    return runs


def reference_generation(spec: ModelSpec, runtime: Any, prompt: np.ndarray, new_tokens: int,
                         key: tuple[Any, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Greedy tokens and first-step logits of the model's reference runtime at FP32, once per key."""
    if key not in _REFERENCES:
        if any(k[0] != key[0] for k in _REFERENCES):
            _REFERENCES.clear()  # one model's references at a time
        ref = get_runtime(spec.reference)(spec, Precision.FP32, runtime.options).decoder()
        try:
            g = greedy_generate(ref, prompt, new_tokens, keep_logits=True)
        finally:
            ref.close()
        assert g.first_logits is not None
        _REFERENCES[key] = (g.tokens, g.first_logits)
    return _REFERENCES[key]


@dataclass(frozen=True)
class _Generations:
    """What the decoder did for a case: its warm-up generation (first logits kept), the timed generations, the
    decoder's details and precision recipe, its KV bytes per token, the build time and the memory it all took."""

    first: Generation
    runs: list[Generation]
    details: dict[str, Any]
    recipe: str
    kv_per_token: int | None
    setup_s: float
    memory: MemoryReport


def _generate(runtime: Any, prompt: np.ndarray, new_tokens: int, config: RunConfig, on_phase: Any,
              clock: Clock) -> _Generations:
    """Build the runtime's decoder, warm it with one generation, time generations, close it; memory sampled over
    all of it."""
    cls = type(runtime)
    sampler = MemorySampler(gpu="nvml" in cls.memory_sources, torch_allocator="torch" in cls.memory_sources).start()
    try:
        on_phase("load")
        t0 = time.perf_counter()
        decoder = runtime.decoder()
        setup_s = time.perf_counter() - t0
        try:
            on_phase("warmup")
            first = greedy_generate(decoder, prompt, new_tokens, clock, keep_logits=True)
            on_phase("run")
            runs = timed_generations(decoder, prompt, new_tokens, config.measure.timing.min_time_s,
                                     config.measure.timing.min_iters, clock)
            details = decoder.details()
            recipe = decoder.recipe
            kv_per_token = getattr(decoder, "kv_bytes_per_token", None)
        finally:
            decoder.close()
        memory = sampler.stop("decoder build or export, warm-up generation and timed generations")
    finally:
        sampler.close()
    return _Generations(first, runs, details, recipe, kv_per_token, setup_s, memory)


def run_generation_case(case: CaseId, spec: ModelSpec, runtime: Any, config: RunConfig,
                        on_phase: Any = lambda phase: None, clock: Clock = time.perf_counter_ns) -> CaseResult:
    """Measure `case` (seq = prompt length, gen = tokens to generate) on `runtime` (a Runtime, not activated:
    its `decoder()` builds what it runs). Raises on failure; the case runner turns that into the case's row."""
    if not type(runtime).decodes:
        from harness.runtimes import runtime_names

        can = ", ".join(n for n in runtime_names() if get_runtime(n).decodes)
        return CaseResult(case, "skipped", reason=f"{runtime.name} cannot run the generation workload (no "
                          f"KV-cache decode loop in its adapter; runtimes that can: {can})",
                          model_fingerprint=spec.fingerprint())
    batch, prompt_len, new_tokens = case.batch, int(case.seq or 1), int(case.gen or 1)
    prompt = prompt_ids(spec, batch, prompt_len, config)
    g = _generate(runtime, prompt, new_tokens, config, on_phase, clock)
    first, runs, details, memory = g.first, g.runs, g.details, g.memory
    on_phase("accuracy")
    digest = feed_digest({"input_ids": prompt})
    key = (spec.name, spec.fingerprint(), batch, prompt_len, new_tokens, digest,
           config.measure.threads)
    own = runtime.name == spec.reference and runtime.precision is Precision.FP32
    ref_tokens, ref_logits = reference_generation(spec, runtime, prompt, new_tokens, key)
    tolerance = spec.tolerance(runtime.precision, config.accuracy.tolerance_override(runtime.precision))
    assert first.first_logits is not None
    accuracy = compare({"logits": ref_logits}, {"logits": first.first_logits}, tolerance)
    generation = summarize(runs, batch, prompt_len)
    generation.conformance = token_agreement(first.tokens, ref_tokens, f"{spec.reference} fp32", accuracy.as_dict())
    if g.kv_per_token:
        generation.kv_cache_mb = batch * (prompt_len + new_tokens) * g.kv_per_token / 2**20
    samples = [r.e2e_ns for r in runs]
    stats = latency_stats(samples, config.measure.noise_cv)
    audit: dict[str, Any] = {}
    if config.accuracy.audit:  # TEST06's checks (harness.workloads.forward.audit.generation_audit)
        from harness.workloads.forward.audit import generation_audit

        audit = {"audit": generation_audit(first, runs, batch, new_tokens)}
    failed_audit = [f"audit failed: {c['name']}: {c['detail']}" for c in (audit.get("audit") or {}).get(
        "checks", []) if c["passed"] is False]
    reasons = failed_audit + ([] if accuracy else [accuracy.message])
    return CaseResult(
        case, "passed" if accuracy and not failed_audit else "failed", reason="; ".join(reasons),
        samples_ns=samples, warmup_iters=1, timing_scope="host_to_host", scenario="generation",
        latency=stats, throughput_sps=throughput_sps(batch, stats.p50_ms) or None,
        accuracy=accuracy.as_dict(), reference_runtime=spec.reference, setup_s=g.setup_s,
        artifact=details.get("artifact"), artifact_cache_hit=details.get("artifact_cache_hit"),
        feed_sha256=digest, model_fingerprint=spec.fingerprint(),
        details={**details, "threads": config.measure.threads, "workload": "generate", **audit},
        host_peak_mb=memory.host_peak_mb, gpu_peak_mb=memory.gpu_peak_mb, memory=memory.figures,
        precision_recipe=g.recipe, is_reference=own, generation=generation,
    )


def context_refusal(case: CaseId, spec: ModelSpec) -> CaseResult | None:
    """The row of a case whose prompt and new tokens do not fit the model's context: refused before anything is
    built (--output-lens 1000000 on a 4,096-token model ran until the case timeout)."""
    context = spec.context_length
    positions = int(case.seq or 1) + int(case.gen or 1)
    if context is None or positions <= context:
        return None
    return CaseResult(case, "error", phase="load", model_fingerprint=spec.fingerprint(),
                      reason=f"prompt {case.seq} + {case.gen} new tokens = {positions} positions exceed "
                             f"{spec.name}'s context of {context} (its config's max_position_embeddings): "
                             f"lower --prompt-lens or --output-lens")


class GenerateWorkload(Workload):
    """Causal LMs x runtimes x precisions x batch sizes x prompt lengths x output lengths: greedy generation
    with the runtime's KV-cache decoder (Runtime.decoder()), TTFT and each decode step timed."""

    name = "generate"
    title = "LLM generation"
    option_groups = ("generation",)
    sequence_field = "prompt_lens"  # the prompts are this workload's sequence axis

    def default_models(self, quick: bool) -> tuple[str, ...]:
        """The causal LMs of the zoo (tagged decoder), with or without --quick."""
        from harness.model import all_models

        return tuple(s.name for s in all_models() if "decoder" in s.tags and "user" not in s.tags)

    def cases(self, config: RunConfig) -> list[CaseId]:
        m, g = config.matrix, config.generation
        return case_ids(m.models, m.runtimes, m.precisions, m.batch_sizes, g.prompt_lens, g.output_lens)

    def worker_state(self, timer: Timer, defer_blocks: bool) -> WorkerState:
        return GenerateState()

    def terminal_lines(self, run: RunResults) -> list[str]:
        from harness.report.generation import generation_lines

        return generation_lines(run)


class GenerateState(WorkerState):
    """A worker's generation cases: each builds its decoder (no activation is kept between cases)."""

    def __init__(self) -> None:
        self._availability: dict[type[Runtime], Availability] = {}

    def run(self, case: CaseId, config: RunConfig, payload: Any, on_phase: PhaseCallback) -> CaseResult:
        ensure_user_models(config)
        spec = get_model(case.model)
        set_active_cache_dir(config.artifacts.cache_dir)
        cls = get_runtime(case.runtime)
        refused = check_case(case, spec, cls, config, self._availability) or context_refusal(case, spec)
        if refused is not None:
            return refused
        return run_generation_case(case, spec, cls(spec, case.precision, runtime_options(spec, config)), config,
                                   on_phase)


GENERATE = GenerateWorkload()
