"""`harness cache ls|clear` over ArtifactCache.list/clear, and what clear guarantees to a concurrent run."""

from __future__ import annotations

import os
import time

from harness.artifacts import ArtifactCache
from harness.cli import main


def _fill(root):
    cache = ArtifactCache(root)

    def write(text):
        return lambda path: path.write_text(text) and None

    a = cache.get_or_build("onnx", "mlp", {"k": 1}, "model.onnx", write("x" * 1000))
    b = cache.get_or_build("weights", "digits-cnn", {"k": 2}, "weights.pt", write("w" * 10))
    return cache, a, b


def test_list_shows_kind_label_key_size_age_path(tmp_path):
    cache, a, b = _fill(tmp_path)
    entries = cache.list()
    assert [(e.kind, e.label) for e in entries] == [("onnx", "mlp"), ("weights", "digits-cnn")]
    onnx = entries[0]
    assert onnx.key == a.key and onnx.path == a.path.parent and onnx.size_bytes > 1000 and onnx.age_s < 60
    assert [e.kind for e in cache.list("weights")] == ["weights"]


def test_clear_by_kind_and_all(tmp_path):
    cache, a, b = _fill(tmp_path)
    assert cache.clear("weights")[0] == 1
    assert [e.kind for e in cache.list()] == ["onnx"] and not b.path.exists() and a.path.exists()
    removed, freed = cache.clear()
    assert removed == 1 and freed > 1000 and cache.list() == []
    again = cache.get_or_build("onnx", "mlp", {"k": 1}, "model.onnx",
                               lambda p: p.write_text("rebuilt") and None)
    assert not again.cache_hit and again.path.read_text() == "rebuilt"  # a later lookup rebuilds


def test_clear_keeps_open_files_readable_and_builds_in_progress(tmp_path):
    cache, a, _ = _fill(tmp_path)
    building = tmp_path / "onnx" / ".tmp-resnet18-abcd-1234"  # another run's export, not yet published
    building.mkdir()
    (building / "model.onnx").write_text("half")
    stale = tmp_path / "onnx" / ".tmp-old-dead"  # a build killed long ago
    stale.mkdir()
    os.utime(stale, (time.time() - 7200, time.time() - 7200))
    with open(a.path) as reader:  # a concurrent run that has the artifact open
        cache.clear()
        assert reader.read() == "x" * 1000
    assert building.is_dir() and not stale.exists()
    assert not any(p.name.startswith(".trash-") for p in (tmp_path / "onnx").iterdir())


def test_cli_cache_ls_and_clear(tmp_path, capsys):
    _fill(tmp_path)
    assert main(["cache", "ls", "--cache-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "KIND" in out and "digits-cnn" in out and "mlp" in out and "2 entries" in out
    assert main(["cache", "clear", "--kind", "onnx", "--cache-dir", str(tmp_path)]) == 0
    assert "removed 1 entry" in capsys.readouterr().out
    assert main(["cache", "ls", "--cache-dir", str(tmp_path), "--kind", "onnx"]) == 0
    assert "no cache entries of kind 'onnx'" in capsys.readouterr().out
