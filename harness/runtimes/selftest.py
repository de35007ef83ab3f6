"""Self-test wrappers for `harness gate-check`: a runtime plus a known busy-wait per inference, by name."""

from __future__ import annotations

import re
import time
from typing import Any

from harness.runtimes.base import Runtime

_NAME = re.compile(r"^(?P<base>.+)\+delay(?P<ns>\d+)ns$")


def slowed_name(base: str, delay_s: float) -> str:
    """`BASE+delayNNNns`: the registered name of `base` slowed by `delay_s` (whole nanoseconds)."""
    return f"{base}+delay{int(round(delay_s * 1e9))}ns"


def slowed_runtime(base: type[Runtime], delay_s: float) -> type[Runtime]:
    """A wrapper of `base` that busy-waits `delay_s` after each inference, named `slowed_name(...)`. Never use it
    for real measurements: it exists to give the gate a known slowdown."""
    delay_ns = int(round(delay_s * 1e9))

    def _infer(self: Runtime, prepared: Any) -> Any:
        out = base._infer(self, prepared)
        self.synchronize()
        end = time.perf_counter_ns() + delay_ns
        while time.perf_counter_ns() < end:  # a busy wait: sleep() is too coarse below a millisecond
            pass
        return out

    return type(f"Slowed{base.__name__}", (base,), {
        "name": slowed_name(base.name, delay_s), "_infer": _infer, "injected_delay_s": delay_ns / 1e9,
        "description": f"SELF-TEST ONLY: {base.name} plus a {delay_ns / 1000:g} us busy wait per inference"})


def resolve(name: str, lookup: Any) -> type[Runtime] | None:
    """The slowed wrapper a name like `ort-cpu+delay1500ns` asks for (built on `lookup(base)`), else None: so a
    worker process resolves the names gate-check's parent made."""
    m = _NAME.match(name)
    if m is None:
        return None
    return slowed_runtime(lookup(m.group("base")), int(m.group("ns")) / 1e9)
