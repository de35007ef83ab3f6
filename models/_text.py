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


# A small English vocabulary the local tokenizer is trained on and the raw texts are drawn from.
WORDS = (
    "the of and to in is that for it as was with be by on not he this are or his from at which but have an "
    "they you were her she there been one all we their has would when if so no will more other its time can "
    "model runtime latency throughput memory batch sequence token accuracy precision engine kernel graph "
    "tensor layer attention encoder decoder inference benchmark measure result report baseline regression "
    "machine device thread cache export session provider operator shape input output value sample percentile "
    "median noise quick slow fast large small first last new old good high low long short right left early "
    "late people world year day way water city country system program question number family government "
    "school student company problem service market house power money morning evening music story river"
).split()


@functools.lru_cache(maxsize=1)
def local_tokenizer() -> Any:
    """A BERT-style WordPiece tokenizer ([CLS] text [SEP], lower case) trained here in well under a second on
    seeded sentences over WORDS with the `tokenizers` library: nothing is downloaded."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    trainer = trainers.WordPieceTrainer(vocab_size=2000, special_tokens=specials, show_progress=False)
    tok.train_from_iterator(random_texts(2000, 24, seed=1234), trainer=trainer)
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[
        ("[CLS]", cls_id), ("[SEP]", sep_id)])
    return tok


def random_texts(n: int, words: int, seed: int) -> list[str]:
    """`n` seeded sentences of between words/2 and `words` words over WORDS, with some punctuation."""
    rng = np.random.default_rng([seed, 77])
    out = []
    for _ in range(n):
        k = int(rng.integers(max(1, words // 2), words + 1))
        text = " ".join(WORDS[i] for i in rng.integers(0, len(WORDS), size=k))
        out.append(text.capitalize() + rng.choice([".", "?", "!", ", and more."]))
    return out


def text_pipeline(hidden_output: str) -> Any:
    """End-to-end steps of an encoder: tokenise raw texts (padded/truncated to the case's seq), run, then
    mean-pool `hidden_output` over the attention mask and L2-normalise (a sentence embedding)."""
    from harness.model import Pipeline

    def raw(dims: Mapping[str, int], seed: int) -> list[str]:
        return random_texts(int(dims["batch"]), max(2, int(dims["seq"]) - 2), seed)

    def pre(texts: list[str], dims: Mapping[str, int]) -> dict[str, np.ndarray]:
        seq = int(dims["seq"])
        encodings = local_tokenizer().encode_batch(texts)
        ids = np.zeros((len(texts), seq), dtype=np.int64)
        mask = np.zeros((len(texts), seq), dtype=np.int64)
        for i, e in enumerate(encodings):
            n = min(len(e.ids), seq)
            ids[i, :n] = e.ids[:n]
            mask[i, :n] = 1
        return {"input_ids": ids, "attention_mask": mask}

    def post(outputs: Mapping[str, Any], feed: Mapping[str, np.ndarray]) -> np.ndarray:
        hidden = np.asarray(outputs[hidden_output], dtype=np.float32)
        mask = feed["attention_mask"][..., None].astype(np.float32)
        pooled = (hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1.0)
        return pooled / np.maximum(np.linalg.norm(pooled, axis=-1, keepdims=True), 1e-12)

    return Pipeline(raw=raw, pre=pre, post=post,
                    steps="WordPiece tokenisation (local tokenizer), pad to seq -> model -> masked mean pool, "
                          "L2 normalise")
