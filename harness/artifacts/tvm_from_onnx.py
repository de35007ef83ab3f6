"""TvmFromOnnx: compile an ONNX file for one static input shape with TVM Relax, exported as a cached .so."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.artifacts.cache import Artifact, ArtifactCache
from harness.errors import UnsupportedModelError


@dataclass(frozen=True)
class TvmFromOnnx:
    """Lazy build step: Relax ONNX frontend -> tvm.compile (default Relax pipeline, untuned) -> .so.

    shapes/dtypes: the static shape and dtype of every graph input (one artifact per shape).
    target: a TVM target dict, e.g. {"kind": "llvm", "mcpu": "znver4"}.
    """

    onnx: Artifact
    cache: ArtifactCache
    shapes: Mapping[str, tuple[int, ...]]
    dtypes: Mapping[str, str]
    target: Mapping[str, Any]
    label: str = "model"

    def key_parts(self) -> dict[str, Any]:
        import tvm

        return {"onnx": self.onnx.key, "shapes": {k: list(v) for k, v in self.shapes.items()},
                "dtypes": dict(self.dtypes), "target": dict(self.target),
                "tvm": tvm.__version__, "step": "TvmFromOnnx/1"}

    def __call__(self) -> Artifact:
        shape_label = "-".join("x".join(map(str, s)) for s in self.shapes.values())
        return self.cache.get_or_build("tvm", f"{self.label}-{shape_label}",
                                       self.key_parts(), "model.so", self._build)

    def _build(self, path: Path) -> dict[str, Any]:
        import onnx
        import tvm
        from tvm.relax.frontend.onnx import from_onnx

        model = onnx.load(str(self.onnx.path))
        try:
            mod = from_onnx(model, shape_dict={k: list(v) for k, v in self.shapes.items()},
                            dtype_dict=dict(self.dtypes), keep_params_in_input=False)
        except Exception as exc:  # noqa: BLE001 - an op the frontend lacks is one clear error
            raise UnsupportedModelError(f"tvm-cpu cannot take this model: TVM's Relax ONNX frontend cannot import "
                                        f"{self.onnx.path}: "
                             f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from exc
        target = tvm.target.Target(dict(self.target))
        executable = tvm.compile(mod, target=target)
        executable.export_library(str(path))
        return {"tuned": False, "inputs": list(self.shapes), "target": str(target)}
