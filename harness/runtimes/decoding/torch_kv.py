"""TorchDecoder: a Hugging Face causal LM stepped with its own KV cache (transformers DynamicCache)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import numpy as np

from harness.errors import UnsupportedModelError
from harness.runtimes.decoding.hf import cache_layout, causal_lm
from harness.model import ModelSpec
from harness.precision import Precision

Quantize = Callable[[Any], tuple[Any, str]]  # module -> (quantised module, recipe)


class TorchDecoder:
    """Eager PyTorch, inference mode: prefill builds a DynamicCache, each step feeds one token per sequence
    and the cache the model returned. fp32; bf16 under torch.autocast; int8 by the `int8` recipe the runtime
    passes (torch-cpu: torch.ao dynamic quantisation of nn.Linear)."""

    def __init__(self, spec: ModelSpec, precision: Precision, threads: int, device: str = "cpu",
                 int8: Quantize | None = None) -> None:
        import torch

        torch.set_num_threads(threads)
        self._torch = torch
        self.device = device
        lm = causal_lm(spec).to(device)
        self._autocast: Any = contextlib.nullcontext
        self.recipe = "fp32"
        if precision is Precision.BF16:
            dev = device.split(":")[0]
            self._autocast = lambda: torch.autocast(dev, dtype=torch.bfloat16)
            self.recipe = f"bf16: torch.autocast({dev}, bfloat16) over the FP32 module"
        elif precision is Precision.INT8 and int8 is not None:
            lm, self.recipe = int8(lm)
        elif precision is not Precision.FP32:
            raise UnsupportedModelError(f"torch generation does not run {precision}")
        self._lm = lm
        self._cache: Any = None
        layers, kv_heads, head_dim = cache_layout(lm)
        # per sequence and context token: keys and values of every layer (bf16 autocast keeps them in bf16)
        self.kv_bytes_per_token = 2 * layers * kv_heads * head_dim * (2 if precision is Precision.BF16 else 4)

    def _forward(self, ids: Any) -> np.ndarray:
        with self._torch.inference_mode(), self._autocast():
            # logits of the last position only, as transformers' generate() asks at prefill
            out = self._lm(input_ids=ids, past_key_values=self._cache, use_cache=True, logits_to_keep=1)
        self._cache = out.past_key_values
        return out.logits[:, -1, :].float().cpu().numpy()

    def prefill(self, prompt: np.ndarray) -> np.ndarray:
        from transformers import DynamicCache

        self._cache = DynamicCache()
        return self._forward(self._torch.from_numpy(np.ascontiguousarray(prompt, dtype=np.int64)).to(self.device))

    def step(self, tokens: np.ndarray) -> np.ndarray:
        ids = self._torch.from_numpy(np.ascontiguousarray(tokens, dtype=np.int64)[:, None]).to(self.device)
        return self._forward(ids)

    def details(self) -> dict[str, Any]:
        return {"torch": self._torch.__version__, "kv_cache": "transformers DynamicCache, grown by the model"}

    def close(self) -> None:
        self._lm = self._cache = None
