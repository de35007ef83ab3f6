import pytest

from harness.precision import DEFAULT_TOLERANCES, Precision


def test_parse_and_str():
    assert Precision.parse(" FP16 ") is Precision.FP16
    assert str(Precision.INT8) == "int8"
    with pytest.raises(ValueError, match="valid precisions: fp32, fp16, bf16, int8"):
        Precision.parse("fp8")


def test_every_precision_has_a_default_tolerance_and_lower_precisions_are_looser():
    assert set(DEFAULT_TOLERANCES) == set(Precision)
    fp32, fp16, int8 = (DEFAULT_TOLERANCES[p] for p in (Precision.FP32, Precision.FP16, Precision.INT8))
    assert fp32.max_rel_l2 < fp16.max_rel_l2 < int8.max_rel_l2
    assert fp32.min_cosine > fp16.min_cosine > int8.min_cosine


def test_defaults_depend_on_task_and_model_and_override_win_in_order():
    from harness.model import BATCH, ModelSpec, TensorSpec
    from harness.precision import Tolerance, default_tolerance

    assert default_tolerance(Precision.INT8, "classification") == DEFAULT_TOLERANCES[Precision.INT8]
    lm = default_tolerance(Precision.INT8, "lm")
    assert lm.max_rel_l2 == 0.25 and lm.min_cosine == 0.97 and lm.min_top1 == DEFAULT_TOLERANCES[Precision.INT8].min_top1
    spec = ModelSpec("t", inputs=(TensorSpec("x", (BATCH, 2)),), outputs=("y",), build=lambda: None,
                     task="embedding", tolerances={Precision.FP16: Tolerance(min_cosine=0.9)})
    t = spec.tolerance(Precision.FP16)
    assert t.min_cosine == 0.9 and t.max_rel_l2 == 3e-2  # model bound over the task default
    t = spec.tolerance(Precision.FP16, Tolerance(min_cosine=0.5, max_rel_l2=0.4))
    assert t.min_cosine == 0.5 and t.max_rel_l2 == 0.4  # the command line over both


def test_parse_tolerance_overrides():
    from harness.precision import Tolerance, parse_tolerance_overrides

    got = parse_tolerance_overrides("fp16.max_rel_l2=0.05, int8.min_cosine=0.98,fp16.atol=1e-3")
    assert got == {Precision.FP16: Tolerance(max_rel_l2=0.05, atol=1e-3), Precision.INT8: Tolerance(min_cosine=0.98)}
    for bad, message in [("fp16.max_rel=0.1", "unknown bound 'max_rel'; valid bounds: atol, rtol"),
                         ("fp8.atol=1", "unknown precision 'fp8'"), ("max_rel_l2=0.1", "PRECISION.BOUND=VALUE"),
                         ("fp16.atol=x", "'x' is not a number"), ("fp16.atol=-1", ">= 0"), (" , ", "empty")]:
        with pytest.raises(ValueError, match=message):
            parse_tolerance_overrides(bad)
