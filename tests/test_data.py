import numpy as np

from harness.data import feed_digest, make_feed
from harness.model import BATCH, SEQ, ModelSpec, TensorSpec

SPEC = ModelSpec(name="t", build=lambda: None, outputs=("y",), inputs=(
    TensorSpec("input_ids", (BATCH, SEQ), "int64", low=0, high=1000),
    TensorSpec("x", (BATCH, 4), "float32")))


def test_same_seed_same_bytes_and_digest():
    a = make_feed(SPEC, {"batch": 2, "seq": 5}, seed=7)
    b = make_feed(SPEC, {"batch": 2, "seq": 5}, seed=7)
    assert feed_digest(a) == feed_digest(b)
    assert a["input_ids"].dtype == np.int64 and a["input_ids"].shape == (2, 5)
    assert a["input_ids"].min() >= 0 and a["input_ids"].max() < 1000
    assert a["x"].dtype == np.float32 and a["x"].shape == (2, 4)


def test_other_seed_or_shape_changes_the_feed():
    a = make_feed(SPEC, {"batch": 2, "seq": 5}, seed=7)
    assert feed_digest(a) != feed_digest(make_feed(SPEC, {"batch": 2, "seq": 5}, seed=8))
    assert feed_digest(a) != feed_digest(make_feed(SPEC, {"batch": 3, "seq": 5}, seed=7))
