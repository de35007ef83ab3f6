"""Fp16OnnxFromOnnx: an FP16 ONNX model made from an FP32 one, FP32 inputs/outputs kept, fragile ops in FP32."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.artifacts.cache import Artifact, ArtifactCache
from harness.errors import ModelError

# Ops kept in FP32 (a Cast is inserted around them), on top of onnxconverter-common's own default list (the
# ai.onnx.ml ops and others that have no FP16 definition). Numerically fragile in FP16 (max 65504, 11-bit
# mantissa): normalisations and reductions, which sum many terms (variance of large activations overflows);
# exponentials and powers, whose range exceeds FP16 (Softmax's exp, Pow(x, 2) of LayerNorm variance); index
# arithmetic (Range, CumSum), which must stay exact.
FP16_BLOCK_LIST: tuple[str, ...] = (
    "LayerNormalization", "SimplifiedLayerNormalization", "SkipLayerNormalization", "GroupNormalization",
    "InstanceNormalization", "ReduceMean", "ReduceSum", "ReduceSumSquare", "ReduceL2", "ReduceLogSumExp",
    "ReduceProd", "Pow", "Exp", "Log", "Softmax", "LogSoftmax", "Range", "CumSum",
)


def fp16_recipe(block_list: tuple[str, ...]) -> str:
    return f"fp16: onnxconverter-common float16, keep_io_types, block list [{', '.join(block_list)}]"


@dataclass(frozen=True)
class Fp16OnnxFromOnnx:
    """Lazy build step: the cached FP16 ONNX made from the FP32 artifact `source`.

    onnxconverter-common's convert_float_to_float16 with keep_io_types=True (inputs and outputs stay FP32,
    Casts at the boundary) and `block_list` ops left in FP32. Weights outside FP16's range are clamped by the
    converter (|w| in [1e-7, 1e4]).
    """

    source: Artifact
    cache: ArtifactCache
    label: str
    block_list: tuple[str, ...] = field(default=FP16_BLOCK_LIST)

    @property
    def recipe(self) -> str:
        return fp16_recipe(self.block_list)

    def key_parts(self) -> dict[str, Any]:
        import onnx
        import onnxconverter_common

        return {"source": self.source.key, "block_list": list(self.block_list), "keep_io_types": True,
                "onnx": onnx.__version__, "onnxconverter_common": onnxconverter_common.__version__,
                "step": "Fp16OnnxFromOnnx/3"}

    def __call__(self) -> Artifact:
        return self.cache.get_or_build("onnx-fp16", self.label, self.key_parts(), "model.onnx", self._convert)

    def _convert(self, path: Path) -> dict[str, Any]:
        import onnx

        model = onnx.load(str(self.source.path))
        try:
            converted = convert_to_fp16(model, self.block_list)
        except Exception as exc:  # noqa: BLE001 - any converter failure is one clear error
            raise ModelError(f"{self.source.path}: FP16 conversion failed: {type(exc).__name__}: {exc}") from exc
        onnx.save(converted, str(path))
        kept = sorted({n.op_type for n in converted.graph.node if n.op_type in set(self.block_list)})
        return {"recipe": self.recipe, "source": str(self.source.path), "fp32_kept_ops": kept,
                "casts": sum(n.op_type == "Cast" for n in converted.graph.node)}


def convert_to_fp16(model: Any, block_list: tuple[str, ...] = FP16_BLOCK_LIST) -> Any:
    """The harness's FP16 conversion of an onnx.ModelProto (what Fp16OnnxFromOnnx caches; conformance runs it on
    each case): keep_io_types, `block_list` and the converter's own block list left in FP32, then checked.

    Two faults of onnxconverter-common 1.16 are worked around here rather than patched into the library:
    unnamed nodes are named first (the converter names its Casts after the node, so two unnamed consumers of
    one input got the same Cast output name and broke SSA); initializers that are also graph inputs (IR < 4
    models) stop being inputs (the converter would cast the input, declared FP32, and the weight, now FP16,
    under one name); every graph output whose element type the converter changed is given its original type
    back (`restore_output_types`); a Cast of the model to FP32 whose output the converter retyped FP16 casts to
    FP16 (`align_cast_targets`). The result must pass ONNX's full check (type inference included).
    """
    import onnx
    from onnxconverter_common import float16

    original = {o.name: o.type.tensor_type.elem_type for o in model.graph.output}
    name_unnamed_nodes(model.graph)
    drop_initializer_inputs(model)
    block = sorted(set(float16.DEFAULT_OP_BLOCK_LIST) | set(block_list))
    converted = float16.convert_float_to_float16(model, keep_io_types=True, op_block_list=block)
    align_cast_targets(converted.graph)
    restore_output_types(converted.graph, original)
    onnx.checker.check_model(converted, full_check=True)
    return converted


def align_cast_targets(graph: Any) -> None:
    """Point each Cast-to-FP32 of the model at FP16 where the converter retyped its output FP16.

    The converter's fault (seen on a torch.export of LlamaForCausalLM, whose rotary embedding casts to float):
    it retypes every FP32 value_info to FP16 and wires the readers for FP16, but leaves a Cast node's `to`
    attribute at FLOAT, so type inference finds FLOAT where the graph says FLOAT16 and the check fails.
    """
    from onnx import TensorProto

    fp16 = {v.name for v in graph.value_info if v.type.tensor_type.elem_type == TensorProto.FLOAT16}
    for node in graph.node:
        if node.op_type != "Cast" or not node.output or node.output[0] not in fp16:
            continue
        for attr in node.attribute:
            if attr.name == "to" and attr.i == TensorProto.FLOAT:
                attr.i = TensorProto.FLOAT16


def drop_initializer_inputs(model: Any) -> None:
    """Remove the graph inputs that name an initializer (IR version 3 lists every weight as an input too)."""
    weights = {t.name for t in model.graph.initializer}
    if not any(i.name in weights for i in model.graph.input):
        return
    kept = [i for i in model.graph.input if i.name not in weights]
    del model.graph.input[:]
    model.graph.input.extend(kept)
    model.ir_version = max(model.ir_version, 4)  # IR 4 lets an initializer be no input


def name_unnamed_nodes(graph: Any) -> None:
    """Give every unnamed node of `graph` and its subgraphs a name unique in the model (`fp16_node_N`)."""
    taken: set[str] = set()
    unnamed: list[Any] = []

    def walk(g: Any) -> None:
        for node in g.node:
            (taken.add(node.name) if node.name else unnamed.append(node))
            for attr in node.attribute:
                for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                    walk(sub)

    walk(graph)
    i = 0
    for node in unnamed:
        while f"fp16_node_{i}" in taken:
            i += 1
        node.name = f"fp16_node_{i}"
        taken.add(node.name)


def restore_output_types(graph: Any, original: dict[str, int]) -> None:
    """Give each graph output the element type it had before conversion (`original`: name -> elem_type).

    The converter's fault: with keep_io_types, an op kept in FP32 that produces a graph output gets a Cast to
    FP16 after it (as for any kept op), which also retypes the graph output as FP16; the later step that casts
    FP16 outputs back to FP32 only looks for FP32 outputs, so it skips this one. Here the kept op writes the
    output itself again when nothing else reads that Cast; otherwise the output is produced by a Cast to its
    original type (of the kept op's own value where there is one: no FP16 rounding) and the nodes inside the
    graph that read it keep reading the FP16 value.
    """
    from onnx import helper

    def readers(name: str) -> list[Any]:
        return [n for n in graph.node if name in n.input]

    outputs = {o.name for o in graph.output}
    for out in graph.output:
        want, got = original.get(out.name), out.type.tensor_type.elem_type
        producer = {o: n for n in graph.node for o in n.output}
        if want is None or got == want or out.name not in producer:
            continue
        node = producer[out.name]
        types = {v.name: v.type.tensor_type.elem_type for v in graph.value_info}
        fp32 = node.input[0] if node.op_type == "Cast" and node.input else ""
        if (types.get(fp32) == want and fp32 in producer and fp32 not in outputs and not readers(out.name)
                and readers(fp32) == [node]):  # kept op -> converter's Cast -> output: drop the Cast
            kept = producer[fp32]
            kept.output[list(kept.output).index(fp32)] = out.name
            graph.node.remove(node)
            for info in [v for v in graph.value_info if v.name == fp32]:
                graph.value_info.remove(info)
        else:
            names = {o for n in graph.node for o in n.output} | {i.name for i in graph.input} | set(types)
            inner = f"{out.name}_fp16"
            while inner in names:
                inner += "_"
            node.output[list(node.output).index(out.name)] = inner
            for consumer in readers(out.name):
                consumer.input[:] = [inner if name == out.name else name for name in consumer.input]
            info = helper.make_tensor_value_info(inner, got, None)
            info.type.tensor_type.shape.CopyFrom(out.type.tensor_type.shape)
            graph.value_info.append(info)
            source = fp32 if types.get(fp32) == want else inner  # the kept op's own value where there is one
            graph.node.append(helper.make_node("Cast", [source], [out.name], name=f"{out.name}_restore_type",
                                               to=want))
        out.type.tensor_type.elem_type = want
