"""Seeded token feeds for the text models: ids inside the vocabulary, attention masks with per-row padding."""

from __future__ import annotations

import functools
import zlib
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np


def _rng(seed: int, name: str, shape: tuple[int, ...]) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(f"{name}:{shape}".encode())])


def encoder_feed(dims: Mapping[str, int], seed: int, *, vocab: int, cls_id: int, sep_id: int,
                 pad_id: int = 0, first_token: int = 1000) -> dict[str, np.ndarray]:
    """A padded batch as a tokenizer makes one: [CLS] tokens [SEP] then padding, int64.

    Row 0 fills the whole sequence (the longest sentence sets the padded length); the other rows are
    between a quarter of the sequence and all of it, so attention masks have realistic trailing zeros.
    Token ids are drawn from [first_token, vocab) (clear of the special tokens).
    """
    batch, seq = int(dims["batch"]), int(dims["seq"])
    rng = _rng(seed, "input_ids", (batch, seq))
    ids = rng.integers(first_token, vocab, size=(batch, seq), dtype=np.int64)
    lengths = rng.integers(max(2, seq // 4), seq + 1, size=batch)
    lengths[0] = seq
    mask = (np.arange(seq)[None, :] < lengths[:, None]).astype(np.int64)
    ids[:, 0] = cls_id
    ids[np.arange(batch), lengths - 1] = sep_id
    ids[mask == 0] = pad_id
    return {"input_ids": ids, "attention_mask": mask}


def decoder_feed(dims: Mapping[str, int], seed: int, *, vocab: int, bos_id: int) -> dict[str, np.ndarray]:
    """Prompts for a decoder-only LM: BOS, then int64 ids in [0, bos_id) (below the special tokens).

    No padding: a batch of prompts of equal length (what a prefill benchmark feeds).
    """
    batch, seq = int(dims["batch"]), int(dims["seq"])
    ids = _rng(seed, "input_ids", (batch, seq)).integers(0, min(vocab, bos_id), size=(batch, seq),
                                                         dtype=np.int64)
    ids[:, 0] = bos_id
    return {"input_ids": ids}


def encoder_io(config: Mapping[str, Any]) -> tuple[tuple[Any, ...], Callable[[Mapping[str, int], int], dict]]:
    """The inputs (input_ids, attention_mask: [batch, seq] int64) and the seeded feed of a BERT-style encoder
    whose config names vocab_size, cls_id, sep_id and pad_id."""
    from harness.model import BATCH, SEQ, TensorSpec

    inputs = (TensorSpec("input_ids", (BATCH, SEQ), "int64", 0, config["vocab_size"]),
              TensorSpec("attention_mask", (BATCH, SEQ), "int64", 0, 2))
    return inputs, functools.partial(encoder_feed, vocab=config["vocab_size"], cls_id=config["cls_id"],
                                     sep_id=config["sep_id"], pad_id=config["pad_id"])
