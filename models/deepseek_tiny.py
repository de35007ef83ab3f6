"""`deepseek-tiny`: DeepSeek-LLM-7B's architecture (the Llama layout) scaled to 2 layers x 128 hidden.

Kept from deepseek-ai/deepseek-llm-7b-base's config: vocabulary 102400 (BOS 100000, EOS 100001), RMSNorm
eps 1e-6, rotary embeddings with theta 10000, SwiGLU MLP (intermediate/hidden = 11008/4096), multi-head
attention (no grouped KV), untied lm_head. Scaled down: 2 layers, hidden 128, 4 heads of 32.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.model import BATCH, SEQ, ModelSpec, TensorSpec
from harness.precision import Precision, Tolerance

CONFIG = {"vocab_size": 102400, "hidden_size": 128, "intermediate_size": 344, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 4, "max_position_embeddings": 4096,
          "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "hidden_act": "silu", "tie_word_embeddings": False,
          "bos_token_id": 100000, "eos_token_id": 100001, "initializer_range": 0.02, "seed": 0}


def build():
    import torch
    from torch import nn
    from transformers import LlamaConfig, LlamaForCausalLM

    class CausalLM(nn.Module):
        """input_ids -> logits [batch, seq, vocab]; no KV cache (a prefill pass, as the seed exports it)."""

        def __init__(self) -> None:
            super().__init__()
            kwargs = {k: v for k, v in CONFIG.items() if k not in ("seed", "rope_theta")}
            cfg = LlamaConfig(**kwargs, use_cache=False, attn_implementation="eager",
                              rope_parameters={"rope_type": "default", "rope_theta": CONFIG["rope_theta"]})
            self.lm = LlamaForCausalLM(cfg)

        def forward(self, input_ids):
            # An explicit all-ones mask, as a serving stack passes one; without it transformers probes the
            # position ids for packed sequences (aten::diff), which the legacy exporter cannot convert.
            mask = torch.ones_like(input_ids)
            return self.lm(input_ids=input_ids, attention_mask=mask, use_cache=False, return_dict=True).logits

    torch.manual_seed(CONFIG["seed"])
    return CausalLM().eval()


def make_feed(dims: Mapping[str, int], seed: int) -> dict[str, Any]:
    from harness_zoo._text import decoder_feed

    return decoder_feed(dims, seed, vocab=CONFIG["vocab_size"], bos_id=CONFIG["bos_token_id"])


DEEPSEEK_TINY = ModelSpec(
    name="deepseek-tiny",
    build=build,
    inputs=(TensorSpec("input_ids", (BATCH, SEQ), "int64", 0, CONFIG["vocab_size"]),),
    outputs=("logits",),
    make_feed=make_feed,
    task="lm",
    # Logits over 102400 tokens: judge by direction and next-token agreement, not elementwise at FP16.
    tolerances={Precision.FP16: Tolerance(max_rel_l2=3e-2, min_cosine=0.999),
                Precision.INT8: Tolerance(max_rel_l2=0.3, min_cosine=0.95)},
    config=CONFIG,
    tags=frozenset({"text", "transformer", "llm", "decoder"}),
    description="DeepSeek-LLM layout (Llama: RMSNorm, RoPE, SwiGLU), 2 layers x 128 hidden, vocab 102400 "
                "(26.6M parameters, 26.2M of them embeddings and lm_head), random init",
)
