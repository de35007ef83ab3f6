"""`bert-mini`: a BERT encoder (transformers BertConfig/BertModel, seeded random init, 4 layers x 256)."""

from __future__ import annotations


from harness.model import ModelSpec
from harness_zoo._text import encoder_io, text_pipeline
from harness.precision import Precision, Tolerance

# google/bert_uncased_L-4_H-256_A-4 ("BERT-mini", Turc et al. 2019) sizes, BERT's WordPiece vocabulary.
CONFIG = {"vocab_size": 30522, "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4,
          "intermediate_size": 1024, "max_position_embeddings": 512, "seed": 0,
          "cls_id": 101, "sep_id": 102, "pad_id": 0}


def build():
    import torch
    from torch import nn
    from transformers import BertConfig, BertModel

    class BertEncoder(nn.Module):
        """Returns plain tensors (no ModelOutput), so every exporter and runtime names the same outputs."""

        def __init__(self) -> None:
            super().__init__()
            cfg = BertConfig(**{k: v for k, v in CONFIG.items() if k not in ("seed", "cls_id", "sep_id",
                                                                               "pad_id")},
                             hidden_act="gelu", pad_token_id=CONFIG["pad_id"], attn_implementation="eager")
            self.bert = BertModel(cfg, add_pooling_layer=True)

        def forward(self, input_ids, attention_mask):
            out = self.bert(input_ids=input_ids, attention_mask=attention_mask, return_dict=True)
            return out.last_hidden_state, out.pooler_output

    torch.manual_seed(CONFIG["seed"])
    return BertEncoder().eval()


INPUTS, make_feed = encoder_io(CONFIG)


BERT_MINI = ModelSpec(
    name="bert-mini",
    build=build,
    inputs=INPUTS,
    outputs=("last_hidden_state", "pooler_output"),
    make_feed=make_feed,
    pipeline=lambda: text_pipeline("last_hidden_state"),
    task="embedding",
    # Hidden states of padded positions are computed but meaningless; elementwise FP32 bounds still hold.
    # Reduced precisions: LayerNorm and softmax amplify rounding, so allow a looser rel_l2 than the default.
    tolerances={Precision.FP16: Tolerance(max_rel_l2=3e-2, min_cosine=0.999),
                Precision.INT8: Tolerance(max_rel_l2=0.25, min_cosine=0.97)},
    config=CONFIG,
    tags=frozenset({"text", "transformer", "encoder"}),
    description="BERT encoder, 4 layers x 256 hidden, 4 heads, vocab 30522 (11.2M parameters), random init",
)
