"""Atomic writes: a reader (or a SIGKILL) never sees a half-written results file."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from harness.results.schema import RunResults


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write to a temporary file in the same folder, fsync it, then rename it over `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    try:
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass
    return path


def write_results(run: RunResults, out_dir: str | Path) -> Path:
    return atomic_write_text(Path(out_dir) / "results.json", run.to_json())
