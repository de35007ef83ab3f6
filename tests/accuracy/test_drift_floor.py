"""Drift judged the way numerics people judge it, over generated cases: a correct computation at any precision
and any output scale passes, also where its reference is ~0 (then a note says so, with the --feeds hint on
random input); a planted error of a real size fails at every scale and precision.

A "correct runtime" here is the same small network computed with its intermediate values rounded to the
precision (float32 arithmetic; float16 with numpy's float16; bfloat16 by rounding float32 to 8 significant
bits), the reference being the float64 computation rounded to float32, as the harness's FP32 reference is.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from harness.accuracy import compare, drift_metrics
from harness.accuracy.drift import relative_verdicts
from harness.precision import UNIT_ROUNDOFF, Precision, Tolerance, default_tolerance, rounding_rms


def _bf16(x: np.ndarray) -> np.ndarray:
    """Round float32 values to bfloat16 (round to nearest even on the 16 dropped bits), back as float32."""
    b = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000
    return b.astype(np.uint32).view(np.float32)


def _round(x: np.ndarray, precision: Precision) -> np.ndarray:
    if precision == Precision.FP16:
        return np.asarray(x, dtype=np.float16).astype(np.float32)
    if precision == Precision.BF16:
        return _bf16(x)
    if precision == Precision.INT8:  # per-tensor symmetric quantisation of the values, dequantised
        scale = float(np.max(np.abs(x))) / 127 or 1.0
        return (np.clip(np.round(x / scale), -127, 127) * scale).astype(np.float32)
    return np.asarray(x, dtype=np.float32)


# The output heads of the generated networks: a scale of the output (1e-6 .. 1e3), a saturated sigmoid (a
# detector's probability map on random input: ~0 everywhere), a difference of two O(1) features (cancellation)
# and a softmax over many classes (small values with magnitude).
HEADS = ("scaled", "saturated_sigmoid", "cancellation", "softmax")
SCALES = (1e-6, 1e-3, 1.0, 1e3)


# The logit error of a deep network computed at each precision (sums over thousands of terms in another order
# than the reference's): PP-OCRv4 det's logits moved by about 1e-2 between two correct FP32 runtimes (its map's
# rel_l2 0.005-0.02 = the logit error, the sigmoid being ~e^logit there).
DEEP_LOGIT_ERROR = {Precision.FP32: 1e-2, Precision.FP16: 5e-2, Precision.BF16: 2e-1}


def _network(seed: int, head: str, scale: float, precision: Precision) -> tuple[np.ndarray, np.ndarray]:
    """(reference, output of the runtime at `precision`) of a two-layer network on a random input."""
    rng = np.random.default_rng(seed)
    logit_error = rng.standard_normal((4, 32)) * DEEP_LOGIT_ERROR.get(precision, 0.0)
    x = rng.standard_normal((4, 64))
    w1 = rng.standard_normal((64, 96)) / 8
    w2 = rng.standard_normal((96, 32)) / 10

    def forward(rnd, deep=0.0):
        h = rnd(np.maximum(rnd(x) @ rnd(w1), 0))
        z = rnd(h @ rnd(w2))
        if head == "scaled":
            return rnd(z * scale)
        if head == "saturated_sigmoid":
            return rnd(1.0 / (1.0 + np.exp(np.minimum(rnd(18.0 - z - deep), 80.0))))
        if head == "cancellation":
            return rnd(z - rnd(z[:, ::-1] * 0 + z))  # z - z computed through a rounded copy: ~0 of O(1)
        e = np.exp(rnd(z - z.max(axis=-1, keepdims=True)) * 3)
        return rnd(e / e.sum(axis=-1, keepdims=True))

    ref = forward(lambda v: np.asarray(v, dtype=np.float64)).astype(np.float32)
    if precision == Precision.FP32:
        out = forward(lambda v: np.asarray(v, dtype=np.float32), logit_error).astype(np.float32)
    else:
        out = forward(lambda v: _round(np.asarray(v, dtype=np.float32), precision), logit_error)
        out = out.astype(np.float32)
    return ref, out


CASES = [(p, h, s, seed) for p, h, s, seed in itertools.product(
    (Precision.FP32, Precision.FP16, Precision.BF16), HEADS, SCALES, range(3))
    if h == "scaled" or s == 1.0]


@pytest.mark.parametrize("precision,head,scale,seed", CASES)
def test_a_correct_computation_passes_at_every_scale_and_precision(precision, head, scale, seed):
    ref, out = _network(seed, head, scale, precision)
    res = compare({"y": ref}, {"y": out}, default_tolerance(precision), classification=head == "softmax",
                  precision=str(precision))
    assert res, res.message
    d = res.outputs[0]
    if res.notes:  # passed by its floor only: the reference had no magnitude at this precision's resolution
        assert d.rms_abs <= default_tolerance(precision).floor
        assert "is ~0 on random input" in res.notes[0] and "--feeds" in res.notes[0]


def test_a_reference_near_zero_is_said_in_words_with_the_feeds_hint():
    ref, out = _network(0, "saturated_sigmoid", 1.0, Precision.FP32)
    assert float(np.max(np.abs(ref))) < 1e-5  # ~0 everywhere, as PP-OCRv4 det's map on random input
    strict = compare({"y": ref}, {"y": out}, Tolerance(max_rel_l2=1e-4, min_cosine=0.99999))  # no floor
    res = compare({"y": ref}, {"y": out}, default_tolerance(Precision.FP32), precision="fp32")
    assert not strict and "rel_l2" in strict.message  # relative figures alone: a false failure
    assert res and len(res.notes) == 1
    note = res.notes[0]
    assert note.startswith("reference output 'y' is ~0 on random input (max |ref| ")
    assert "float noise" in note and "within fp32's floor 3.44e-08" in note and note.endswith("with --feeds")
    assert res.as_dict()["notes"] == [note] and note in res.message
    fed = compare({"y": ref}, {"y": out}, default_tolerance(Precision.FP32), random_input=False)
    assert fed and "--feeds" not in fed.notes[0] and "random input" not in fed.notes[0]


PLANTS = ("noise", "offset", "scale")


@pytest.mark.parametrize("precision,head,scale,seed,plant,size", [
    (*c, plant, size) for c in CASES[::2] for plant in PLANTS for size in (3.0, 30.0)])
def test_a_planted_error_of_a_real_size_fails(precision, head, scale, seed, plant, size):
    """An error `size` times what the tolerance allows at this output's scale (max_rel_l2 * rms(ref) + floor)
    fails, whatever the reference's magnitude."""
    ref, _ = _network(seed, head, scale, precision)
    tol = default_tolerance(precision)
    r = ref.astype(np.float64)
    allowed = tol.max_rel_l2 * math.sqrt(float(np.mean(r * r))) + tol.floor
    rng = np.random.default_rng(seed + 100)
    if plant == "noise":
        e = rng.standard_normal(ref.shape)
    elif plant == "offset":
        e = np.ones(ref.shape)
    else:  # the output scaled by a factor, plus the floor's worth so a ~0 reference still moves
        e = r / (math.sqrt(float(np.mean(r * r))) or 1.0) + 0.1
    e *= size * allowed / math.sqrt(float(np.mean(e * e)))
    bad = (r + e).astype(np.float32)
    res = compare({"y": ref}, {"y": bad}, tol, precision=str(precision))
    assert not res, (res.message, allowed)
    assert any(f.startswith("rel_l2=") for f in res.failures) and not res.notes


@pytest.mark.parametrize("precision", list(Precision))
def test_the_floor_is_one_rounding_of_unit_values_and_the_bound_is_allclose_over_the_norm(precision):
    tol = default_tolerance(precision)
    assert tol.floor == pytest.approx(UNIT_ROUNDOFF[precision] / (2 * math.sqrt(3))) == rounding_rms(precision)
    # the rounding error of values of order 1 has that RMS (uniform over half a spacing either way)
    if precision in (Precision.FP16, Precision.BF16):
        v = np.random.default_rng(1).uniform(1.0, 2.0, 200_000).astype(np.float32)
        err = _round(v, precision).astype(np.float64) - v
        assert math.sqrt(float(np.mean(err * err))) == pytest.approx(tol.floor, rel=0.05)
    # ||d|| <= max_rel_l2 * ||ref|| + floor * sqrt(n): exactly at the bound passes, just over fails
    rng = np.random.default_rng(7)
    for ref_rms in (0.0, tol.floor, 1.0, 1e3):
        ref = rng.standard_normal(10_000)
        ref *= ref_rms / math.sqrt(float(np.mean(ref * ref)))
        e = rng.standard_normal(10_000)
        e /= math.sqrt(float(np.mean(e * e)))
        bound = tol.max_rel_l2 * ref_rms + tol.floor
        only_l2 = Tolerance(max_rel_l2=tol.max_rel_l2, floor=tol.floor)
        at = drift_metrics("y", ref + e * bound * 0.999, ref)
        over = drift_metrics("y", ref + e * bound * 1.01, ref)
        assert not relative_verdicts(at, only_l2)[0] and relative_verdicts(over, only_l2)[0], ref_rms


def test_a_zero_floor_judges_relative_figures_alone_and_nan_always_fails():
    ref = np.full(100, 1e-7, dtype=np.float32)
    out = ref * 1.01
    assert not compare({"y": ref}, {"y": out}, Tolerance(max_rel_l2=1e-4, floor=0.0))
    assert compare({"y": ref}, {"y": out}, Tolerance(max_rel_l2=1e-4, floor=1e-8))
    nan = out.copy()
    nan[3] = np.nan
    res = compare({"y": ref}, {"y": nan}, Tolerance(max_rel_l2=1e-4, min_cosine=0.9, floor=1.0))
    assert not res and "NaN/Inf" in res.message and not res.notes


@pytest.mark.parametrize("seed", range(5))
def test_top1_near_ties_broken_by_noise_agree_and_real_flips_do_not(seed):
    rng = np.random.default_rng(seed)
    ref = rng.standard_normal((50, 10)).astype(np.float32)
    ref[:, 1] = ref[:, 0] = np.max(ref, axis=1) + 1.0  # a tie at the top of every row
    ref[:, 1] += 1e-6 * rng.random(50).astype(np.float32)
    out = ref + rng.standard_normal(ref.shape).astype(np.float32) * 2e-6  # fp32 noise breaks ties either way
    tol = default_tolerance(Precision.FP32)
    assert compare({"y": ref}, {"y": out}, tol, classification=True).outputs[0].top1_agreement == 1.0
    flipped = out.copy()
    flipped[:10, 5] = flipped[:10, 0] + 0.5  # ten rows pick a class the reference scores far lower
    res = compare({"y": ref}, {"y": flipped}, tol, classification=True)
    assert res.outputs[0].top1_agreement == pytest.approx(0.8) and not res
