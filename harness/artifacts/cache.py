"""On-disk artifact cache: one folder per (kind, key), published with an atomic rename."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ENV_CACHE_DIR = "HARNESS_CACHE_DIR"


def default_cache_dir() -> Path:
    """$HARNESS_CACHE_DIR, else $XDG_CACHE_HOME/harness, else ~/.cache/harness."""
    if os.environ.get(ENV_CACHE_DIR):
        return Path(os.environ[ENV_CACHE_DIR]).expanduser()
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "harness"


_ACTIVE_ROOT: Path | None = None


def set_active_cache_dir(root: Path | str | None) -> None:
    """The run's cache folder (--cache-dir) for code that has no RunConfig at hand (a zoo model's build)."""
    global _ACTIVE_ROOT
    _ACTIVE_ROOT = Path(root) if root is not None else None


def cache_key(parts: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


@dataclass(frozen=True)
class Artifact:
    """A built file and whether it came from the cache."""

    path: Path
    key: str
    cache_hit: bool
    build_s: float  # seconds spent building now (0.0 on a cache hit)
    meta: Mapping[str, Any]


class ArtifactCache:
    """Folders `ROOT/KIND/LABEL-KEY16/` holding the artifact file and meta.json.

    A build writes into a private temporary folder and renames it into place; rename is atomic, so two runs
    sharing the cache never see half-written files, and the loser of a race discards its copy.
    """

    def __init__(self, root: Path | None = None) -> None:
        self.root = Path(root) if root is not None else default_cache_dir()

    @classmethod
    def active(cls) -> "ArtifactCache":
        """The cache of the run in progress (set_active_cache_dir), else the default folder."""
        return cls(_ACTIVE_ROOT)

    def get_or_build(
        self,
        kind: str,
        label: str,
        key_parts: Mapping[str, Any],
        filename: str,
        build: Callable[[Path], Mapping[str, Any] | None],
    ) -> Artifact:
        """Return the cached artifact for `key_parts`, building it with `build(tmp_path)` if absent.

        `build` writes the file at the path it is given and may return extra metadata to store.
        """
        key = cache_key(key_parts)
        final_dir = self.root / kind / f"{_safe(label)}-{key[:16]}"
        meta_path = final_dir / "meta.json"
        if meta_path.is_file():
            meta = json.loads(meta_path.read_text())
            return Artifact(final_dir / filename, key, True, 0.0, meta)
        final_dir.parent.mkdir(parents=True, exist_ok=True)
        tmp_dir = final_dir.parent / f".tmp-{final_dir.name}-{uuid.uuid4().hex[:8]}"
        tmp_dir.mkdir()
        try:
            t0 = time.perf_counter()
            extra = build(tmp_dir / filename) or {}
            build_s = time.perf_counter() - t0
            meta = {"kind": kind, "label": label, "key": key, "key_parts": dict(key_parts),
                    "build_s": round(build_s, 3), "created": time.time(), **extra}
            (tmp_dir / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True, default=str))
            try:
                os.rename(tmp_dir, final_dir)
            except OSError:  # another process published the same key first: use theirs
                if not meta_path.is_file():
                    raise
                shutil.rmtree(tmp_dir, ignore_errors=True)
                meta = json.loads(meta_path.read_text())
                return Artifact(final_dir / filename, key, True, 0.0, meta)
        except BaseException:
            shutil.rmtree(tmp_dir, ignore_errors=True)
            raise
        return Artifact(final_dir / filename, key, False, build_s, meta)

    def entries(self) -> list[Path]:
        if not self.root.is_dir():
            return []
        return sorted(p for p in self.root.glob("*/*") if p.is_dir() and not p.name.startswith("."))

    def list(self, kind: str | None = None) -> list[CacheEntry]:
        """Published entries (oldest first), optionally of one kind; builds in progress are not listed."""
        out = []
        for folder in self.entries():
            if kind is not None and folder.parent.name != kind:
                continue
            try:
                meta = json.loads((folder / "meta.json").read_text())
            except (OSError, ValueError):
                meta = {}
            out.append(CacheEntry(kind=folder.parent.name, label=str(meta.get("label", folder.name)),
                                  key=str(meta.get("key", "")), size_bytes=_tree_size(folder),
                                  created=float(meta.get("created") or _mtime(folder)), path=folder))
        return sorted(out, key=lambda e: e.created)

    def clear(self, kind: str | None = None, stale_tmp_s: float = 3600.0) -> tuple[int, int]:
        """Remove published entries (of one kind, or all); returns (entries removed, bytes freed).

        Each entry is first renamed to a hidden `.trash-*` name (atomic), then deleted: a concurrent run never
        sees a half-deleted entry. It finds the entry whole or absent (then rebuilds it), and files it already
        opened stay readable until it closes them (POSIX unlink). Builds in progress (`.tmp-*`) are left
        alone unless older than `stale_tmp_s` (a killed build).
        """
        removed, freed = 0, 0
        for entry in self.list(kind):
            trash = entry.path.parent / f".trash-{entry.path.name}-{uuid.uuid4().hex[:8]}"
            try:
                os.rename(entry.path, trash)
            except OSError:  # removed by someone else meanwhile
                continue
            shutil.rmtree(trash, ignore_errors=True)
            removed += 1
            freed += entry.size_bytes
        now = time.time()
        kinds = [self.root / kind] if kind else [p for p in self.root.glob("*") if p.is_dir()]
        for folder in kinds:
            for junk in folder.glob(".*"):
                if junk.name.startswith(".trash-") or (junk.name.startswith(".tmp-")
                                                       and now - _mtime(junk) > stale_tmp_s):
                    shutil.rmtree(junk, ignore_errors=True)
        return removed, freed


@dataclass(frozen=True)
class CacheEntry:
    """One published cache entry, as `harness cache ls` shows it."""

    kind: str
    label: str
    key: str
    size_bytes: int
    created: float  # seconds since the epoch
    path: Path

    @property
    def age_s(self) -> float:
        return max(0.0, time.time() - self.created)


def _tree_size(folder: Path) -> int:
    total = 0
    for p in folder.rglob("*"):
        try:
            if p.is_file() and not p.is_symlink():
                total += p.stat().st_size
        except OSError:
            pass
    return total


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _safe(label: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in label)[:64]
