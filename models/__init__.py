"""The model zoo (installed as `harness_zoo`): ModelSpec definitions only, found via the harness.models entry point."""

from __future__ import annotations

from harness.model import ModelSpec


def model_specs() -> list[ModelSpec]:
    from harness_zoo.bert_mini import BERT_MINI
    from harness_zoo.deepseek_tiny import DEEPSEEK_TINY
    from harness_zoo.digits_cnn import DIGITS_CNN
    from harness_zoo.minilm import MINILM
    from harness_zoo.mlp import MLP
    from harness_zoo.resnet import RESNET18

    return [MLP, RESNET18, BERT_MINI, DEEPSEEK_TINY, DIGITS_CNN, MINILM]
