"""`resnet18`: the ResNet-18 architecture (He et al. 2015) in plain torch (torchvision is not available)."""

from __future__ import annotations

from harness.model import BATCH, ModelSpec, TensorSpec

CONFIG = {"layers": (2, 2, 2, 2), "width": 64, "classes": 1000, "image": 224, "seed": 0}


def build():
    import torch
    from torch import nn

    class BasicBlock(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = None
            if stride != 1 or cin != cout:
                self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            identity = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return self.relu(out + identity)

    class ResNet(nn.Module):
        def __init__(self, layers: tuple[int, ...], width: int, classes: int) -> None:
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width),
                                      nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1))
            blocks, cin = [], width
            for i, n in enumerate(layers):
                cout = width * 2**i
                for j in range(n):
                    blocks.append(BasicBlock(cin, cout, 2 if (j == 0 and i > 0) else 1))
                    cin = cout
            self.blocks = nn.Sequential(*blocks)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(cin, classes)
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

        def forward(self, x):
            x = self.blocks(self.stem(x))
            return self.fc(torch.flatten(self.pool(x), 1))

    torch.manual_seed(CONFIG["seed"])
    return ResNet(CONFIG["layers"], CONFIG["width"], CONFIG["classes"]).eval()


RESNET18 = ModelSpec(
    name="resnet18",
    build=build,
    inputs=(TensorSpec("x", (BATCH, 3, CONFIG["image"], CONFIG["image"])),),
    outputs=("logits",),
    task="classification",
    config=CONFIG,
    tags=frozenset({"quick", "vision"}),
    description="ResNet-18 (11.7M parameters), 3x224x224 input, random init",
)
