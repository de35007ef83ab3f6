"""A Hugging Face causal LM brought as a factory, for `harness run --workload generate --model ...`."""

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def make_lm():
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      use_cache=False, attn_implementation="eager")  # the forward workload: logits only
    example = {"input_ids": torch.randint(0, 1000, (1, 16))}
    return LlamaForCausalLM(cfg), example, {"seq_dims": {"input_ids": 1}, "outputs": ["logits"]}
