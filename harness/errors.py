"""Exceptions the harness raises on purpose, each saying what is wrong and what to do next."""

from __future__ import annotations

from collections.abc import Iterable


def did_you_mean(word: str, valid: Iterable[str]) -> str:
    """" (did you mean 'ort-cpu'?)" when `word` is a near miss of one or two of `valid` (difflib's ratio, as
    argparse does in Python 3.14), else "": appended to an unknown-name error before its list of valid names."""
    import difflib

    close = difflib.get_close_matches(str(word), list(dict.fromkeys(valid)), n=2, cutoff=0.6)
    return f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""


def install_hint(extra: str) -> str:
    """The command that installs the optional extra `extra` from a checkout, with the constraints that pin the
    CPU torch wheel (an unpinned install pulls a multi-GB CUDA torch): `pip install -c constraints/cpu.txt -e
    ".[extra]"`."""
    return f'pip install -c constraints/cpu.txt -e ".[{extra}]"'


class HarnessError(Exception):
    """Base class for errors the harness reports without a traceback."""


class UsageError(HarnessError):
    """Bad options or names given by the user (CLI exit status 2, pytest usage error)."""


class ModelError(HarnessError):
    """A model file or module that cannot be used; the message names the file and the problem (one line).

    `detail`: the traceback of user code that raised (a factory), for the case's log file.
    """

    def __init__(self, message: str, detail: str | None = None) -> None:
        super().__init__(message)
        self.detail = detail


class UnsupportedModelError(ModelError):
    """A runtime found at activation that it cannot take this model (e.g. its importer lacks an op pattern):
    the case is a skip with this reason, like an unsupported precision, not an error of the harness."""


class ResultsError(HarnessError):
    """A results file that cannot be read: missing, truncated, unknown schema version."""


class CacheEntryError(HarnessError):
    """A cache entry that fails its check on read (changed bytes, missing file, refused by its loader); the
    message names the entry and the `harness cache clear` command that removes it."""


class CacheDirError(HarnessError):
    """The harness cache folder (or a folder under it) cannot be created or written: the message names the
    folder, the system's reason, and how to give another (--cache-dir, $HARNESS_CACHE_DIR)."""


class SignalStop(KeyboardInterrupt):
    """The KeyboardInterrupt a run session raises for the SIGINT or SIGTERM that stops it, carrying the signal, so
    that a command the signal ends exits 128 + its number (130, 143) wherever the interrupt is caught."""

    def __init__(self, signum: int) -> None:
        import signal

        super().__init__(f"signal {signal.Signals(signum).name}")
        self.signum = signum
