"""onnx_for_precision: the ONNX file an ONNX-consuming runtime executes at a precision (FP32, FP16, INT8)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from harness.artifacts.cache import Artifact
from harness.artifacts.fp16 import Fp16OnnxFromOnnx
from harness.artifacts.int8 import CALIBRATION_FEEDS, CALIBRATION_SEED, Int8OnnxFromOnnx, choose_method
from harness.artifacts.onnx_from_torch import onnx_for_model
from harness.artifacts.transform import TransformedOnnxFromOnnx
from harness.errors import UsageError
from harness.model import BATCH, SEQ, ModelSpec
from harness.precision import Precision

if TYPE_CHECKING:
    from harness.artifacts.options import RuntimeOptions

CALIBRATION_SEQ = 64  # sequence length of the seeded calibration feeds (short: within any position table)


def onnx_for_precision(model: ModelSpec, precision: Precision, options: RuntimeOptions) -> Artifact:
    """FP32: the model's FP32 ONNX (onnx_for_model). FP16: Fp16OnnxFromOnnx of it. INT8: Int8OnnxFromOnnx of it,
    static QDQ or dynamic per `options.int8_method` ("auto" resolves with choose_method).

    `artifact.meta["recipe"]` says what was built, e.g. "int8: ORT static QDQ, per-channel ...". BF16 has no
    ONNX recipe here (UsageError): a runtime that cannot run it reports that in `supports()`.
    """
    precision = Precision(precision)
    fp32 = onnx_fp32(model, options)
    if precision is Precision.FP32:
        return fp32 if "recipe" in fp32.meta else _with_recipe(fp32, "fp32")
    if precision is Precision.FP16:
        return _after(Fp16OnnxFromOnnx(fp32, options.cache, model.name)(), fp32)
    if precision is Precision.INT8:
        method = getattr(options, "int8_method", "auto")
        if method == "auto":
            method = choose_method(fp32.path, model.calibration is not None)
        if model.calibration is not None:
            calibration, source = (lambda: _take(model.calibration(), 512)), f"{model.name}.calibration"
        else:
            seq = f", seq {CALIBRATION_SEQ}" if model.has_seq else ""
            calibration, source = (lambda: seeded_calibration_feeds(model)), \
                f"seeded random feeds, batch 1{seq}, seeds {CALIBRATION_SEED}..{CALIBRATION_SEED + CALIBRATION_FEEDS - 1}"
        return _after(Int8OnnxFromOnnx(fp32, options.cache, model.name, method,
                                       calibration if method == "static" else None, source,
                                       options.calibration_method, options.int8_activations,
                                       options.per_channel)(), fp32)
    raise UsageError(f"no ONNX recipe for {precision}: ONNX runtimes run fp32, fp16 and int8")


def onnx_fp32(model: ModelSpec, options: RuntimeOptions) -> Artifact:
    """The FP32 ONNX an ONNX runtime starts from: the model's file or export (at `options.opset`), then each of
    `options.graph_transforms` in order (a deployment variant's onnxsim / onnxslim / transformer fusion).
    Its recipe names the transforms ("fp32; onnxsim: 159 -> 132 nodes")."""
    a = onnx_for_model(model, options.cache, options.exporter, options.opset)
    recipes = []
    for t in options.graph_transforms:
        model_type = "bert" if "encoder" in model.tags else "gpt2"
        a = TransformedOnnxFromOnnx(a, options.cache, model.name, t, model_type)()
        recipes.append(str(a.meta.get("recipe", t)))
    if options.opset is not None:
        recipes.insert(0, f"opset {options.opset}")
    return _with_recipe(a, "; ".join(["fp32", *recipes])) if recipes else a


def _after(a: Artifact, fp32: Artifact) -> Artifact:
    """A precision artifact's recipe, followed by what its FP32 source was made with (a variant's transforms)."""
    source = str(fp32.meta.get("recipe", ""))
    if not source.startswith("fp32; "):
        return a
    return _with_recipe(a, f"{a.meta.get('recipe', '')}; from {source}")


def seeded_calibration_feeds(model: ModelSpec, n: int = CALIBRATION_FEEDS) -> Iterator[dict[str, Any]]:
    """`n` feeds from harness.data at batch 1 (seq CALIBRATION_SEQ), seeds never used for measurement."""
    from harness.data import make_feed

    dims = {d: 1 if d == BATCH else CALIBRATION_SEQ if d == SEQ else 1 for d in model.symbolic_dims}
    for i in range(n):
        yield make_feed(model, dims, CALIBRATION_SEED + i)


def _take(feeds: Iterable[Any], n: int) -> Iterator[Any]:
    for i, feed in enumerate(feeds):
        if i >= n:
            return
        yield feed


def _with_recipe(a: Artifact, recipe: str) -> Artifact:
    return Artifact(a.path, a.key, a.cache_hit, a.build_s, {**a.meta, "recipe": recipe})
