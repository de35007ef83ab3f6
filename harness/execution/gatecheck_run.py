"""What `harness gate-check` measures with: a case's blocks through CaseRunner, slowed runtimes, a process per run."""

from __future__ import annotations

import multiprocessing as mp
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from harness.errors import HarnessError
from harness.execution.runner import CaseRunner, block_policy
from harness.gating.gatecheck import Measure, RunData
from harness.results.schema import CaseId
from harness.runtimes import Runtime, get_runtime, register_runtime


def slowed_runtime(base: type[Runtime], delay_s: float) -> type[Runtime]:
    """A self-test wrapper of `base` that busy-waits `delay_s` seconds after each inference, registered under
    `BASE+delayNNNus`. Never use it for real measurements: it exists to give the gate a known slowdown."""
    delay_ns = int(round(delay_s * 1e9))
    name = f"{base.name}+delay{delay_ns / 1000:.0f}us"

    def _infer(self: Runtime, prepared: Any) -> Any:
        out = base._infer(self, prepared)
        self.synchronize()
        end = time.perf_counter_ns() + delay_ns
        while time.perf_counter_ns() < end:  # a busy wait: sleep() is too coarse below a millisecond
            pass
        return out

    cls = type(f"Slowed{base.__name__}", (base,), {
        "name": name, "_infer": _infer, "injected_delay_s": delay_s,
        "description": f"SELF-TEST ONLY: {base.name} plus a {delay_ns / 1000:.0f} us busy wait per inference"})
    return register_runtime(cls, replace=True)


def runner_measure(config: Any) -> Measure:
    """Measure one block of a case through a fresh CaseRunner (the same code path as `harness run`), in this
    process; `config.repeats` blocks make a run, so each gets 1/repeats of the minimum time and iterations."""

    def measure(case: CaseId, delay_s: float) -> Sequence[int]:
        if delay_s > 0:
            case = replace(case, runtime=slowed_runtime(get_runtime(case.runtime), delay_s).name)
        runner = CaseRunner()
        try:
            result = runner.run(case, replace(config, repeats=1, timing=block_policy(config.timing, config.repeats)))
        finally:
            runner.close()
        if not result.measured:
            raise HarnessError(f"gate-check: case {case.id} was not measured ({result.status}: {result.reason})")
        return result.samples_ns

    return measure


def in_this_process(fn: Callable[..., RunData], *args: Any) -> RunData:
    """Run `fn(*args)` here (gate_check's default)."""
    return fn(*args)


def in_a_fresh_process(fn: Callable[..., RunData], *args: Any) -> RunData:
    """Run `fn(*args)` in a forked child and return its result: each simulated run gets its own process, as
    each `harness run` does, so process-level states (thread placement, memory layout) vary between runs as
    they do between nightly runs. An error in the child is raised here with its message."""
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)

    def target() -> None:
        try:
            child.send(("ok", fn(*args)))
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            child.send(("error", f"{type(exc).__name__}: {exc}"))
        finally:
            child.close()

    proc = ctx.Process(target=target, name="harness-gate-check-run", daemon=True)
    proc.start()
    child.close()
    try:
        status, value = parent.recv()
    except EOFError:
        proc.join(5)
        raise RuntimeError(f"gate-check: the run's process died (exit status {proc.exitcode})") from None
    finally:
        proc.join(30)
    if status != "ok":
        raise HarnessError(value)
    return value
