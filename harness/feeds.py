"""Inputs given by the user: `--feeds` files (.npz, a folder of .npy / .npz samples) and per-input overrides
(--input-value, --input-range); harness.data.case_feed applies them to a case."""

from __future__ import annotations

import functools
import math
import os
import stat
import zipfile
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.errors import ModelError, UnsupportedModelError, UsageError
from harness.model import BATCH, SEQ, ModelSpec, TensorSpec

LABELS = "labels"  # an array of this name (not a model input) holds class labels for task accuracy
MAX_FEED_BYTES = 4 << 30  # a feeds file or folder larger than this is refused (read into memory per worker)


@dataclass(frozen=True)
class FeedSet:
    """Arrays keyed by input name, as stored (samples on axis 0 for models with a batch axis)."""

    path: str
    arrays: Mapping[str, np.ndarray]
    labels: np.ndarray | None = None

    def describe(self) -> str:
        parts = [f"{k} {a.dtype}{list(a.shape)}" for k, a in self.arrays.items()]
        return f"{self.path}: " + ", ".join(parts) + (f", labels[{len(self.labels)}]" if self.labels is not None
                                                      else "")


# ------------------------------------------------------------------ reading
def load_feeds(path: str | Path) -> FeedSet:
    """Read an .npz file, or a folder holding either `INPUT.npy` files (one array per input) or .npz files of
    samples (concatenated on axis 0 in file-name order). No pickles; a bad file is a UsageError naming it."""
    p = Path(path)
    st = _stat(p)
    if stat.S_ISDIR(st.st_mode):
        return _load_folder(p)
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"--feeds {p}: not a regular file or folder")
    if p.suffix == ".npy":
        raise UsageError(f"--feeds {p}: a single .npy has no input name; use an .npz keyed by input name "
                         f"(numpy.savez(path, input_ids=..., attention_mask=...)) or a folder of INPUT.npy files")
    arrays = _read_npz(p)
    return _feedset(p, arrays)


def _stat(p: Path) -> os.stat_result:
    try:
        return os.stat(p)
    except FileNotFoundError:
        raise UsageError(f"--feeds {p}: no such file or folder") from None
    except OSError as exc:
        raise UsageError(f"--feeds {p}: cannot stat: {exc.strerror}") from None


def _read_npz(p: Path) -> dict[str, np.ndarray]:
    size = os.stat(p).st_size
    if size > MAX_FEED_BYTES:
        raise UsageError(f"--feeds {p}: larger than {MAX_FEED_BYTES >> 30} GiB; refused")
    with open(p, "rb") as f:
        magic = f.read(6)
    if magic == b"\x93NUMPY":
        raise UsageError(f"--feeds {p}: a single .npy array, not an .npz archive; a single array has no input "
                         f"name: use numpy.savez(path, NAME=array, ...)")
    if not magic.startswith(b"PK"):
        raise UsageError(f"--feeds {p}: not a readable .npz archive (numpy.savez writes a zip file; this one "
                         f"starts with {magic!r})")
    out: dict[str, np.ndarray] = {}
    budget = MAX_FEED_BYTES
    try:
        with zipfile.ZipFile(p) as z:
            for info in z.infolist():
                if info.is_dir():
                    continue
                where = f"--feeds {p}: member {info.filename!r}"
                if not info.filename.endswith(".npy"):
                    raise UsageError(f"{where} is not an NPY array (numpy.savez writes NAME.npy members)")
                with z.open(info) as member:
                    a = _read_npy_stream(member, where, info.file_size, budget)
                budget -= a.nbytes
                out[info.filename[:-len(".npy")]] = a
    except UsageError:
        raise
    except (OSError, zipfile.BadZipFile, EOFError, zlib.error, NotImplementedError, RuntimeError) as exc:
        raise UsageError(f"--feeds {p}: not a readable .npz archive: {type(exc).__name__}: {exc}") from None
    return out


def _read_npy_stream(f: Any, where: str, stored: int, budget: int) -> np.ndarray:
    """One NPY array from an open binary stream, with memory bounded by what the header declares: the header
    is read first (numpy.lib.format), and an array declaring more bytes than the file/member holds (`stored`,
    uncompressed) or than `budget` is refused before anything is allocated. No pickles."""
    from numpy.lib import format as npy

    try:
        version = npy.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = npy.read_array_header_1_0(f)
        elif version == (2, 0):
            shape, fortran, dtype = npy.read_array_header_2_0(f)
        else:
            raise UsageError(f"{where}: NPY format version {version[0]}.{version[1]} is not read (1.0 and 2.0 "
                             f"are; numpy.save writes them)")
    except UsageError:
        raise
    except (ValueError, EOFError, SyntaxError) as exc:
        raise UsageError(f"{where} is not an NPY array: {exc}") from None
    if dtype.hasobject:
        raise UsageError(f"{where}: cannot read: an object array (dtype {dtype}) needs a pickle, never loaded")
    bad = [d for d in shape if not isinstance(d, int) or isinstance(d, bool) or d < 0]
    if bad or not isinstance(shape, tuple):
        raise UsageError(f"{where}: the header declares shape {list(shape) if isinstance(shape, tuple) else shape!r}"
                         f", {'with a negative dimension ' + str(bad[0]) if bad else 'not a tuple'}: not an array "
                         "numpy writes; refused (corrupt)")
    count = math.prod(shape)
    declared = count * dtype.itemsize
    if declared > max(0, stored - f.tell()) or declared > budget:
        held = max(0, stored - f.tell())
        limit = f"the {held} bytes stored" if declared > held else \
            f"the {MAX_FEED_BYTES >> 30} GiB the harness holds of feeds in memory"
        raise UsageError(f"{where}: the header declares shape {list(shape)} of {dtype} ({declared} bytes), more "
                         f"than {limit}; refused (truncated or corrupt)")
    data = f.read(declared)
    if len(data) != declared:
        raise UsageError(f"{where}: truncated: {len(data)} of the {declared} bytes its header declares")
    a = np.frombuffer(data, dtype=dtype, count=count)
    return (a.reshape(shape[::-1]).transpose() if fortran else a.reshape(shape)).copy()


def _read_npy(p: Path) -> np.ndarray:
    where = f"--feeds {p}"
    try:
        with open(p, "rb") as f:
            return _read_npy_stream(f, where, os.fstat(f.fileno()).st_size, MAX_FEED_BYTES)
    except OSError as exc:
        raise UsageError(f"{where}: not a readable .npy array: {type(exc).__name__}: {exc}") from None


def _load_folder(p: Path) -> FeedSet:
    files = sorted(f for f in p.iterdir() if f.suffix in (".npy", ".npz") and f.is_file())
    kinds = {f.suffix for f in files}
    if not files:
        raise UsageError(f"--feeds {p}: the folder holds no .npy or .npz files")
    if len(kinds) > 1:
        raise UsageError(f"--feeds {p}: the folder mixes .npy and .npz files; use INPUT.npy files (one per "
                         f"input) or .npz sample files, not both")
    total = sum(f.stat().st_size for f in files)
    if total > MAX_FEED_BYTES:
        raise UsageError(f"--feeds {p}: {total} bytes of arrays, more than {MAX_FEED_BYTES >> 30} GiB; refused")
    if kinds == {".npy"}:
        return _feedset(p, {f.stem: _read_npy(f) for f in files})
    parts = [_read_npz(f) for f in files]  # one sample per file: arrays without the batch axis
    keys = set(parts[0])
    for f, part in zip(files, parts):
        if set(part) != keys:
            raise UsageError(f"--feeds {f}: holds {sorted(part)}, {files[0].name} holds {sorted(keys)}; every "
                             f"sample file must hold the same arrays")
    arrays = {}
    for k in sorted(keys):
        try:
            arrays[k] = np.stack([np.asarray(part[k]) for part in parts])
        except ValueError as exc:
            raise UsageError(f"--feeds {p}: array {k!r} differs in shape between sample files: {exc}") from None
    return _feedset(p, arrays)


def _feedset(p: Path, arrays: dict[str, np.ndarray]) -> FeedSet:
    labels = arrays.pop(LABELS, None)
    for k, a in arrays.items():
        if a.dtype.kind not in "biuf":
            raise UsageError(f"--feeds {p}: array {k!r} has dtype {a.dtype}; feeds are numeric or bool arrays")
        if a.size == 0:
            raise UsageError(f"--feeds {p}: array {k!r} has shape {list(a.shape)}: zero samples/values; a feed "
                             f"needs at least one")
        if a.dtype.kind == "f" and not np.isfinite(a).any():
            raise UsageError(f"--feeds {p}: array {k!r} holds no finite value (all NaN/inf); drift cannot be "
                             f"judged on it")
    if labels is not None and (labels.ndim != 1 or labels.dtype.kind not in "iu"):
        raise UsageError(f"--feeds {p}: '{LABELS}' must be a 1-D integer array of class indices, got "
                         f"{labels.dtype}{list(labels.shape)}")
    if not arrays:
        raise UsageError(f"--feeds {p}: holds no input arrays")
    return FeedSet(str(p), arrays, labels)


@functools.lru_cache(maxsize=2)
def _cached(path: str, mtime_ns: int, size: int) -> FeedSet:
    return load_feeds(path)


def feeds_for_run(path: str) -> FeedSet:
    """The run's feeds, read once per process (a worker reads them on its first case)."""
    st = _stat(Path(path))
    return _cached(path, st.st_mtime_ns, st.st_size)


# ------------------------------------------------------------------ checking against a model
def _has_batch(t: TensorSpec) -> bool:
    return bool(t.shape) and t.shape[0] == BATCH


def sample_count(feeds: FeedSet, spec: ModelSpec) -> int | None:
    """How many samples the feeds hold for `spec` (None for a model without a batch axis)."""
    for t in spec.inputs:
        a = feeds.arrays.get(t.name)
        if a is not None and _has_batch(t):
            return int(len(a)) if a.ndim == len(t.shape) else 1
    return None


def problems(feeds: FeedSet, spec: ModelSpec, generated: Iterable[str] = ()) -> list[str]:
    """Every mismatch between the feeds and the model's inputs (names, dtypes, ranks, fixed sizes, sample
    counts), one message each; `generated` names inputs the run generates instead (--input-value/-range)."""
    out: list[str] = []
    generated = set(generated)
    names = {t.name for t in spec.inputs}
    for t in spec.inputs:
        if t.name not in feeds.arrays:
            if t.name not in generated:
                out.append(f"input {t.name!r} ({t.dtype}, shape {_shape_text(t)}) is missing (give it, or "
                           f"--input-value/--input-range {t.name}=...)")
            continue
        a = feeds.arrays[t.name]
        if not _dtype_ok(a, t.dtype):
            out.append(f"input {t.name!r}: dtype {a.dtype}, the model takes {t.dtype}")
        rank = len(t.shape)
        if a.ndim not in ((rank, rank - 1) if _has_batch(t) else (rank,)):
            want = f"{rank} ({_shape_text(t)}), or {rank - 1} for one sample" if _has_batch(t) else \
                f"{rank} ({_shape_text(t)})"
            out.append(f"input {t.name!r}: {a.ndim} axes {list(a.shape)}, the model takes {want}")
            continue
        sample = a.shape[1:] if _has_batch(t) and a.ndim == rank else a.shape
        want_dims = t.shape[1:] if _has_batch(t) else t.shape
        for axis, (got, want) in enumerate(zip(sample, want_dims), start=1 if _has_batch(t) else 0):
            if isinstance(want, int) and got != want:
                out.append(f"input {t.name!r} axis {axis}: size {got}, the model fixes it at {want}")
    for k in feeds.arrays:
        if k not in names:
            out.append(f"array {k!r} is not an input of model {spec.name!r} (inputs: "
                       f"{', '.join(sorted(names)) or 'none'})")
    counts = {t.name: (len(feeds.arrays[t.name]) if feeds.arrays[t.name].ndim == len(t.shape) else 1)
              for t in spec.inputs if t.name in feeds.arrays and _has_batch(t)}
    if len(set(counts.values())) > 1:
        out.append("inputs hold different numbers of samples: " + ", ".join(f"{k} {n}" for k, n in counts.items()))
    if feeds.labels is not None and counts and len(feeds.labels) != next(iter(counts.values())):
        out.append(f"'{LABELS}' holds {len(feeds.labels)} labels for {next(iter(counts.values()))} samples")
    return out


def seq_lens(feeds: FeedSet, specs: Iterable[ModelSpec]) -> tuple[int, ...]:
    """The sequence lengths the feeds give the models that have a sequence axis (for a run without --seq-lens)."""
    out: list[int] = []
    for spec in specs:
        for t in spec.inputs:
            a = feeds.arrays.get(t.name)
            if a is None or SEQ not in t.shape:
                continue
            axis = t.shape.index(SEQ) - (1 if _has_batch(t) and a.ndim == len(t.shape) - 1 else 0)
            if 0 <= axis < a.ndim:
                out.append(int(a.shape[axis]))
            break
    return tuple(dict.fromkeys(out))


def _shape_text(t: TensorSpec) -> str:
    return "[" + ", ".join(str(d) for d in t.shape) + "]"


def _dtype_ok(a: np.ndarray, dtype: str) -> bool:
    """Same dtype, or a conversion that keeps the values: integers that fit, floats to another float width."""
    want = np.dtype(dtype)
    if a.dtype == want:
        return True
    if a.dtype.kind in "iub" and want.kind in "iu":
        if not a.size:
            return True
        info = np.iinfo(want)
        return bool(a.min() >= info.min and a.max() <= info.max)
    return a.dtype.kind == "f" and want.kind == "f"


# ------------------------------------------------------------------ one case's feed
def cut(feeds: FeedSet, spec: ModelSpec, dims: Mapping[str, int], generated: Iterable[str] = ()
        ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The feed for one case: `dims["batch"]` samples from the feeds (the first ones; repeated in order when
    the feeds hold fewer), other axes as stored. Raises ModelError (names the file) on a mismatch and
    UnsupportedModelError when the case's sequence length is not the feeds'. Inputs in `generated` may be
    missing (the caller fills them)."""
    bad = problems(feeds, spec, generated)
    if bad:
        raise ModelError(f"{feeds.path}: " + "; ".join(bad))
    feed: dict[str, np.ndarray] = {}
    n = sample_count(feeds, spec)
    batch = int(dims.get("batch", 1))
    for t in spec.inputs:
        a = feeds.arrays.get(t.name)
        if a is None:
            continue
        if _has_batch(t):
            if a.ndim == len(t.shape) - 1:
                a = a[None]
            a = a[np.arange(batch) % len(a)]
        for axis, d in enumerate(t.shape):
            if d == SEQ and a.shape[axis] != dims.get("seq"):
                raise UnsupportedModelError(
                    f"{feeds.path} gives input {t.name!r} {a.shape[axis]} positions on its sequence axis; "
                    f"sequence length {dims.get('seq')} does not apply (give --seq-lens {a.shape[axis]}, or "
                    f"--prompt-lens {a.shape[axis]} for --workload generate)")
        feed[t.name] = np.ascontiguousarray(a.astype(np.dtype(t.dtype), copy=False))
    info = {"path": feeds.path, "samples": n, "repeated": bool(n is not None and batch > n)}
    return feed, info


# ------------------------------------------------------------------ --input-value / --input-range
@dataclass(frozen=True)
class InputOverride:
    """`--input-value NAME=V` (value) or `--input-range NAME=LO:HI` (low, high: integers in [LO, HI), floats
    uniform in [LO, HI))."""

    name: str
    value: float | None = None
    low: float | None = None
    high: float | None = None

    def describe(self, dtype: str) -> str:
        if self.value is not None:
            return f"{self.name}: {dtype} = {self.value:g} (--input-value)"
        return f"{self.name}: {dtype} in [{self.low:g}, {self.high:g}) (--input-range)"

    def check(self, t: TensorSpec, model: str) -> str | None:
        """Why this override cannot feed input `t` of `model`, or None."""
        kind = np.dtype(t.dtype).kind
        nums = [self.value] if self.value is not None else [self.low, self.high]
        if kind in "iub" and any(v is not None and not float(v).is_integer() for v in nums):
            return f"model {model!r} input {t.name!r} is {t.dtype}: {self._spelled()} is not an integer"
        if kind == "b" and self.value is not None and self.value not in (0, 1):
            return f"model {model!r} input {t.name!r} is bool: {self._spelled()} must be 0 or 1"
        if kind in "iu":
            info = np.iinfo(np.dtype(t.dtype))
            top = self.value if self.value is not None else self.high - 1
            bottom = self.value if self.value is not None else self.low
            if bottom < info.min or top > info.max:
                return f"model {model!r} input {t.name!r} is {t.dtype}: {self._spelled()} does not fit"
        if kind == "f":
            top = float(np.finfo(np.dtype(t.dtype)).max)
            if any(v is not None and abs(v) > top for v in nums):
                return (f"model {model!r} input {t.name!r} is {t.dtype}: {self._spelled()} does not fit (it would "
                        f"feed inf; the largest {t.dtype} is {top:g})")
        return None

    def _spelled(self) -> str:
        return f"{self.name}={self.value:g}" if self.value is not None else f"{self.name}={self.low:g}:{self.high:g}"

    def fill(self, shape: tuple[int, ...], dtype: str, seed: int) -> np.ndarray:
        dt = np.dtype(dtype)
        if self.value is not None:
            return np.full(shape, self.value, dtype=dt)
        rng = np.random.default_rng([seed, zlib.crc32(f"override:{self.name}:{shape}".encode())])
        if dt.kind in "iub":
            return rng.integers(int(self.low), int(self.high), size=shape).astype(dt)
        return rng.uniform(self.low, self.high, size=shape).astype(dt)


def parse_overrides(text: Any, what: str, ranged: bool) -> tuple[InputOverride, ...]:
    """`NAME=V,...` (ranged False) or `NAME=LO:HI,...` (ranged True); several option uses join."""
    parts = [p for chunk in (text if isinstance(text, (list, tuple)) else [text]) for p in str(chunk).split(",")]
    out: dict[str, InputOverride] = {}
    form = "NAME=LO:HI" if ranged else "NAME=V"
    for part in (p.strip() for p in parts):
        if not part:
            continue
        name, eq, val = part.partition("=")
        name = name.strip()
        if not eq or not name:
            raise UsageError(f"--{what} {part!r}: expected {form}")
        try:
            if ranged:
                lo_text, colon, hi_text = val.partition(":")
                if not colon:
                    raise ValueError
                lo, hi = float(lo_text), float(hi_text)
                if not (math.isfinite(lo) and math.isfinite(hi)):
                    raise ValueError
                if not lo < hi:
                    raise UsageError(f"--{what} {part!r}: LO must be below HI (the range is [LO, HI))")
                override = InputOverride(name, low=lo, high=hi)
            else:
                v = float(val)
                if not math.isfinite(v):
                    raise ValueError
                override = InputOverride(name, value=v)
        except ValueError:
            raise UsageError(f"--{what} {part!r}: expected {form} with finite numbers") from None
        if name in out:
            raise UsageError(f"--{what}: {name!r} is given twice")
        out[name] = override
    if not out:
        raise UsageError(f"--{what}: empty list")
    return tuple(out.values())


def check_overrides(overrides: Iterable[InputOverride], specs: Iterable[ModelSpec]) -> None:
    """A UsageError when an override names no input of the run's models, or a value the input cannot take."""
    specs = list(specs)
    for o in overrides:
        hits = [(s, t) for s in specs for t in s.inputs if t.name == o.name]
        if not hits:
            known = sorted({t.name for s in specs for t in s.inputs})
            raise UsageError(f"--input-{'value' if o.value is not None else 'range'} {o.name}: no model of this "
                             f"run has an input named {o.name!r} (inputs: {', '.join(known) or 'none'})")
        for s, t in hits:
            why = o.check(t, s.name)
            if why:
                raise UsageError(f"--input-{'value' if o.value is not None else 'range'}: {why}")


def labelled_split(feeds: FeedSet, spec: ModelSpec) -> Any:
    """The feeds as a labelled split for task accuracy (harness.accuracy.task.EvalSplit) when they hold
    `labels` and every input of `spec` with a batch axis; else None."""
    from harness.accuracy.task import EvalSplit

    if feeds.labels is None or not spec.inputs or not all(_has_batch(t) and t.name in feeds.arrays
                                                          for t in spec.inputs):
        return None
    inputs = {}
    for t in spec.inputs:
        a = feeds.arrays[t.name]
        inputs[t.name] = (a[None] if a.ndim == len(t.shape) - 1 else a).astype(np.dtype(t.dtype), copy=False)
    return EvalSplit(inputs=inputs, labels=feeds.labels.astype(np.int64),
                     description=f"{feeds.path} ({len(feeds.labels)} labelled samples)")
