"""CaseRunner: one case end to end (feed, reference, activation, warm-up, timed loop, drift) in this process."""

from __future__ import annotations

import time
from pathlib import Path
import traceback
from collections.abc import Callable
from typing import Any

from harness.accuracy import compare
from harness.artifacts.cache import ArtifactCache
from harness.data import feed_digest, make_feed
from harness.errors import HarnessError
from harness.measure.stats import latency_stats, throughput_sps
from harness.measure.timer import Timer
from harness.model import ModelSpec, get_model
from harness.model_files import register_user_model
from harness.precision import Precision
from harness.results.schema import CaseId, CaseResult
from harness.runtimes import Availability, Runtime, RuntimeOptions, get_runtime

PhaseCallback = Callable[[str], None]


class CaseRunner:
    """Runs cases one after another, keeping what later cases can reuse.

    - one runtime activation per (model, runtime, precision): cases differing only in shape reuse it;
    - reference outputs per (model, shape, seed), from the model's FP32 reference runtime;
    - availability per runtime class, probed once per process.
    """

    def __init__(self, timer: Timer | None = None) -> None:
        self.timer = timer or Timer()
        self._active: tuple[tuple[Any, ...], Runtime] | None = None
        self._reference_runtime: tuple[tuple[Any, ...], Runtime] | None = None
        self._references: dict[tuple[Any, ...], dict[str, Any]] = {}
        self._availability: dict[type[Runtime], Availability] = {}

    def run(self, case: CaseId, config: Any, on_phase: PhaseCallback = lambda phase: None) -> CaseResult:
        t0 = time.perf_counter()
        result = self._run(case, config, on_phase)
        result.duration_s = round(time.perf_counter() - t0, 3)
        return result

    def _run(self, case: CaseId, config: Any, on_phase: PhaseCallback) -> CaseResult:
        phase = "load"
        try:
            ensure_user_models(config)
            spec = get_model(case.model)
            if spec.problem:
                return CaseResult(case, "error", reason=spec.problem, phase="load")
            cls = get_runtime(case.runtime)
            precision = Precision(case.precision)
            if cls not in self._availability:
                self._availability[cls] = cls.availability()
            for verdict in (self._availability[cls], cls.supports(spec, precision)):
                if not verdict:
                    return CaseResult(case, "skipped", reason=verdict.reason, model_fingerprint=spec.fingerprint())
            options = RuntimeOptions(config.threads, ArtifactCache(config.cache_dir), config.exporter,
                                     compile_mode=getattr(config, "compile_mode", "default"))
            on_phase(phase)
            feed = make_feed(spec, case.dims, config.seed)
            runtime, reused = self._activate(case, spec, cls, precision, options)
            phase = "warmup"
            on_phase(phase)
            outputs = runtime.infer(feed)
            call = runtime.bind(feed)

            def measuring() -> None:
                nonlocal phase
                phase = "run"
                on_phase(phase)

            timed = self.timer.run(call, config.timing, runtime.synchronize, on_measure=measuring)
            phase = "accuracy"
            on_phase(phase)
            reference = self._reference(spec, case, feed, options, runtime, outputs)
            accuracy = compare(reference, outputs, spec.tolerance(precision),
                               classification=spec.task == "classification")
            stats = latency_stats(timed.samples_ns, config.noise_cv)
            return CaseResult(
                case, "passed" if accuracy else "failed", reason="" if accuracy else accuracy.message,
                samples_ns=list(timed.samples_ns), warmup_iters=timed.warmup_iters,
                timing_scope=runtime.timing_scope, scenario="single-stream" if case.batch == 1 else "offline",
                latency=stats.as_dict(), throughput_sps=throughput_sps(case.batch, stats.mean_ms),
                accuracy=accuracy.as_dict(), reference_runtime=spec.reference,
                setup_s=runtime.setup_s, artifact=str(runtime.artifact_path) if runtime.artifact_path else None,
                artifact_cache_hit=runtime.artifact.cache_hit if runtime.artifact else None,
                feed_sha256=feed_digest(feed), model_fingerprint=spec.fingerprint(),
                details={**runtime.details(), "activation_reused": reused},
            )
        except MemoryError as exc:
            self.close()
            cap = getattr(config, "case_memory_gb", None)
            return CaseResult(case, "oom", reason=f"MemoryError in phase {phase} (memory cap {cap} GiB): {exc}",
                              phase=phase, stderr_tail=_tail(traceback.format_exc()))
        except HarnessError as exc:
            self._drop_active()
            return CaseResult(case, "error", reason=str(exc), phase=phase)
        except Exception as exc:  # noqa: BLE001 - a broken case is a row, never the end of the run
            self._drop_active()
            return CaseResult(case, "error", reason=f"{type(exc).__name__} in phase {phase}: {exc}",
                              phase=phase, stderr_tail=_tail(traceback.format_exc()))

    def _activate(self, case: CaseId, spec: ModelSpec, cls: type[Runtime], precision: Precision,
                  options: RuntimeOptions) -> tuple[Runtime, bool]:
        key = (*case.activation_key, options.threads, str(options.cache.root), options.exporter)
        if self._active is not None and self._active[0] == key:
            return self._active[1], True
        self._drop_active()
        runtime = cls(spec, precision, options)
        runtime.__enter__()
        self._active = (key, runtime)
        return runtime, False

    def _reference(self, spec: ModelSpec, case: CaseId, feed: dict[str, Any], options: RuntimeOptions,
                   runtime: Runtime, outputs: dict[str, Any]) -> dict[str, Any]:
        """FP32 outputs of the model's reference runtime on the same feed (computed once per shape)."""
        key = (spec.name, tuple(sorted(case.dims.items())), feed_digest(feed))
        if any(k[0] != spec.name for k in self._references):
            self._references.clear()  # keep one model's references at a time (LM logits are large)
        if key in self._references:
            return self._references[key]
        if runtime.name == spec.reference and runtime.precision is Precision.FP32:
            ref = outputs  # this case *is* the reference
        else:
            rkey = (spec.name, spec.reference, options.threads, str(options.cache.root), options.exporter)
            if self._reference_runtime is None or self._reference_runtime[0] != rkey:
                self._drop_reference()
                ref_cls = get_runtime(spec.reference)
                ref_rt = ref_cls(spec, Precision.FP32, options)
                ref_rt.__enter__()
                self._reference_runtime = (rkey, ref_rt)
            ref = self._reference_runtime[1].infer(feed)
        self._references[key] = ref
        return ref

    def _drop_active(self) -> None:
        if self._active is not None:
            _exit_quietly(self._active[1])
            self._active = None

    def _drop_reference(self) -> None:
        if self._reference_runtime is not None:
            _exit_quietly(self._reference_runtime[1])
            self._reference_runtime = None

    def close(self) -> None:
        self._drop_active()
        self._drop_reference()
        self._references.clear()


def _exit_quietly(runtime: Runtime) -> None:
    """Deactivate a runtime we are discarding; its own errors must not mask the case's outcome."""
    try:
        runtime.__exit__(None, None, None)
    except Exception:  # noqa: BLE001
        pass


def ensure_user_models(config: Any) -> None:
    """Register the run's `--model` files in this process (a worker may not have inherited them)."""
    from harness.model import _MODELS

    for path in getattr(config, "user_models", ()):
        if Path(path).stem not in _MODELS:
            register_user_model(path)


def _tail(text: str, lines: int = 20, chars: int = 4000) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])[-chars:]


class InProcessExecutor:
    """--no-isolation: cases run in the harness's own process (no timeout or memory cap; for debugging)."""

    isolated = False

    def __init__(self) -> None:
        self.runner = CaseRunner()

    def run(self, case: CaseId, config: Any) -> CaseResult:
        return self.runner.run(case, config)

    def close(self) -> None:
        self.runner.close()
