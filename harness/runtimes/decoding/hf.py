"""Reading a Hugging Face causal LM out of a model's torch module: the module and its cache layout."""

from __future__ import annotations

from typing import Any

from harness.errors import UnsupportedModelError
from harness.model import ModelSpec


def causal_lm(spec: ModelSpec) -> Any:
    """The Hugging Face causal LM inside the model's torch module (the module itself, or the one submodule
    that is one: the zoo wraps it to export a cache-free forward). UnsupportedModelError when there is none."""
    if spec.build is None:
        raise UnsupportedModelError(f"model {spec.name!r} is ONNX-only: the generation workload needs its "
                                    "PyTorch causal LM (a Hugging Face *ForCausalLM)")
    module = spec.build().eval()
    for m in module.modules():
        if hasattr(m, "get_output_embeddings") and hasattr(m, "config") and callable(getattr(m, "generate", None)):
            return m
    raise UnsupportedModelError(f"model {spec.name!r} is not a Hugging Face causal LM (no module with "
                                "generate() and a config): the generation workload needs one")


def cache_layout(lm: Any) -> tuple[int, int, int]:
    """(layers, key/value heads, head dim) of a Hugging Face decoder's cache."""
    hf = lm.config  # the model's transformers config (optional fields differ between architectures)
    heads = hf.num_attention_heads
    kv_heads = getattr(hf, "num_key_value_heads", None) or heads
    head_dim = getattr(hf, "head_dim", None) or hf.hidden_size // heads
    return int(hf.num_hidden_layers), int(kv_heads), int(head_dim)
