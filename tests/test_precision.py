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
