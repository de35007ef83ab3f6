"""torch-cpu: PyTorch eager execution under inference mode."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from harness.model import ModelSpec
from harness.runtimes.base import Availability, Runtime, name_outputs


class TorchEager(Runtime):
    """Eager PyTorch on `torch_device`; outputs come back to the host inside the timed call."""

    name: ClassVar[str] = "torch-cpu"
    device: ClassVar[str] = "cpu"
    torch_device: ClassVar[str] = "cpu"
    description: ClassVar[str] = "PyTorch eager, torch.inference_mode()"

    @classmethod
    def availability(cls) -> Availability:
        try:
            import torch  # noqa: F401
        except ImportError as exc:
            return Availability(False, f"torch is not importable: {exc}")
        return Availability(True)

    @classmethod
    def _supports_model(cls, model: ModelSpec) -> Availability:
        if model.build is None:
            return Availability(False, f"model {model.name!r} is ONNX-only: there is no PyTorch module to run")
        return Availability(True)

    def _activate(self) -> None:
        import torch

        torch.set_num_threads(self.options.threads)
        self._torch = torch
        self._module = self.model.build().eval().to(self.torch_device)

    def _prepare(self, feed: Mapping[str, np.ndarray]) -> dict[str, Any]:
        return {k: self._torch.from_numpy(np.ascontiguousarray(v)).to(self.torch_device) for k, v in feed.items()}

    def _infer(self, prepared: dict[str, Any]) -> Mapping[str, Any]:
        with self._torch.inference_mode():
            return name_outputs(self._module(**prepared), self.model.outputs)

    def _to_numpy(self, value: Any) -> np.ndarray:
        return value.detach().float().cpu().numpy()

    def _deactivate(self) -> None:
        self._module = None

    def details(self) -> dict[str, Any]:
        return {**super().details(), "torch": self._torch.__version__ if hasattr(self, "_torch") else None}
