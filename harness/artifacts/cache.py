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
        return sorted(p for p in self.root.glob("*/*") if p.is_dir() and not p.name.startswith(".tmp-"))


def _safe(label: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in label)[:64]
