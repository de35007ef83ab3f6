"""Exceptions the harness raises on purpose, each saying what is wrong and what to do next."""


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
