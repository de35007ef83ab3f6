"""`digits-cnn`: a small CNN trained in seconds on scikit-learn's bundled 8x8 digits (deterministic, cached).

The 1,797 images are split 80/20 with a fixed seed; the model trains on the 80 % and its task accuracy is
judged on the held-out 20 % (360 images) for every runtime and precision, beside output drift. Trained
weights are cached in the ArtifactCache (kind "weights"), keyed by this file's source, the config and the
torch version, so every process of a run (and later runs) uses byte-identical weights.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import numpy as np

from harness.model import BATCH, ModelSpec, TensorSpec

CONFIG = {"channels": (16, 32), "hidden": 64, "classes": 10, "epochs": 40, "batch": 64, "lr": 3e-3,
          "test_fraction": 0.2, "split_seed": 0, "seed": 0}


@lru_cache(maxsize=1)
def _split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x_train, y_train, x_eval, y_eval): images scaled to [0, 1] as float32 [N, 1, 8, 8], labels int64."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None, :, :]
    y = digits.target.astype(np.int64)
    x_tr, x_ev, y_tr, y_ev = train_test_split(x, y, test_size=CONFIG["test_fraction"],
                                              random_state=CONFIG["split_seed"], stratify=y)
    return x_tr, y_tr, x_ev, y_ev


def _net():
    from torch import nn

    class DigitsNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            c1, c2, hidden = *CONFIG["channels"], CONFIG["hidden"]
            self.net = nn.Sequential(
                nn.Conv2d(1, c1, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),   # 16 x 4 x 4
                nn.Conv2d(c1, c2, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),  # 32 x 2 x 2
                nn.Flatten(), nn.Linear(c2 * 4, hidden), nn.ReLU(), nn.Linear(hidden, CONFIG["classes"]))

        def forward(self, image):  # the argument's name is the ONNX input's name
            return self.net(image)

    return DigitsNet()


def _train(path) -> dict[str, Any]:
    """Train on the training split (single thread: the weights do not depend on the machine's core count)."""
    import torch

    x_tr, y_tr, x_ev, y_ev = _split()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        g = torch.Generator().manual_seed(CONFIG["seed"])
        torch.manual_seed(CONFIG["seed"])
        net = _net()
        opt = torch.optim.Adam(net.parameters(), lr=CONFIG["lr"])
        x, y = torch.from_numpy(x_tr), torch.from_numpy(y_tr)
        net.train()
        for _ in range(CONFIG["epochs"]):
            order = torch.randperm(len(x), generator=g)
            for i in range(0, len(x), CONFIG["batch"]):
                idx = order[i:i + CONFIG["batch"]]
                opt.zero_grad()
                torch.nn.functional.cross_entropy(net(x[idx]), y[idx]).backward()
                opt.step()
        net.eval()
        with torch.no_grad():
            acc = float((net(torch.from_numpy(x_ev)).argmax(1).numpy() == y_ev).mean())
        buf = io.BytesIO()
        torch.save(net.state_dict(), buf)
    finally:
        torch.set_num_threads(threads)
    path.write_bytes(buf.getvalue())
    return {"eval_top1_accuracy": acc, "train_samples": len(x_tr), "eval_samples": len(x_ev)}


def trained_weights():
    """The cached weights Artifact (trains on a miss: a few seconds)."""
    import inspect
    import sys

    import torch

    from harness.artifacts.cache import ArtifactCache

    source = inspect.getsource(sys.modules[__name__]).encode()
    key = {"source_sha256": hashlib.sha256(source).hexdigest(), "config": CONFIG, "torch": torch.__version__,
           "step": "DigitsCnnWeights/1"}
    return ArtifactCache.active().get_or_build("weights", "digits-cnn", key, "weights.pt", _train)


def build():
    from harness.artifacts.cache import load_torch_weights

    net = _net()
    state = load_torch_weights(trained_weights().path)
    net.load_state_dict(state)
    return net.eval()


def make_feed(dims: Mapping[str, int], seed: int) -> dict[str, np.ndarray]:
    """Real digits from the held-out split, drawn with the seed (the feed looks like production traffic)."""
    _, _, x_ev, _ = _split()
    idx = np.random.default_rng([seed, 8]).integers(0, len(x_ev), size=int(dims["batch"]))
    return {"image": np.ascontiguousarray(x_ev[idx])}


def encode_pgm(image: np.ndarray, maxval: int = 16) -> bytes:
    """One 8x8 image (values 0..maxval) as a binary PGM (Netpbm P5): what a client would send."""
    h, w = image.shape
    return f"P5\n{w} {h}\n{maxval}\n".encode() + np.asarray(image, dtype=np.uint8).tobytes()


def decode_pgm(data: bytes) -> np.ndarray:
    """A binary PGM (P5, maxval < 256) as float32 [1, H, W] scaled to [0, 1] by its maxval."""
    fields: list[bytes] = []
    pos = 0
    while len(fields) < 4:  # magic, width, height, maxval; '#' comments to the end of the line
        while data[pos:pos + 1].isspace():
            pos += 1
        if data[pos:pos + 1] == b"#":
            pos = data.index(b"\n", pos)
            continue
        end = pos
        while end < len(data) and not data[end:end + 1].isspace():
            end += 1
        fields.append(data[pos:end])
        pos = end
    if fields[0] != b"P5":
        raise ValueError(f"not a binary PGM (magic {fields[0]!r})")
    w, h, maxval = (int(f) for f in fields[1:])
    pixels = np.frombuffer(data, dtype=np.uint8, count=w * h, offset=pos + 1)
    return (pixels.reshape(1, h, w).astype(np.float32) / np.float32(maxval))


def _raw_images(dims: Mapping[str, int], seed: int) -> list[bytes]:
    """The same held-out digits make_feed draws, PGM-encoded (values 0..16, as the data set stores them)."""
    _, _, x_ev, _ = _split()
    idx = np.random.default_rng([seed, 8]).integers(0, len(x_ev), size=int(dims["batch"]))
    return [encode_pgm(np.rint(x_ev[i, 0] * 16)) for i in idx]


def _preprocess(images: list[bytes], dims: Mapping[str, int]) -> dict[str, np.ndarray]:
    return {"image": np.stack([decode_pgm(b) for b in images])}


def _postprocess(outputs: Mapping[str, Any], feed: Mapping[str, np.ndarray]) -> np.ndarray:
    return np.asarray(outputs["logits"]).argmax(axis=-1)


def pipeline():
    from harness.model import Pipeline

    return Pipeline(raw=_raw_images, pre=_preprocess, post=_postprocess,
                    steps="decode PGM bytes, scale to [0, 1] -> model -> argmax")


def eval_split():
    from harness.accuracy.task import EvalSplit

    _, _, x_ev, y_ev = _split()
    return EvalSplit(inputs={"image": x_ev}, labels=y_ev, description="sklearn digits, held-out 20 % (360)")


DIGITS_CNN = ModelSpec(
    name="digits-cnn",
    build=build,
    inputs=(TensorSpec("image", (BATCH, 1, 8, 8)),),
    outputs=("logits",),
    make_feed=make_feed,
    task="classification",
    eval_split=eval_split,
    pipeline=pipeline,
    config=CONFIG,
    tags=frozenset({"vision", "trained"}),
    description="2-conv CNN trained on sklearn digits (8x8, 10 classes), top-1 on a held-out split",
)
