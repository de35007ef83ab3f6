"""An example `--model package.module:factory` for the harness: a tiny text classifier.

Run it (from the repository root; any importable module works):

    PYTHONPATH=docs/examples harness run --model my_torch_model:make_model --runtimes torch-cpu,ort-cpu \
        --batch-sizes 1,4 --seq-lens 16,64 --min-time 0.2 --min-iters 5
"""

from __future__ import annotations

import torch
from torch import nn


class TinyTextClassifier(nn.Module):
    """Embedding -> mean over the unmasked tokens -> linear: 2 classes."""

    def __init__(self, vocab: int = 1000, dim: int = 32, classes: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        mask = attention_mask.unsqueeze(-1).to(torch.float32)
        pooled = (self.embed(input_ids) * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        return self.head(pooled)


def make_model():
    """The factory: (module, example_inputs, meta).

    example_inputs: forward's keyword arguments by name (they become the ONNX input names); dim 0 is the
    batch. Integer examples set the range of the generated token ids ([min, max] of the example).
    meta (optional): seq_dims marks the sequence axis per input; outputs names forward's results.
    """
    torch.manual_seed(0)
    model = TinyTextClassifier().eval()
    mask = torch.ones(2, 16, dtype=torch.int64)
    mask[1, 10:] = 0  # the second sentence is padded: masks are fed from {0, 1}
    example = {"input_ids": torch.randint(0, 1000, (2, 16), dtype=torch.int64), "attention_mask": mask}
    return model, example, {"seq_dims": {"input_ids": 1, "attention_mask": 1}, "outputs": ["logits"],
                            "task": "classification"}
