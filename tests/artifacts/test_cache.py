"""Artifact cache: a second request is a hit; builds publish atomically; failures leave nothing behind."""

from __future__ import annotations

import os
import re

import pytest

from harness.artifacts import ArtifactCache


def test_second_request_is_a_cache_hit(tmp_path):
    cache = ArtifactCache(tmp_path)
    calls = []

    def build(path):
        calls.append(path)
        path.write_text("onnx bytes")
        return {"note": "x"}

    a = cache.get_or_build("onnx", "mlp", {"fp": "abc"}, "model.onnx", build)
    b = cache.get_or_build("onnx", "mlp", {"fp": "abc"}, "model.onnx", build)
    assert not a.cache_hit and b.cache_hit and len(calls) == 1
    assert a.path == b.path and b.path.read_text() == "onnx bytes"
    assert b.meta["note"] == "x" and b.meta["key_parts"] == {"fp": "abc"}
    c = cache.get_or_build("onnx", "mlp", {"fp": "other"}, "model.onnx", build)
    assert not c.cache_hit and c.path != a.path


def test_failed_build_leaves_no_entry(tmp_path):
    cache = ArtifactCache(tmp_path)

    def boom(path):
        path.write_text("half")
        raise RuntimeError("export failed")

    with pytest.raises(RuntimeError):
        cache.get_or_build("onnx", "m", {"k": 1}, "model.onnx", boom)
    assert cache.entries() == []
    assert list((tmp_path / "onnx").iterdir()) == []


def test_race_loser_uses_the_winners_copy(tmp_path):
    cache = ArtifactCache(tmp_path)

    def build_and_lose(path):
        path.write_text("mine")
        # another process publishes the same key while we build
        cache.get_or_build("onnx", "m", {"k": 1}, "model.onnx", lambda p: p.write_text("theirs") and None)

    art = cache.get_or_build("onnx", "m", {"k": 1}, "model.onnx", build_and_lose)
    assert art.cache_hit and art.path.read_text() == "theirs"
    assert len(cache.entries()) == 1


def test_entry_records_its_files_and_a_changed_byte_is_one_line_with_the_fix(tmp_path):
    from harness.errors import CacheEntryError

    cache = ArtifactCache(tmp_path)
    art = cache.get_or_build("weights", "net", {"k": 1}, "weights.pt", lambda p: p.write_bytes(b"\x00" * 64) and None)
    assert art.meta["files"]["weights.pt"]["size"] == 64
    data = bytearray(art.path.read_bytes())
    data[10] ^= 0xFF  # same size, different bytes
    art.path.write_bytes(bytes(data))
    with pytest.raises(CacheEntryError) as info:
        cache.get_or_build("weights", "net", {"k": 1}, "weights.pt", lambda p: pytest.fail("rebuilt"))
    msg = str(info.value)
    assert msg.startswith(f"{art.path}: cache entry changed since it was written (sha256 differs")
    assert msg.endswith("clear it with `harness cache clear --kind weights`") and "\n" not in msg
    art.path.write_bytes(b"short")
    with pytest.raises(CacheEntryError, match=r"\(5 bytes, recorded 64\)"):
        cache.get_or_build("weights", "net", {"k": 1}, "weights.pt", lambda p: None)
    art.path.unlink()
    with pytest.raises(CacheEntryError, match=r"weights.pt: missing from its cache entry"):
        cache.get_or_build("weights", "net", {"k": 1}, "weights.pt", lambda p: None)
    (art.path.parent / "meta.json").write_text("{trunc")
    with pytest.raises(CacheEntryError, match=r"meta.json: unreadable cache metadata .*harness cache clear"):
        cache.get_or_build("weights", "net", {"k": 1}, "weights.pt", lambda p: None)
    assert cache.clear("weights")[0] == 1
    rebuilt = cache.get_or_build("weights", "net", {"k": 1}, "weights.pt", lambda p: p.write_bytes(b"ok") and None)
    assert not rebuilt.cache_hit and rebuilt.path.read_bytes() == b"ok"


class _Poison:
    def __reduce__(self):
        return (os.system, ("echo poisoned",))


def test_poisoned_weights_are_refused_with_the_path_and_no_colour_codes(tmp_path):
    import torch

    from harness.artifacts.cache import _one_line, load_torch_weights
    from harness.errors import CacheEntryError

    cache = ArtifactCache(tmp_path)
    art = cache.get_or_build("weights", "net", {"k": 2}, "weights.pt",
                             lambda p: torch.save({"w": _Poison()}, str(p)) and None)
    hit = cache.get_or_build("weights", "net", {"k": 2}, "weights.pt", lambda p: None)  # bytes as recorded
    with pytest.raises(CacheEntryError) as info:
        load_torch_weights(hit.path)
    msg = str(info.value)
    assert msg.startswith(f"{art.path}: cache entry refused by torch.load(weights_only=True): ")
    assert "system" in msg and msg.endswith("`harness cache clear --kind weights`")
    assert "\n" not in msg and "\x1b" not in msg
    # torch releases that coloured this message: the codes go, the telling line stays
    raw = ("Weights only load failed. \x1b[1mDo it only if you trust the source.\x1b[0m\n\n"
           "WeightsUnpickler error: Unsupported global: GLOBAL posix.system\n\nCheck the documentation")
    assert _one_line(raw, re.compile("unsupported", re.IGNORECASE)) == \
        "WeightsUnpickler error: Unsupported global: GLOBAL posix.system"
    assert _one_line(raw) == "Weights only load failed. Do it only if you trust the source."
