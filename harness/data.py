"""Seeded input feeds, identical for every runtime of a run, and their digests."""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np

from harness.model import ModelSpec


class FeedOptions(Protocol):
    """What a run says about its inputs (harness.config.InputsConfig): the seed, --feeds, the overrides."""

    seed: int
    feeds: str | None

    @property
    def overrides(self) -> tuple[Any, ...]: ...

Feed = dict[str, np.ndarray]


def make_feed(spec: ModelSpec, dims: Mapping[str, int], seed: int) -> Feed:
    """The feed for one shape: the same (spec, dims, seed) gives byte-identical arrays in any process.

    Each input draws from its own generator, seeded by (seed, input name, shape), so adding an input or a
    shape never changes another input's values.
    """
    if spec.make_feed is not None:
        feed = {k: np.ascontiguousarray(v) for k, v in spec.make_feed(dims, seed).items()}
    else:
        feed = {}
        for t in spec.inputs:
            shape = t.concrete_shape(dims)
            key = zlib.crc32(f"{t.name}:{shape}".encode())
            rng = np.random.default_rng([seed, key])
            dtype = np.dtype(t.dtype)
            if t.value is not None:
                arr = np.full(shape, t.value, dtype=dtype)
            elif t.fill == "arange":
                arr = np.broadcast_to(np.arange(shape[-1] if shape else 1), shape).astype(dtype)
            elif dtype == np.bool_:
                arr = rng.integers(0, 2, size=shape).astype(dtype)
            elif np.issubdtype(dtype, np.integer):
                arr = rng.integers(t.low, t.high, size=shape).astype(dtype)
            else:
                arr = rng.standard_normal(size=shape, dtype=np.float32).astype(dtype)
            feed[t.name] = arr
    missing = [t.name for t in spec.inputs if t.name not in feed]
    if missing:
        raise ValueError(f"model {spec.name!r}: feed lacks inputs {missing}")
    return feed


def feed_digest(feed: Mapping[str, np.ndarray]) -> str:
    """sha256 over names, dtypes, shapes and bytes: equal digests prove runtimes saw the same inputs."""
    h = hashlib.sha256()
    for name in sorted(feed):
        a = np.ascontiguousarray(feed[name])
        h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def case_feed(spec: ModelSpec, dims: Mapping[str, int], inputs: FeedOptions) -> tuple[Feed, dict[str, Any]]:
    """One case's feed under the run's input options: `--feeds` arrays cut to the case's batch, or the
    seeded feed; then `--input-value` / `--input-range` overrides. Also returns what was used (for details)."""
    overrides = {o.name: o for o in inputs.overrides}
    info: dict[str, Any] = {}
    if inputs.feeds:
        from harness.feeds import cut, feeds_for_run

        feed, info["feeds"] = cut(feeds_for_run(inputs.feeds), spec, dims, generated=overrides)
    else:
        feed = make_feed(spec, dims, inputs.seed)
    used = []
    for t in spec.inputs:
        o = overrides.get(t.name)
        if o is not None:
            feed[t.name] = np.ascontiguousarray(o.fill(t.concrete_shape(dims), t.dtype, inputs.seed))
            used.append(o.describe(t.dtype))
    if used:
        info["input_overrides"] = used
    return feed, info


def inputs_fed(spec: ModelSpec, inputs: FeedOptions) -> list[str]:
    """How each integer input of `spec` is fed in this run, e.g. `token_type_ids: int64 in [0, 2)`."""
    overrides = {o.name: o for o in inputs.overrides}
    feeds = inputs.feeds
    out = []
    for t in spec.inputs:
        if not (t.dtype == "bool" or "int" in t.dtype):
            continue
        if t.name in overrides:
            out.append(overrides[t.name].describe(t.dtype))
        elif feeds:
            out.append(f"{t.name}: {t.dtype} from {feeds}")
        else:
            out.append(t.describe())
    return out
