"""Unstructured L1 pruning of the model's torch module (torch.nn.utils.prune), before any export or run."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from harness.precision import Precision
from harness.variants.base import VariantKind

if TYPE_CHECKING:
    from harness.model import ModelSpec


class Prune(VariantKind):
    key = "prune"
    title = ("unstructured L1 pruning of every Conv and Linear weight by a fraction (torch.nn.utils.prune, made "
             "permanent); the drift against the unpruned FP32 reference says what it costs")
    values = "a fraction between 0 and 1 (e.g. 0.3: the 30% smallest weights of each layer set to zero)"

    def parse(self, value: str) -> str:
        try:
            f = float(value.strip())
        except ValueError:
            raise self.bad(value) from None
        if not 0.0 < f < 1.0:
            raise self.bad(value)
        return f"{f:g}"

    def refusal(self, value: str, spec: ModelSpec, precision: Precision) -> str | None:
        if spec.build is None:
            return f"variant prune={value}: model {spec.name!r} has no torch module to prune"
        return super().refusal(value, spec, precision)

    def apply_model(self, value: str, spec: ModelSpec) -> ModelSpec:
        base = spec.build
        assert base is not None  # refused above
        amount = float(value)

        def build() -> Any:
            return l1_unstructured(base(), amount)

        # the fingerprint covers config: the pruned model is a different model from the unpruned one
        return dataclasses.replace(spec, build=build,
                                   config={**spec.config, "variant_prune_l1": amount,
                                           "variant_base_fingerprint": spec.fingerprint()})


def l1_unstructured(module: Any, amount: float) -> Any:
    """Zero the `amount` smallest-magnitude weights of each Conv/Linear layer of `module`, permanently."""
    import torch
    from torch.nn.utils import prune

    for m in module.modules():
        if isinstance(m, (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d, torch.nn.Linear)):
            prune.l1_unstructured(m, "weight", amount=amount)
            prune.remove(m, "weight")
    return module


PRUNE = Prune()
