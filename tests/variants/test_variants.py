"""Deployment variants: each kind changes what it claims (read back from the built artifact or the live session),
and a variant case is judged against the model's own FP32 reference."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from harness.artifacts import ArtifactCache, onnx_for_precision, onnx_fp32
from harness.data import make_feed
from harness.errors import UsageError
from harness.matrix import case_ids
from harness.model import get_model
from harness.precision import Precision
from harness.results.schema import CaseId
from harness.runtimes import RuntimeOptions, get_runtime
from harness.variants import KINDS, parse_variant, parse_variants


@pytest.fixture(scope="module")
def options(tmp_path_factory):
    return RuntimeOptions(threads=1, cache=ArtifactCache(tmp_path_factory.mktemp("cache")))


def _apply(spelling, spec, options):
    return parse_variant(spelling).apply(spec, options)


# ------------------------------------------------------------------ spelling
def test_spellings_are_canonical_and_bad_ones_name_the_knob():
    assert parse_variant("base") is None and parse_variant("") is None
    v = parse_variant("mem=OFF+opt=basic")
    assert v.name == "opt=basic+mem=off"  # registry order, lower case
    assert parse_variants("base,opt=basic,opt=basic, prune=0.30") == (None, "opt=basic", "prune=0.3")
    for bad, match in [("opt=fast", r"opt='fast'.*disabled, basic, extended or all"), ("speed=1", "unknown kind"),
                       ("opt", "KIND=VALUE"), ("opt=all+opt=basic", "given twice"), ("prune=1.5", "fraction"),
                       ("threads=0", "whole number"), ("opset=7", "opset from 13")]:
        with pytest.raises(UsageError, match=match):
            parse_variant(bad)
    assert set(KINDS) >= {"opt", "exec", "mem", "spin", "threads", "opset", "axes", "simplify", "fuse", "int8", "weights",
                          "prune"}


def test_matrix_ids_and_the_cases_a_runtime_cannot_take():
    ids = case_ids(["mlp"], ["ort-cpu", "torch-cpu"], ["fp32"], [1], [32], variants=(None, "opt=basic"))
    assert [c.id for c in ids] == ["mlp-ort-cpu-fp32-b1", "mlp-ort-cpu-fp32-b1~opt=basic", "mlp-torch-cpu-fp32-b1",
                                   "mlp-torch-cpu-fp32-b1~opt=basic"]
    assert ids[1].activation_key != ids[0].activation_key
    assert CaseId.from_dict(ids[1].as_dict()) == ids[1] and "variant" not in ids[0].as_dict()
    spec = get_model("mlp")
    torch_cpu = get_runtime("torch-cpu")
    why = parse_variant("opt=basic").refusal(spec, torch_cpu.variant_hooks, "torch-cpu", Precision.FP32)
    assert why == "variant opt=basic needs the ort-session capability, which torch-cpu lacks"
    why = parse_variant("int8=static").refusal(spec, get_runtime("ort-cpu").variant_hooks, "ort-cpu", Precision.FP32)
    assert "int8 cases only" in why
    assert parse_variant("prune=0.3").refusal(spec, torch_cpu.variant_hooks, "torch-cpu", Precision.FP32) is None


# ------------------------------------------------------------------ ONNX Runtime session knobs, read back
def test_session_knobs_are_what_the_session_reports(options):
    spec, opts = _apply("opt=basic+exec=parallel+mem=off+spin=off", get_model("mlp"), options)
    with get_runtime("ort-cpu")(spec, Precision.FP32, opts) as rt:
        got = rt.session_options()
        rt.infer(make_feed(spec, {"batch": 2}, 0))
    assert got["graph_optimization_level"] == "ORT_ENABLE_BASIC"
    assert got["execution_mode"] == "ORT_PARALLEL" and got["inter_op_num_threads"] == 2  # at least 2
    assert got["enable_mem_pattern"] is False and got["enable_mem_reuse"] is False
    assert got["intra_op_allow_spinning"] is False
    with get_runtime("ort-cpu")(get_model("mlp"), Precision.FP32, options) as rt:
        default = rt.session_options()
    assert default["graph_optimization_level"] == "ORT_ENABLE_ALL" and default["enable_mem_pattern"] is True
    assert default["execution_mode"] == "ORT_SEQUENTIAL" and rt.options.session == ()
    assert default["intra_op_allow_spinning"] is True
    assert "session_options" not in rt.details()  # recorded for variant cases only


def test_an_ab_side_does_not_spin_between_calls_unless_a_variant_says_so(options):
    """Both sides of an A/B (and the gate) live beside each other: the side not measured must not spin for the
    cores (idle_spinning=False); an explicit spin=on variant still wins; it is recorded with the case."""
    import dataclasses

    quiet = dataclasses.replace(options, idle_spinning=False)
    with get_runtime("ort-cpu")(get_model("mlp"), Precision.FP32, quiet) as rt:
        assert rt.session_options()["intra_op_allow_spinning"] is False
        assert rt.details()["session_options"]["intra_op_allow_spinning"] is False
    spec, opts = _apply("spin=on", get_model("mlp"), quiet)
    with get_runtime("ort-cpu")(spec, Precision.FP32, opts) as rt:
        assert rt.session_options()["intra_op_allow_spinning"] is True


def test_fixed_axes_make_a_session_per_shape(options):
    spec, opts = _apply("axes=fixed", get_model("mlp"), options)
    with get_runtime("ort-cpu")(spec, Precision.FP32, opts) as rt:
        out4 = rt.infer(make_feed(spec, {"batch": 4}, 0))
        fixed4 = rt.session_options()["fixed_dimensions"]
        shape4 = rt._session.get_inputs()[0].shape
        rt.bind(make_feed(spec, {"batch": 2}, 0))
        fixed2 = rt.session_options()["fixed_dimensions"]
    assert fixed4 == {"batch": 4} and fixed2 == {"batch": 2}
    assert shape4[0] == 4  # the session's input is no longer free: ORT reports the fixed size
    with get_runtime("ort-cpu")(get_model("mlp"), Precision.FP32, options) as rt:
        ref = rt.infer(make_feed(spec, {"batch": 4}, 0))
    np.testing.assert_allclose(out4["logits"], ref["logits"], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("names", [("?", "?"), ("?", ""), ("n", "n")])
def test_fixed_axes_never_give_one_axis_another_axes_size(names, options, tmp_path):
    """axes=fixed overrides free dimensions by name: a marker of unnamed axes ("?", as paddle2onnx writes) or a
    name the feed gives two sizes is left free, so every axis runs at its own size (6 and 5 here)."""
    from harness.model_files import parse_shapes, spec_from_onnx

    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", 3, *names])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", 3, *names])
    if names[1] == "":
        x.type.tensor_type.shape.dim[3].Clear()
        y.type.tensor_type.shape.dim[3].Clear()
    model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["X"], ["Y"])], "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    path = tmp_path / "two-free.onnx"
    onnx.save(model, str(path))
    spec = spec_from_onnx(path, shapes=parse_shapes("X:2=6,X:3=5"))
    spec, opts = _apply("axes=fixed", spec, options)
    with get_runtime("ort-cpu")(spec, Precision.FP32, opts) as rt:
        out = rt.infer(make_feed(spec, {"batch": 2}, 0))
        fixed = rt.session_options()["fixed_dimensions"]
    assert out["Y"].shape == (2, 3, 6, 5)
    assert fixed == {"batch": 2}


VALUE_PROBES = ("0.9999999", "0.99999999", "1.0000001", "0.00000001", "1e-300", "-0.0000001", "2.9999999",
                "12.0000001", "1e308", "0.5", "3", "16.00000001", "0")


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_value_is_refused_at_parse_time_or_kept_as_written(kind):
    """Generated values near every kind's edges: either a usage error now, or a canonical spelling that parses
    back to itself (never one rounded into a value the worker would refuse, as prune=0.9999999 -> 1 was)."""
    for value in (*VALUE_PROBES, *getattr(KINDS[kind], "choices", ())):
        try:
            v = parse_variant(f"{kind}={value}")
        except UsageError:
            continue
        assert parse_variant(v.name).name == v.name, (kind, value, v.name)


def test_prune_rounded_to_one_is_refused_naming_both_spellings():
    with pytest.raises(UsageError, match=r"variant 'prune=0.9999999': 0.9999999 is written prune=1, which is "
                                         r"refused"):
        parse_variant("prune=0.9999999")
    assert parse_variant("prune=0.999999").name == "prune=0.999999"


# ------------------------------------------------------------------ export and graph transforms
def test_opset_is_the_exported_one(options):
    spec, opts = _apply("opset=17", get_model("mlp"), options)
    a = onnx_fp32(spec, opts)
    m = onnx.load(str(a.path))
    assert {o.version for o in m.opset_import if o.domain in ("", "ai.onnx")} == {17}
    assert a.meta["recipe"] == "fp32; opset 17"
    assert onnx_fp32(spec, options).key != a.key


def _foldable(path):
    """y = x * (c1 + c2) with c1 + c2 computed at run time: a simplifier folds the Add and the Identity."""
    c1 = numpy_helper.from_array(np.full((4,), 1.5, np.float32), "c1")
    c2 = numpy_helper.from_array(np.full((4,), 0.5, np.float32), "c2")
    graph = helper.make_graph(
        [helper.make_node("Add", ["c1", "c2"], ["c"]), helper.make_node("Identity", ["c"], ["ci"]),
         helper.make_node("Mul", ["x", "ci"], ["y"])], "foldable",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])], [c1, c2])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize("tool", ["onnxsim", "onnxslim"])
def test_simplifiers_fold_nodes_and_keep_outputs(tool, tmp_path, options):
    from harness.model_files import spec_from_onnx

    spec = spec_from_onnx(_foldable(tmp_path / "foldable.onnx"))
    vspec, opts = _apply(f"simplify={tool}", spec, options)
    a = onnx_fp32(vspec, opts)
    m = onnx.load(str(a.path))
    assert [n.op_type for n in m.graph.node] == ["Mul"]
    assert a.meta["nodes_before"] == 3 and a.meta["nodes_after"] == 1
    assert a.meta["recipe"] == f"fp32; {tool}: 3 -> 1 nodes"
    import onnxruntime as ort

    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    y = ort.InferenceSession(str(a.path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(y, x * 2.0)


@pytest.mark.e2e
def test_transformer_fusion_fuses_bert_and_refuses_a_cnn(options):
    bert = get_model("bert-mini")
    vspec, opts = _apply("fuse=transformer", bert, options)
    a = onnx_fp32(vspec, opts)
    ops = [n.op_type for n in onnx.load(str(a.path)).graph.node]
    assert "SkipLayerNormalization" in ops and "fused: " in a.meta["recipe"]
    assert a.meta["nodes_after"] < a.meta["nodes_before"]
    why = parse_variant("fuse=transformer").refusal(get_model("resnet18"), frozenset({"ort-session"}), "ort-cpu",
                                                    Precision.FP32)
    assert "not a transformer" in why


# ------------------------------------------------------------------ INT8 recipes
def test_int8_method_and_weight_granularity_are_in_the_graph(options):
    spec = get_model("mlp")
    dyn = onnx_for_precision(spec, Precision.INT8, _apply("int8=dynamic", spec, options)[1])
    ops = {n.op_type for n in onnx.load(str(dyn.path)).graph.node}
    assert "MatMulInteger" in ops and "QuantizeLinear" not in ops and "int8: ORT dynamic, per-channel" in \
        dyn.meta["recipe"]
    static_pc = onnx_for_precision(spec, Precision.INT8, _apply("int8=static", spec, options)[1])
    static_pt = onnx_for_precision(spec, Precision.INT8, _apply("int8=static+weights=per-tensor", spec, options)[1])
    assert "static QDQ, per-channel" in static_pc.meta["recipe"]
    assert "static QDQ, per-tensor" in static_pt.meta["recipe"]

    def weight_scale_sizes(path):
        m = onnx.load(str(path))
        inits = {i.name: i for i in m.graph.initializer}
        sizes = []
        for n in m.graph.node:
            w = inits.get(n.input[0])
            if n.op_type == "DequantizeLinear" and w is not None and w.data_type == TensorProto.INT8 \
                    and len(w.dims) >= 2:
                sizes.append(int(np.prod(inits[n.input[1]].dims)) if inits[n.input[1]].dims else 1)
        return sizes

    pc, pt = weight_scale_sizes(static_pc.path), weight_scale_sizes(static_pt.path)
    assert pc and pt and all(s > 1 for s in pc) and all(s == 1 for s in pt)
    assert static_pc.key != static_pt.key


# ------------------------------------------------------------------ pruning
def test_pruning_zeroes_the_fraction_and_is_another_model():
    import torch

    spec = get_model("mlp")
    pruned, _ = _apply("prune=0.3", spec, RuntimeOptions(threads=1))
    assert pruned.fingerprint() != spec.fingerprint()
    module = pruned.build()
    layers = [m for m in module.modules() if isinstance(m, torch.nn.Linear)]
    assert layers
    for m in layers:
        zero = float((m.weight == 0).float().mean())
        assert abs(zero - 0.3) < 0.01, zero
        assert not hasattr(m, "weight_orig")  # made permanent
    assert all(float((m.weight == 0).float().mean()) < 0.01 for m in spec.build().modules()
               if isinstance(m, torch.nn.Linear))


# ------------------------------------------------------------------ a variant case end to end (in-process)
def _config(tmp_path, variants):
    from harness.options import OPTIONS, parse_run_options

    raw = {o.dest: None for o in OPTIONS}
    raw.update(models="mlp", runtimes="ort-cpu,torch-cpu", min_time="0.01", min_iters="3", warmup="1",
               repeats="1", threads="1", variants=variants, cache_dir=str(tmp_path / "cache"),
               out=str(tmp_path / "out"))
    return parse_run_options(raw)


@pytest.mark.e2e
def test_variant_cases_are_judged_against_the_models_own_reference(tmp_path):
    from harness.execution import CaseRunner

    config = _config(tmp_path, "base,opt=disabled,prune=0.3")
    assert config.matrix.variants == (None, "opt=disabled", "prune=0.3")
    runner = CaseRunner()
    rows = {c.id: runner.run(c, config) for c in case_ids(["mlp"], ["torch-cpu", "ort-cpu"], ["fp32"], [2], [32],
                                                            variants=config.matrix.variants)}
    base = rows["mlp-torch-cpu-fp32-b2"]
    assert base.status == "passed" and base.is_reference
    opt = rows["mlp-ort-cpu-fp32-b2~opt=disabled"]
    assert opt.status == "passed" and not opt.is_reference and opt.accuracy["rel_l2"] < 1e-5
    assert opt.details["session_options"]["graph_optimization_level"] == "ORT_DISABLE_ALL"
    assert opt.details["variant"]["knobs"][0]["kind"] == "opt"
    pruned = rows["mlp-torch-cpu-fp32-b2~prune=0.3"]
    # the pruned model is judged against the unpruned FP32 reference: its drift is the cost of pruning
    assert not pruned.is_reference and pruned.status == "failed" and pruned.accuracy["rel_l2"] > 1e-3
    assert pruned.model_fingerprint != base.model_fingerprint
    assert rows["mlp-ort-cpu-fp32-b2~prune=0.3"].accuracy["rel_l2"] == pytest.approx(pruned.accuracy["rel_l2"],
                                                                                       rel=1e-3)
    skipped = rows["mlp-torch-cpu-fp32-b2~opt=disabled"]
    assert skipped.status == "skipped" and "ort-session" in skipped.reason


@pytest.mark.e2e
def test_bad_variants_option_is_one_line(tmp_path):
    with pytest.raises(UsageError, match=r"^--variants: variant opt='fast': opt takes disabled, basic, extended or all$"):
        _config(tmp_path, "base,opt=fast")
