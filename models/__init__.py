"""The model zoo (installed as `harness_zoo`): ModelSpec definitions only, found via the harness.models entry point."""

from __future__ import annotations

from harness.model import ModelSpec


def model_specs() -> list[ModelSpec]:
    from harness_zoo.mlp import MLP
    from harness_zoo.resnet import RESNET18

    return [MLP, RESNET18]
