"""Atomic writes: a reader (or a SIGKILL) never sees a half-written results file."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
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


# results.json is rewritten whole after a case (atomic): at most this share of a run's wall time goes to it. A run
# of thousands of millisecond cases (conformance: 1,893) rewrote a file growing to 3.4 MB after every case, 517 s
# for 7 s of cases; a run whose cases take longer than 1 / SAVE_SHARE of a write is written after every one.
SAVE_SHARE = 0.1


class ResultsWriter:
    """results.json of one run folder, rewritten as cases arrive. `save(run, every=False)` (a case's row) waits
    while the last write is more recent than the next one's predicted duration / SAVE_SHARE: at most a second or so of
    millisecond cases is then unwritten, and only until the next row or the run's end (`save(run)`: always
    written; a signal's orderly stop ends the run so)."""

    def __init__(self, out_dir: str | Path, clock: Callable[[], float] = time.monotonic) -> None:
        self.out_dir, self.clock = Path(out_dir), clock
        self.saved_at, self.took, self.rows = float("-inf"), 0.0, 0

    def save(self, run: RunResults, every: bool = True) -> bool:
        """Write `run` (True), or leave it for a later call (False: `every` False and the last write too recent)."""
        start = self.clock()
        # the next write's cost, predicted from the last one's by the rows it holds (the file grows with them)
        cost = self.took * len(run.cases) / max(1, self.rows)
        if not every and start - self.saved_at < cost / SAVE_SHARE:
            return False
        write_results(run, self.out_dir)
        self.saved_at = self.clock()
        self.took, self.rows = self.saved_at - start, len(run.cases)
        return True
