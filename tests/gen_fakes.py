"""Fake causal LMs for the generation workload's tests: a cost model on a fake clock, and a runtime whose
greedy tokens leave the reference's at a known step."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from harness.model import BATCH, SEQ, ModelSpec, TensorSpec, register_model
from harness.runtimes import Runtime, register_runtime

VOCAB = 50


def _no_module() -> None:
    raise RuntimeError("fake LM: no torch module")


FAKE_LM = register_model(ModelSpec(
    name="fake-lm", build=_no_module, inputs=(TensorSpec("input_ids", (BATCH, SEQ), "int64", 0, VOCAB),),
    outputs=("logits",), task="lm", reference_runtime="fake-gen", tags=frozenset({"fake"}),
), replace=True)


class FakeClock:
    """Nanoseconds that pass only when a fake decoder says its work took them."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


class FakeDecoder:
    """Token t+1 = (token t + context + 3) % VOCAB as one-hot logits, from `diverge_at` on (0-based
    output position) shifted by one (so the gap grows by one a step and never closes within VOCAB steps). Cost on `clock`: prefill = prefill_ns * prompt tokens x batch, a step =
    step_ns + ctx_ns * context length (tokens in the cache before the step)."""

    recipe = "fp32"
    kv_bytes_per_token = 1024

    def __init__(self, clock: FakeClock | None = None, prefill_ns: int = 1000, step_ns: int = 50_000,
                 ctx_ns: int = 100, diverge_at: int | None = None) -> None:
        self.clock, self.prefill_ns, self.step_ns, self.ctx_ns = clock, prefill_ns, step_ns, ctx_ns
        self.diverge_at = diverge_at
        self.ctx = self.pos = 0

    def _logits(self, prev: np.ndarray) -> np.ndarray:
        nxt = (prev + self.ctx + 3) % VOCAB
        if self.diverge_at is not None and self.pos >= self.diverge_at:
            nxt = (nxt + 1) % VOCAB
        out = np.zeros((prev.shape[0], VOCAB), np.float32)
        out[np.arange(prev.shape[0]), nxt] = 1.0
        self.pos += 1
        return out

    def prefill(self, prompt: np.ndarray) -> np.ndarray:
        if self.clock is not None:
            self.clock.now += self.prefill_ns * prompt.size
        self.ctx, self.pos = prompt.shape[1], 0
        return self._logits(prompt[:, -1])

    def step(self, tokens: np.ndarray) -> np.ndarray:
        if self.clock is not None:
            self.clock.now += self.step_ns + self.ctx_ns * self.ctx
        self.ctx += 1
        return self._logits(tokens)

    def details(self) -> dict[str, Any]:
        return {"fake": True}

    def close(self) -> None:
        pass


class FakeGen(Runtime):
    """A runtime that generates (with FakeDecoder) and has no forward path."""

    name: ClassVar[str] = "fake-gen"
    decodes: ClassVar[bool] = True
    diverge_at: ClassVar[int | None] = None

    def _activate(self) -> None:
        raise AssertionError("the generation workload never activates the forward path")

    def _infer(self, prepared: Any) -> dict[str, np.ndarray]:
        raise AssertionError("no forward path")

    def decoder(self) -> FakeDecoder:
        return FakeDecoder(diverge_at=self.diverge_at)


class FakeGenDiverges(FakeGen):
    name: ClassVar[str] = "fake-gen-diverges"
    diverge_at: ClassVar[int | None] = 5


class FakeNoGen(FakeGen):
    name: ClassVar[str] = "fake-no-gen"
    decodes: ClassVar[bool] = False


for _cls in (FakeGen, FakeGenDiverges, FakeNoGen):
    register_runtime(_cls, replace=True)
