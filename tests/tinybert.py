"""A tiny BERT encoder (transformers BertConfig, 2 layers, hidden 32) for quantisation tests: MatMul, Softmax,
LayerNorm, GELU, attention masks, as in real transformers, exported in seconds."""

from __future__ import annotations

import numpy as np

from harness.model import BATCH, SEQ, ModelSpec, TensorSpec

CONFIG = {"vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
          "intermediate_size": 64, "max_position_embeddings": 128, "seed": 0}


def build():
    import torch
    from transformers import BertConfig, BertModel

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            cfg = {k: v for k, v in CONFIG.items() if k != "seed"}
            self.bert = BertModel(BertConfig(**cfg, attn_implementation="eager"), add_pooling_layer=False)

        def forward(self, input_ids, attention_mask):
            return self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    torch.manual_seed(CONFIG["seed"])
    return Encoder().eval()


def make_feed(dims, seed):
    rng = np.random.default_rng(seed)
    b, s = dims["batch"], dims["seq"]
    return {"input_ids": rng.integers(1, CONFIG["vocab_size"], size=(b, s)).astype(np.int64),
            "attention_mask": np.ones((b, s), dtype=np.int64)}


TINY_BERT = ModelSpec(
    name="tiny-bert-test", build=build, task="embedding", config=CONFIG, make_feed=make_feed,
    inputs=(TensorSpec("input_ids", (BATCH, SEQ), "int64", 1, CONFIG["vocab_size"]),
            TensorSpec("attention_mask", (BATCH, SEQ), "int64", 1, 2)),
    outputs=("last_hidden_state",), tags=frozenset({"test"}),
)
