"""Decoder: the face of a runtime that can step a causal LM with its KV cache (Runtime.decoder())."""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np


class Decoder(Protocol):
    """A causal LM with its KV cache, one per runtime x precision (a workload drives it).

    prefill(prompt int64 [batch, prompt]) -> logits of the last position [batch, vocab] (the cache now holds
    the prompt); step(tokens int64 [batch]) -> logits [batch, vocab] for those tokens (the cache grows by
    one). Both return host arrays: the caller picks the next token on the host, as a user's loop does."""

    recipe: str

    def prefill(self, prompt: np.ndarray) -> np.ndarray: ...

    def step(self, tokens: np.ndarray) -> np.ndarray: ...

    def details(self) -> dict[str, Any]: ...

    def close(self) -> None: ...
