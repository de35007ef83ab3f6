"""TfliteFromTorch: convert a ModelSpec's torch module to a fixed-shape .tflite with litert-torch, cached."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.artifacts.cache import Artifact, ArtifactCache
from harness.errors import ModelError
from harness.model import ModelSpec

# Quantisation recipes litert-torch offers for any module (ai-edge-quantizer under the hood).
RECIPES = ("fp32", "int8-dynamic", "fp16-weights")


@dataclass(frozen=True)
class TfliteFromTorch:
    """Lazy build step: litert_torch.convert(module, sample_args, quant_config).export(path).

    shapes: the static shape of every input (a .tflite here is fixed-shape: one artifact per shape).
    recipe: "fp32"; "int8-dynamic" (int8 channel-wise weights, activations quantised on the fly);
    "fp16-weights" (weights stored as fp16, computed in fp32).
    """

    spec: ModelSpec
    cache: ArtifactCache
    shapes: Mapping[str, tuple[int, ...]]
    dtypes: Mapping[str, str]
    recipe: str = "fp32"

    def key_parts(self) -> dict[str, Any]:
        import importlib.metadata as md

        import torch

        return {"model_fingerprint": self.spec.fingerprint(), "recipe": self.recipe,
                "shapes": {k: list(v) for k, v in self.shapes.items()}, "dtypes": dict(self.dtypes),
                "torch": torch.__version__, "litert_torch": md.version("litert-torch"),
                "step": "TfliteFromTorch/1"}

    def __call__(self) -> Artifact:
        if self.spec.build is None:
            raise ModelError(f"model {self.spec.name!r} has no torch module to convert to .tflite")
        if self.recipe not in RECIPES:
            raise ModelError(f"unknown LiteRT recipe {self.recipe!r}; valid: {', '.join(RECIPES)}")
        shape_label = "-".join("x".join(map(str, s)) for s in self.shapes.values())
        return self.cache.get_or_build("tflite", f"{self.spec.name}-{shape_label}-{self.recipe}",
                                       self.key_parts(), "model.tflite", self._convert)

    def _convert(self, path: Path) -> dict[str, Any]:
        import warnings

        import litert_torch
        import numpy as np
        import torch

        module = self.spec.build().eval()
        rng = np.random.default_rng(0)
        args = tuple(torch.from_numpy(_sample(rng, t, self.shapes[t.name], self.dtypes[t.name]))
                     for t in self.spec.inputs)
        quant_config = None
        if self.recipe != "fp32":
            from litert_torch.generative.quantize import quant_recipes

            quant_config = (quant_recipes.full_dynamic_recipe() if self.recipe == "int8-dynamic"
                            else quant_recipes.full_fp16_recipe())
        log = io.StringIO()
        try:
            with warnings.catch_warnings(), contextlib.redirect_stdout(log):
                warnings.simplefilter("ignore")
                litert_torch.convert(module, args, quant_config=quant_config).export(str(path))
        except Exception as exc:  # noqa: BLE001 - every converter failure becomes one clear error
            raise ModelError(f"model {self.spec.name!r}: litert-torch conversion ({self.recipe}) failed: "
                             f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from exc
        return {"recipe": self.recipe, "inputs": [t.name for t in self.spec.inputs],
                "outputs": list(self.spec.outputs)}


def _sample(rng: Any, tensor: Any, shape: tuple[int, ...], dtype: str) -> Any:
    """A sample input for tracing: the values do not matter for a float model, only shape and dtype."""
    import numpy as np

    if np.issubdtype(np.dtype(dtype), np.integer):
        return rng.integers(tensor.low, tensor.high, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)
