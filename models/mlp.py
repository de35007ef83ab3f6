"""`mlp`: a three-layer perceptron classifier (random init, seeded): the smallest real model in the zoo."""

from __future__ import annotations

from harness.model import BATCH, ModelSpec, TensorSpec

CONFIG = {"in_features": 256, "hidden": 512, "classes": 10, "seed": 0}


def build():
    import torch
    from torch import nn

    class MLPNet(nn.Module):
        def __init__(self, cin: int, hidden: int, classes: int) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(cin, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                     nn.Linear(hidden, classes))

        def forward(self, x):  # the argument's name is the ONNX input's name
            return self.net(x)

    torch.manual_seed(CONFIG["seed"])
    return MLPNet(CONFIG["in_features"], CONFIG["hidden"], CONFIG["classes"]).eval()


MLP = ModelSpec(
    name="mlp",
    build=build,
    inputs=(TensorSpec("x", (BATCH, CONFIG["in_features"])),),
    outputs=("logits",),
    task="classification",
    config=CONFIG,
    tags=frozenset({"quick", "tabular"}),
    description="3-layer MLP, 256 -> 512 -> 512 -> 10, ReLU",
)
