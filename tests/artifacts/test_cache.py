"""Artifact cache: a second request is a hit; builds publish atomically; failures leave nothing behind."""

from __future__ import annotations

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
