"""On-disk artifact cache: one folder per (kind, key), published with an atomic rename."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import CacheDirError, CacheEntryError

ENV_CACHE_DIR = "HARNESS_CACHE_DIR"
# The kinds of entry the harness's own builds write (ROOT/KIND/...); a test keeps the list true to the calls of
# get_or_build. `harness cache ls|clear --kind` takes these and any other kind present in the cache (a plugin's).
KNOWN_KINDS = ("onnx", "onnx-fp16", "onnx-int8", "onnx-onnxsim", "onnx-onnxslim", "onnx-transformer", "tflite",
               "trt-engine", "tvm", "tvm-tuned", "weights", "ceilings")


def default_cache_dir() -> Path:
    """$HARNESS_CACHE_DIR, else $XDG_CACHE_HOME/harness, else ~/.cache/harness."""
    if os.environ.get(ENV_CACHE_DIR):
        return Path(os.environ[ENV_CACHE_DIR]).expanduser()
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "harness"


def cache_dir_error(folder: Path, exc: OSError) -> CacheDirError:
    """The one-line error of a cache folder that cannot be made or written (read-only, a file in the way, no
    permission, a full disk)."""
    why = exc.strerror or type(exc).__name__
    return CacheDirError(f"cache folder {folder} is not writable ({why}): free it or give another with "
                         f"--cache-dir or ${ENV_CACHE_DIR}")


def writable_dir(folder: Path) -> Path:
    """`folder`, made if missing and checked writable by creating and removing a file in it; CacheDirError
    naming it otherwise (before any work that would be lost at its first write)."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write-probe-{uuid.uuid4().hex[:8]}"
        probe.touch()
        probe.unlink()
    except OSError as exc:
        raise cache_dir_error(folder, exc) from None
    return folder


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
            return Artifact(final_dir / filename, key, True, 0.0, verified_meta(final_dir, kind, filename))
        tmp_dir = final_dir.parent / f".tmp-{final_dir.name}-{uuid.uuid4().hex[:8]}"
        try:
            final_dir.parent.mkdir(parents=True, exist_ok=True)
            tmp_dir.mkdir()
        except OSError as exc:
            raise cache_dir_error(final_dir.parent, exc) from None
        try:
            t0 = time.perf_counter()
            extra = build(tmp_dir / filename) or {}
            build_s = time.perf_counter() - t0
            meta = {"kind": kind, "label": label, "key": key, "key_parts": dict(key_parts),
                    "build_s": round(build_s, 3), "created": time.time(), **extra,
                    "files": {p.relative_to(tmp_dir).as_posix(): _file_record(p)
                              for p in sorted(tmp_dir.rglob("*")) if p.is_file() and not p.is_symlink()}}
            (tmp_dir / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True, default=str))
            try:
                os.rename(tmp_dir, final_dir)
            except OSError:  # another process published the same key first: use theirs
                if not meta_path.is_file():
                    raise
                shutil.rmtree(tmp_dir, ignore_errors=True)
                return Artifact(final_dir / filename, key, True, 0.0, verified_meta(final_dir, kind, filename))
        except BaseException:
            shutil.rmtree(tmp_dir, ignore_errors=True)
            raise
        return Artifact(final_dir / filename, key, False, build_s, meta)

    def discard(self, kind: str, label: str, key_parts: Mapping[str, Any]) -> bool:
        """Remove the one entry of (kind, label, key_parts), as clear() does (renamed aside, then deleted);
        True if there was one. The next get_or_build builds it again."""
        folder = self.root / kind / f"{_safe(label)}-{cache_key(key_parts)[:16]}"
        if not folder.is_dir():
            return False
        trash = folder.parent / f".trash-{folder.name}-{uuid.uuid4().hex[:8]}"
        try:
            os.rename(folder, trash)
        except OSError:  # removed by someone else meanwhile
            return False
        shutil.rmtree(trash, ignore_errors=True)
        return True

    def kinds(self) -> list[str]:
        """The kinds an entry may have: the harness's own and any other present in this cache."""
        present = sorted(p.name for p in self.root.glob("*") if p.is_dir() and not p.name.startswith(".")) \
            if self.root.is_dir() else []
        return list(dict.fromkeys([*KNOWN_KINDS, *present]))

    def check_kind(self, kind: str | None, option: str = "--kind") -> None:
        """UsageError for a kind no entry can have, with the near miss and the valid kinds."""
        from harness.errors import UsageError, did_you_mean

        if kind is None:
            return
        valid = self.kinds()
        if kind not in valid:
            raise UsageError(f"{option} {kind!r}: no such kind of cache entry{did_you_mean(kind, valid)}; kinds: "
                             f"{', '.join(valid)}")

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


_VERIFIED: dict[Path, tuple[int, int]] = {}  # file -> (size, mtime_ns) when its sha256 last matched


def clear_hint(kind: str) -> str:
    return f"clear it with `harness cache clear --kind {kind}`"


def verified_meta(folder: Path, kind: str, filename: str) -> dict[str, Any]:
    """An entry's meta.json, after checking every file it records (size and sha256) and the artifact's presence.

    A file's hash is checked once per process while its size and mtime stay the same. Raises CacheEntryError
    naming the entry and the command that clears it. Entries written before files were recorded are checked
    for presence only.
    """
    meta_path = folder / "meta.json"
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError) as exc:
        raise CacheEntryError(f"{meta_path}: unreadable cache metadata ({_one_line(str(exc))}); "
                              f"{clear_hint(kind)}") from None
    if not isinstance(meta, dict):
        raise CacheEntryError(f"{meta_path}: cache metadata is not a JSON object; {clear_hint(kind)}")
    files = meta.get("files") or {}
    if filename not in files and not (folder / filename).is_file():
        raise CacheEntryError(f"{folder / filename}: missing from its cache entry; {clear_hint(kind)}")
    for name, rec in files.items():
        path = folder / name
        try:
            st = path.stat()
        except OSError:
            raise CacheEntryError(f"{path}: missing from its cache entry; {clear_hint(kind)}") from None
        stamp = (st.st_size, st.st_mtime_ns)
        if _VERIFIED.get(path) == stamp:
            continue
        if st.st_size != rec.get("size"):
            raise CacheEntryError(f"{path}: cache entry changed since it was written ({st.st_size} bytes, "
                                  f"recorded {rec.get('size')}); {clear_hint(kind)}")
        if _sha256(path) != rec.get("sha256"):
            raise CacheEntryError(f"{path}: cache entry changed since it was written (sha256 differs from the "
                                  f"recorded one); {clear_hint(kind)}")
        _VERIFIED[path] = stamp
    return meta


def load_torch_weights(path: Path | str, kind: str = "weights") -> Any:
    """torch.load(weights_only=True) of a cached file; a refusal is one line with the path and the fix."""
    import torch

    try:
        return torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - UnpicklingError, RuntimeError (zip), EOFError, ...
        raise CacheEntryError(f"{path}: cache entry refused by torch.load(weights_only=True): "
                              f"{_one_line(str(exc), prefer=_TORCH_REFUSAL)}; {clear_hint(kind)}") from None


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_TORCH_REFUSAL = re.compile(r"unsupported|WeightsUnpickler|GLOBAL|blocked|invalid load key|failed finding central",
                            re.IGNORECASE)


def _one_line(text: str, prefer: re.Pattern[str] | None = None) -> str:
    """Terminal colour codes stripped; the most telling line (one matching `prefer`, else the first)."""
    lines = [ln.strip() for ln in _ANSI.sub("", text).splitlines() if ln.strip()]
    if not lines:
        return "(no message)"
    chosen = next((ln for ln in lines if prefer is not None and prefer.search(ln)), lines[0])
    return chosen[:300]


def _file_record(path: Path) -> dict[str, Any]:
    return {"size": path.stat().st_size, "sha256": _sha256(path)}


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


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
