"""TransformedOnnxFromOnnx: a graph transform of an FP32 ONNX artifact (onnxsim, onnxslim, ORT's transformer
fusion), checked and cached; what it changed (node counts, fusions) is its recipe."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.artifacts.cache import Artifact, ArtifactCache
from harness.errors import ModelError

TRANSFORMS = ("onnxsim", "onnxslim", "transformer")


@dataclass(frozen=True)
class TransformedOnnxFromOnnx:
    source: Artifact
    cache: ArtifactCache
    label: str
    transform: str  # one of TRANSFORMS
    model_type: str = "bert"  # transformer fusion: onnxruntime.transformers model type (bert for encoders)

    def key_parts(self) -> dict[str, Any]:
        return {"source": self.source.key, "transform": self.transform, "library": _library_version(self.transform),
                "model_type": self.model_type if self.transform == "transformer" else None,
                "step": "TransformedOnnxFromOnnx/1"}

    def __call__(self) -> Artifact:
        if self.transform not in TRANSFORMS:
            raise ModelError(f"unknown graph transform {self.transform!r}; valid: {', '.join(TRANSFORMS)}")
        return self.cache.get_or_build(f"onnx-{self.transform}", self.label, self.key_parts(), "model.onnx",
                                       self._build)

    def _build(self, path: Path) -> dict[str, Any]:
        import onnx

        before = onnx.load(str(self.source.path))
        n_before = len(before.graph.node)
        note = ""
        try:
            if self.transform == "onnxsim":
                import onnxsim

                after, ok = onnxsim.simplify(before)
                if not ok:
                    raise ModelError(f"{self.source.path}: onnxsim could not validate its simplified graph")
            elif self.transform == "onnxslim":
                import onnxslim

                after = onnxslim.slim(before)
            else:
                from onnxruntime.transformers.optimizer import optimize_model

                # opt_level 0: the fusions only; ONNX Runtime's own graph optimisations stay with the session
                opt = optimize_model(str(self.source.path), model_type=self.model_type, num_heads=0,
                                     hidden_size=0, opt_level=0)
                fused = {k: v for k, v in opt.get_fused_operator_statistics().items() if v}
                note = "; fused: " + (", ".join(f"{k} x{v}" for k, v in sorted(fused.items())) or "nothing")
                after = opt.model
        except ModelError:
            raise
        except Exception as exc:
            raise ModelError(f"{self.source.path}: graph transform {self.transform} failed: "
                             f"{type(exc).__name__}: {exc}") from exc
        onnx.save(after, str(path))
        n_after = len(after.graph.node)
        ops = Counter(n.op_type for n in after.graph.node)
        return {"recipe": f"{self.transform}: {n_before} -> {n_after} nodes{note}", "nodes_before": n_before,
                "nodes_after": n_after, "ops_after": dict(ops), "source": str(self.source.path)}


def _library_version(transform: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    dist = {"onnxsim": "onnxsim", "onnxslim": "onnxslim"}.get(transform, "onnxruntime")
    for name in (dist, "onnxruntime-gpu") if dist == "onnxruntime" else (dist,):
        try:
            return version(name)
        except PackageNotFoundError:
            continue
    raise ModelError(f"graph transform {transform}: {dist} is not installed (pip install {dist})")
