"""Named baselines (`harness baseline save ... --name main`), loaded by name or path, with what makes the newest run
reproducible for `harness gate`: content-addressed ONNX artifacts, model definitions, releases (docs/nightly-gating.md)."""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import fcntl
import hashlib
import json
import os
import re
import stat
import tempfile
from collections.abc import Iterator
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.display import visible
from harness.errors import ResultsError, UsageError
from harness.results.schema import RunResults, _finite, load_results, results_from_doc
from harness.results.store import atomic_write_text
from harness.results.stored import (
    BundleDoc,
    EnvironmentRecord,
    ReplayDoc,
    RunEnvironmentRecord,
    adapter,
    read_json_object,
    validate,
)

ENV_VAR = "HARNESS_BASELINE_DIR"
BASELINE_SCHEMA = 2  # 2: + "replay" (stored artifacts, releases, feeds); 1 is still read (nothing to replay)
READABLE_SCHEMAS = (1, 2)
BLOBS = "artifacts"  # the blob store's folder under the baselines folder
DEFAULT_DIR = Path(".harness") / "baselines"
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def baseline_dir(directory: str | Path | None = None) -> Path:
    """Where named baselines live: `directory`, else $HARNESS_BASELINE_DIR, else ./.harness/baselines."""
    if directory is not None:
        return Path(directory)
    env = os.environ.get(ENV_VAR)
    return Path(env) if env else DEFAULT_DIR


def load_run(path: str | Path) -> RunResults:
    """A results.json checked for gating by the one stored-file reader (`load_results`): bounded parsing,
    known schema, finite positive samples, statistics that agree with them, unique case ids, at least one case.

    Raises ResultsError naming the file, the place in it and the problem."""
    return load_results(path)


def _measured_somewhere(run: RunResults, source: str) -> RunResults:
    if not any(c.measured for c in run.cases):
        raise ResultsError(f"{source}: cases: no case was measured (passed or failed): nothing to compare "
                           f"against")
    return run


def _check_name(name: str) -> str:
    if not _NAME_RE.match(name):
        raise UsageError(f"baseline name {name!r}: use letters, digits, '.', '_' or '-' (at most 100)")
    return name


MAX_NAMED = 4  # cases named per warning line; the rest are counted


def disturbed_line(run: RunResults, source: str) -> str | None:
    """One line when a run about to be stored holds figures that contention inflated or that were noisy (they
    would judge every later run against a slow or spread baseline), naming how many and which; else None."""
    contended = [c.case.id for c in run.cases if c.measured and c.contention and c.contention.contended]
    noisy = [c.case.id for c in run.cases if c.measured and c.latency is not None and c.latency.noisy
             and c.case.id not in contended]
    if not contended and not noisy:
        return None

    def named(ids: list[str]) -> str:
        return ", ".join(ids[:MAX_NAMED]) + (f" and {len(ids) - MAX_NAMED} more" if len(ids) > MAX_NAMED else "")

    parts = ([f"{len(contended)} contended ({named(contended)})"] if contended else []) + (
        [f"{len(noisy)} noisy ({named(noisy)})"] if noisy else [])
    measured = sum(1 for c in run.cases if c.measured)
    return (f"warning: {source}: stored figures of {' and '.join(parts)} of {measured} measured case(s): later runs "
            "are judged against them (contended rows are not judged; re-measure on a quiet machine and save again)")


@dataclass(frozen=True)
class SavedBaseline:
    """What `save_baseline` stored: the file, the run ids it holds now (oldest first) and the ones this save added,
    and the lines about blobs of the shared store that did not match their digest (replaced by this save)."""

    path: Path
    run_ids: list[str]
    added: list[str]
    repaired: list[str] = field(default_factory=list)

    def __fspath__(self) -> str:
        return str(self.path)


LOCK = ".lock"  # one save at a time per baselines folder (a read-modify-write of NAME.json and the shared store)


@contextlib.contextmanager
def _locked(root: Path, wait_s: float = 60.0) -> Iterator[None]:
    """The baselines folder's lock (flock on root/.lock), waited for up to `wait_s`; a save that cannot have it
    then is refused with a line that says so (nothing is written)."""
    import time

    fd = os.open(root / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        end = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > end:
                    raise ResultsError(f"{root}: another `harness baseline save` has held this baselines folder "
                                       f"for {wait_s:g} s; nothing was saved (try again when it has finished)") \
                        from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _write_error(root: Path, name: str, exc: OSError) -> ResultsError:
    why = exc.strerror or str(exc)
    if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        hint = "the baselines folder is not writable here: --dir or $HARNESS_BASELINE_DIR to store elsewhere"
    elif exc.errno in (errno.ENOSPC, errno.EDQUOT):
        hint = "free space there, or store elsewhere with --dir"
    else:
        hint = "nothing half-written was left"
    where = f" ({exc.filename})" if exc.filename and str(exc.filename) != str(root) else ""
    return ResultsError(f"{root}: cannot save baseline {name!r}: {why}{where}; {hint}")


def save_baseline(results: str | Path | list[str | Path], name: str, directory: str | Path | None = None,
                  allow_incomplete: bool = False, append: bool = False, keep: int | None = None,
                  warn: Callable[[str], None] | None = None) -> SavedBaseline:
    """Validate the run(s) in `results` and store them as baseline `name`; returns what was stored.

    Replaces `name`, or with `append` adds the runs after the ones it holds (a missing `name` starts empty);
    `keep` then keeps the newest K runs. Runs are stored in the given order (oldest first). `warn` gets one line
    per given run that holds contended or noisy figures (disturbed_line), and one per blob of the shared store
    that no longer matched its digest (replaced by this save's copy). The read-modify-write of the baseline and
    the blob store happen under the folder's lock: two saves at once both keep their runs. A folder that cannot
    be written (read-only, full) is one ResultsError naming it and the cause; nothing half-written is left."""
    _check_name(name)
    paths = [results] if isinstance(results, (str, Path)) else list(results)
    if not paths:
        raise UsageError("baseline save: give at least one results.json")
    if keep is not None and keep < 1:
        raise UsageError(f"baseline save: --keep {keep}: keep at least one run")
    runs, warnings = [], []
    for path in paths:
        run = load_run(path)
        if (not run.complete or run.interrupted) and not allow_incomplete:
            what = "interrupted: true" if run.interrupted else "complete: false"
            raise ResultsError(f"{path}: {what}: the run is incomplete (interrupted or killed); a baseline needs "
                               f"a finished run (or pass --allow-incomplete)")
        runs.append(_measured_somewhere(run, str(path)))
        warnings.append(disturbed_line(run, str(path)))
    root = baseline_dir(directory)
    target = root / f"{name}.json"
    added = [r.run_id for r in runs]
    repaired: list[str] = []
    try:
        root.mkdir(parents=True, exist_ok=True)
        with _locked(root):
            if append and target.exists():
                runs = load_baseline_runs(target) + runs
            if keep is not None:
                runs = runs[-keep:]
            replay = replay_record(runs[-1], root / BLOBS, repaired)
            doc = {"baseline_schema": BASELINE_SCHEMA, "name": name, "runs": [_finite(r.as_dict()) for r in runs],
                   "replay": replay}
            atomic_write_text(target, json.dumps(doc, indent=1))
    except OSError as exc:
        raise _write_error(root, name, exc) from None
    for line in [*warnings, *repaired]:  # after the store: the figures are kept, the user told what they hold
        if line and warn is not None:
            warn(line)
    return SavedBaseline(target, [r.run_id for r in runs], [a for a in added if a in {r.run_id for r in runs}],
                         repaired)


# ------------------------------------------------------------------ what makes side A reproducible
@dataclass(frozen=True)
class ReplayCase:
    """One case of a baseline's newest run as `harness gate` replays it: the stored ONNX artifact (None with
    `not_kept` saying why), the packages it ran with (the runtime's distribution and version among them), the
    feed's digest, the model's fingerprint."""

    artifact_sha256: str | None = None
    artifact_bytes: int | None = None
    not_kept: str = ""
    packages: dict[str, str | None] = field(default_factory=dict)
    environment_key: str | None = None  # the runtime's own environment it ran in (None: the harness's own)
    feed_sha256: str | None = None
    model_fingerprint: str | None = None
    precision_recipe: str | None = None
    timing_scope: str | None = None
    model_definition: dict[str, Any] | None = None  # no artifact: what builds the torch module it ran
    # module -> {"distribution", "version"}: which build of each runtime module the case ran with (recorded since
    # the harness names them; empty for a baseline saved before)
    providers: dict[str, dict[str, str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Replay:
    """What a baseline stores to re-run its newest run tonight: per case id, a ReplayCase; the run's config."""

    run_id: str
    config: dict[str, Any]
    cases: dict[str, ReplayCase]
    blobs: Path  # the blob store the artifacts live in

    source: Path | None = None  # the baseline file it was read from (named in every problem)
    _checked: dict[tuple[str, int | None], tuple[Path | None, str]] = field(default_factory=dict, repr=False,
                                                                             compare=False)

    def artifact(self, case_id: str) -> Path | None:
        """The stored artifact of `case_id` when it is there and its content hashes to its digest, else None
        (`check` says why)."""
        return self.check(case_id)[0]

    def check(self, case_id: str) -> tuple[Path | None, str]:
        """(the verified blob of `case_id`, "") or (None, why it cannot be replayed): a reference that is not a
        digest, a blob outside the store, a symlink, FIFO or device in its place, a size or content that no longer
        matches the digest (streamed and re-hashed here, every time)."""
        rc = self.cases.get(case_id)
        if rc is None or rc.artifact_sha256 is None:
            return None, "no artifact stored"
        key = (rc.artifact_sha256, rc.artifact_bytes)
        if key not in self._checked:  # a blob shared by several cases (batch sizes) is hashed once per plan
            self._checked[key] = verify_blob(self.blobs, rc.artifact_sha256, rc.artifact_bytes)
        return self._checked[key]


_SHA256 = re.compile(r"^[0-9a-f]{64}$")
DIGEST_MISMATCH = "the stored artifact no longer matches its digest"


def blob_path(blobs: Path, sha256: str) -> Path:
    """Where the blob of `sha256` lives in the store (a ValueError for anything that is not a digest: a stored
    reference never becomes a path of its own)."""
    if not _SHA256.match(sha256):
        raise ValueError(f"{sha256!r} is not a sha256 digest")
    return blobs / sha256[:2] / f"{sha256}.onnx"


def file_sha256(path: Path | int) -> tuple[str, int]:
    """(sha256 hex, bytes) of a file (a path, or an open descriptor read from its start), streamed in 1 MiB
    chunks."""
    digest = hashlib.sha256()
    size = 0
    with (open(path, "rb", closefd=False) if isinstance(path, int) else open(path, "rb")) as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def verify_blob(blobs: Path, sha256: str, size: int | None = None) -> tuple[Path | None, str]:
    """(the blob, "") when the store holds a regular file under `sha256` whose content hashes to it (and has
    `size` bytes, when given); else (None, why). Nothing is followed: the store's folders and the blob itself
    are checked with lstat, and the file is opened with O_NOFOLLOW | O_NONBLOCK, so a symlink cannot lead out of
    the store and a FIFO or device cannot block or be read."""
    try:
        path = blob_path(blobs, sha256)
    except ValueError as exc:
        return None, f"{exc}: refused"
    for part, what in ((blobs, "the blob store"), (path.parent, "the blob's folder"), (path, "the blob")):
        try:
            st = os.lstat(part)
        except FileNotFoundError:
            return None, f"its stored artifact is missing from {blobs}"
        except OSError as exc:
            return None, f"{what} {part}: cannot stat: {exc.strerror}"
        if stat.S_ISLNK(st.st_mode):
            return None, f"{what} {part} is a symlink (the store is not followed out of itself); refused"
        want = stat.S_ISREG if part == path else stat.S_ISDIR
        if not want(st.st_mode):
            return None, f"{what} {part} is not a regular {'file' if part == path else 'folder'}; refused"
    if size is not None and st.st_size != size:
        return None, (f"{DIGEST_MISMATCH} (digest {sha256}: the blob holds {st.st_size} bytes, the baseline "
                      f"stored {size})")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        return None, f"the blob {path}: cannot open: {exc.strerror}"
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None, f"the blob {path} is not a regular file; refused"
        got, _ = file_sha256(fd)
    except OSError as exc:
        return None, f"the blob {path}: cannot read: {exc.strerror}"
    finally:
        os.close(fd)
    if got != sha256:
        return None, f"{DIGEST_MISMATCH} (digest {sha256}: the blob's content hashes to {got})"
    return path, ""


def _store_blob(source: Path, blobs: Path, repaired: list[str] | None = None) -> tuple[str, int, bool]:
    """Store the ONNX graph `source` in the blob store under its sha256 (atomically: a temporary file renamed
    into place); (sha256, bytes, newly stored). A graph whose weights live in files beside it (the dynamo
    exporter's `model.onnx.data`) is stored as one self-contained file. A blob already there is shared only when
    its content hashes to the digest (re-hashed here); one that does not (a poisoned or corrupted store, a
    symlink or FIFO in its place) is replaced by this copy, and a line saying so goes to `repaired`."""
    data = _self_contained(source)
    digest = hashlib.sha256()
    blobs.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".blob-", suffix=".tmp", dir=blobs)
    size = 0
    try:
        with os.fdopen(fd, "wb") as out:
            for chunk in [data] if data is not None else _chunks(source):
                digest.update(chunk)
                out.write(chunk)
                size += len(chunk)
            out.flush()
            os.fsync(out.fileno())
        sha = digest.hexdigest()
        target = blob_path(blobs, sha)
        if os.path.lexists(target):
            ok, why = verify_blob(blobs, sha, size)
            if ok is not None:
                os.unlink(tmp)
                return sha, size, False
            if repaired is not None:
                repaired.append(f"warning: {blobs}: the shared blob {sha} was not what its name says ({why}); "
                                "replaced by this save's copy")
            if os.path.isdir(target) and not os.path.islink(target):
                raise OSError(errno.EISDIR, f"a folder stands where the blob {sha} belongs", str(target))
        if os.path.islink(target.parent) or (os.path.lexists(target.parent) and not os.path.isdir(target.parent)):
            os.unlink(target.parent)  # a symlink (or file) in place of the blob's folder: never written through
        target.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(tmp, 0o444)
        os.replace(tmp, target)
        return sha, size, True
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _chunks(path: Path) -> Any:
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            yield chunk


MAX_INLINE = 2**31 - 2**20  # protobuf's 2 GiB limit on one serialized graph


class _NotStorable(Exception):
    pass


def _self_contained(path: Path) -> bytes | None:
    """The graph with its external weights inlined (None when it has none: the file is stored as it is)."""
    try:
        import onnx
        from onnx.external_data_helper import uses_external_data
    except ImportError:
        return None
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception:  # noqa: BLE001 - an unreadable graph is stored as it is; whoever runs it reports it
        return None
    if not any(uses_external_data(t) for t in model.graph.initializer):
        return None
    try:
        onnx.load_external_data_for_model(model, str(path.parent))
    except Exception as exc:  # onnx raises OSError, ValueError or its own ValidationError
        raise _NotStorable(f"its external weights beside {path} could not be read: {exc}") from exc
    if model.ByteSize() > MAX_INLINE:
        raise _NotStorable(f"its artifact {path} is over 2 GiB with its weights (one file cannot hold it)")
    return bytes(model.SerializeToString())


def _finished_at(run: RunResults) -> float | None:
    try:
        return _dt.datetime.fromisoformat(run.finished_at).timestamp() if run.finished_at else None
    except ValueError:
        return None


def _why_not_kept(case: Any, run: RunResults) -> str:
    """Why `case`'s artifact cannot be stored, "" when it can (a case that ran none: _module_definition)."""
    c = case.case
    if str(c.precision) != "fp32":
        return f"a {c.precision} artifact is rebuilt from the FP32 graph tonight; the gate replays FP32 graphs"
    if c.variant is not None:
        return f"variant {c.variant}: its graph and options are rebuilt tonight; the gate replays base cases"
    path = Path(case.artifact)
    if path.suffix != ".onnx":
        return f"its artifact {path.name} is not an ONNX graph"
    if not path.is_file():
        return f"its artifact {path} is gone (the cache was cleared?)"
    finished = _finished_at(run)
    if finished is not None and path.stat().st_mtime > finished + 1:
        return f"its artifact {path} was modified after the run finished"
    return ""


def _module_definition(case: Any, run: RunResults) -> tuple[dict[str, Any] | None, str]:
    """(what builds the torch module `case` ran, "") for a case that ran no artifact (its runtime runs the module
    itself: side A is rebuilt from this definition while it stays unchanged), else (None, why not)."""
    c = case.case
    if c.variant is not None:
        return None, f"variant {c.variant}: its module and options are rebuilt tonight; the gate replays base cases"
    spec = registered_model(c.model, run)
    if spec is None:
        return None, (f"{c.runtime} ran no ONNX artifact and model {c.model} is not registered here: what builds its "
                      "module could not be stored")
    if spec.build is None:
        return None, f"{c.runtime} ran no ONNX artifact and model {c.model} has no torch module to rebuild"
    definition = _finite(spec.definition())
    then = case.model_fingerprint
    if then and definition["fingerprint"] != then:
        return None, (f"the model's source changed between the run and the save (fingerprint {then[:12]} then, "
                      f"{definition['fingerprint'][:12]} now): save a run of this code")
    return definition, ""


def registered_model(name: str, run: RunResults) -> Any:
    """Model `name` as this process knows it: registered (the command that judges has loaded the plugins: the zoo,
    user packages), else one of the run's own `--model` factories; None when none of them is it."""
    from harness.model import get_model, model_names

    if name not in model_names():
        from harness.model_files import register_user_model, user_model_name

        for ref in run.config.get("user_models") or []:
            if isinstance(ref, str) and user_model_name(ref) == name:
                register_user_model(ref)
    return get_model(name) if name in model_names() else None


def _canonical(name: str) -> str:
    from packaging.utils import canonicalize_name

    return str(canonicalize_name(name))


def release_by_name(packages: dict[str, Any] | None, dist: str | None) -> dict[str, str] | None:
    """The release of `dist` in a package list, or of the one build of it there (onnxruntime-gpu for onnxruntime:
    a package named DIST-something), else None."""
    if not dist or not packages:
        return None
    want = _canonical(dist)
    have = {_canonical(k): (k, v) for k, v in packages.items() if isinstance(v, str) and v}
    if want in have:
        return {"distribution": have[want][0], "version": have[want][1]}
    builds = [kv for k, kv in have.items() if k.startswith(want + "-")]
    return {"distribution": builds[0][0], "version": builds[0][1]} if len(builds) == 1 else None


def case_providers(case_env: EnvironmentRecord | None, run_env: RunEnvironmentRecord | None
                   ) -> dict[str, dict[str, str]]:
    """Which distribution (and release) provided each runtime module when a case ran: the run's (its
    environment's `providers`), overridden by the case's own environment's where it ran in one."""
    out: dict[str, dict[str, str]] = {}
    for providers in (run_env.extra("providers") if run_env else None, case_env.providers if case_env else None):
        for module, got in (providers or {}).items():
            if isinstance(got, dict) and isinstance(got.get("distribution"), str) and \
                    isinstance(got.get("version"), str):
                out[str(module)] = {"distribution": got["distribution"], "version": got["version"]}
    return out


def replay_record(run: RunResults, blobs: Path, repaired: list[str] | None = None) -> dict[str, Any]:
    """The `replay` section of a baseline for `run` (its measured cases), storing each kept artifact in `blobs`
    (a shared blob that no longer matched its digest is replaced: a line in `repaired`), with the release of each
    case's runtime as it ran (runtime_release)."""
    cases: dict[str, Any] = {}
    libraries = {k: v for k, v in (run.environment.libraries or {}).items()}
    for case in run.cases:
        if not case.measured:
            continue
        definition = None
        if case.artifact:
            why = _why_not_kept(case, run)
        else:
            definition, why = _module_definition(case, run)
        sha = size = None
        if not why and definition is None:
            try:
                sha, size, _ = _store_blob(Path(case.artifact), blobs, repaired)
            except _NotStorable as exc:
                why = str(exc)
            except OSError as exc:
                why = f"its artifact could not be stored: {exc.strerror or exc}"
        env = case.environment
        cases[case.case.id] = {
            "artifact_sha256": sha, "artifact_bytes": size, "not_kept": why,
            "packages": dict((env.packages if env else None) or libraries),
            "environment_key": env.key if env else None,
            "feed_sha256": case.feed_sha256, "model_fingerprint": case.model_fingerprint,
            "precision_recipe": case.precision_recipe, "timing_scope": case.timing_scope,
            "model_definition": definition, "providers": case_providers(case.environment, run.environment)}
    keep = ("seed", "feeds", "input_values", "input_ranges", "threads", "exporter", "timing", "cache_dir")
    config = {k: v for k, v in run.config.items() if k in keep}
    return {"run_id": run.run_id, "config": _finite(config), "cases": cases}


def load_replay(name_or_path: str | Path, directory: str | Path | None = None) -> Replay | None:
    """What the baseline stores to re-run its newest run (None for a baseline saved without it: schema 1, or a
    bare results.json)."""
    path = resolve_baseline(name_or_path, directory)
    file = path / "results.json" if path.is_dir() else path
    doc = read_json_object(file)
    if doc.get("baseline_schema") not in READABLE_SCHEMAS or not doc.get("replay"):
        return None
    replay = validate(adapter(ReplayDoc), doc["replay"], str(file), "replay")
    assert isinstance(replay, ReplayDoc)
    cases = {k: ReplayCase(**asdict(v)) for k, v in replay.cases.items()}
    return Replay(replay.run_id, dict(replay.config), cases, file.parent / BLOBS, file)


def artifact_summary(replay: Replay | None) -> str:
    """"2 cases rebuilt from their model's stored definition (mlp-torch-cpu-fp32-b4, ...); 3 artifacts stored
    (1.2 MiB); 1 case without one (a bf16 artifact ...)" for save and ls."""
    if replay is None:
        return "no stored artifacts (saved before baseline_schema 2)"
    kept = {rc.artifact_sha256: rc.artifact_bytes or 0 for rc in replay.cases.values() if rc.artifact_sha256}
    rebuilt = [cid for cid, rc in replay.cases.items() if not rc.artifact_sha256 and rc.model_definition]
    without = [rc.not_kept for rc in replay.cases.values() if not rc.artifact_sha256 and not rc.model_definition]
    text = ""
    if rebuilt:
        named = ", ".join(rebuilt[:MAX_NAMED]) + (f" and {len(rebuilt) - MAX_NAMED} more"
                                                   if len(rebuilt) > MAX_NAMED else "")
        one = len(rebuilt) == 1
        text = (f"{len(rebuilt)} case{'' if one else 's'} rebuilt from {'its' if one else 'their'} model's stored "
                f"definition ({'its runtime runs' if one else 'their runtimes run'} the torch module: {named}); ")
    text += f"{len(kept)} artifact{'s' if len(kept) != 1 else ''} stored ({_mib(sum(kept.values()))})"
    if without:
        text += f"; {len(without)} case{'s' if len(without) != 1 else ''} without one ({without[0]}" + \
            (", ..." if len(set(without)) > 1 else "") + ")"
    return text


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 / 10 else f"{n / 1024:.1f} KiB"


def load_baseline_runs(name_or_path: str | Path, directory: str | Path | None = None) -> list[RunResults]:
    """The runs of a baseline, oldest first: a stored name, a bundle file, or one results.json / run folder.

    Raises ResultsError naming the file for a missing, truncated, unknown-schema or NaN-holding baseline."""
    path = resolve_baseline(name_or_path, directory)
    file = path / "results.json" if path.is_dir() else path
    doc = read_json_object(file)
    if "baseline_schema" not in doc:
        return [_measured_somewhere(results_from_doc(doc, str(file)), str(file))]
    version = doc.get("baseline_schema")
    if version not in READABLE_SCHEMAS:
        raise ResultsError(f"{file}: baseline_schema: {version!r} is not one this harness reads "
                           f"({', '.join(map(str, READABLE_SCHEMAS))}); upgrade the harness or save the baseline "
                           "again")
    bundle = validate(adapter(BundleDoc), doc, str(file))
    assert isinstance(bundle, BundleDoc)
    return [_measured_somewhere(results_from_doc(d, str(file), f"runs[{i}]"), f"{file}: runs[{i}]")
            for i, d in enumerate(bundle.runs)]


@dataclass(frozen=True)
class BaselineInfo:
    name: str
    path: Path
    run_id: str
    machine: str
    cases: int
    measured: int
    problem: str = ""  # a stored file that no longer loads
    runs: int = 1
    artifacts: str = ""  # artifact_summary of what it stores for `harness gate`
    warnings: tuple[str, ...] = ()  # one line per stored run holding contended or noisy figures (disturbed_line)


def list_baselines(directory: str | Path | None = None) -> list[BaselineInfo]:
    """The stored baselines, by name; a file that does not load is listed with its problem."""
    root = baseline_dir(directory)
    out = []
    for p in sorted(root.glob("*.json")) if root.is_dir() else []:
        try:
            runs = load_baseline_runs(p)
            run = runs[-1]
            warned = tuple(line for r in runs if (line := disturbed_line(r, f"{p.stem}: run {r.run_id}")))
            out.append(BaselineInfo(p.stem, p, run.run_id, str(run.environment.machine or "?"),
                                    len(run.cases), sum(c.measured for c in run.cases), runs=len(runs),
                                    artifacts=artifact_summary(load_replay(p)), warnings=warned))
        except ResultsError as exc:
            out.append(BaselineInfo(p.stem, p, "?", "?", 0, 0, problem=str(exc)))
    return out


def resolve_baseline(name_or_path: str | Path, directory: str | Path | None = None) -> Path:
    """A path (an existing file or folder, or anything with a '/' or ending in .json) or a stored name."""
    text = str(name_or_path)
    p = Path(text)
    plain_name = "/" not in text and os.sep not in text and not text.endswith(".json")
    if plain_name and _NAME_RE.match(text) and (baseline_dir(directory) / f"{text}.json").is_file():
        # a stored baseline's name wins over a folder of that name in the working directory (`harness gate quick`
        # beside a run folder ./quick read the run, which stores nothing to re-measure); ./quick reaches the folder
        return baseline_dir(directory) / f"{text}.json"
    if p.exists() or not plain_name:
        return p
    _check_name(text)
    root = baseline_dir(directory)
    target = root / f"{text}.json"
    if not target.exists():
        have = ", ".join(b.stem for b in sorted(root.glob("*.json"))) if root.is_dir() else ""
        raise ResultsError(f"{target}: no baseline named {text!r} in {root} "
                           f"({'saved: ' + have if have else 'none saved'}); save one with "
                           f"`harness baseline save RESULTS.json --name {text}`")
    return target


def load_baseline(name_or_path: str | Path, directory: str | Path | None = None) -> RunResults:
    """The newest run of a baseline (by stored name or path), validated like `load_run`."""
    return load_baseline_runs(name_or_path, directory)[-1]


def describe(info: BaselineInfo) -> str:
    """One line of `harness baseline ls` (stored text made `visible`)."""
    if info.problem:
        return visible(f"{info.name:<20} BROKEN: {info.problem}")
    runs = f"{info.runs} runs, newest {info.run_id}" if info.runs > 1 else f"run {info.run_id}"
    stored = f"  {info.artifacts}" if info.artifacts else ""
    return visible(f"{info.name:<20} {runs}  {info.measured}/{info.cases} measured  {info.machine}  {info.path}"
                   f"{stored}")


def as_json(infos: list[BaselineInfo]) -> str:
    return json.dumps([{**info.__dict__, "path": str(info.path)} for info in infos], indent=1)
