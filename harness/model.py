"""TensorSpec, ModelSpec (+ fingerprint) and the model registry."""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import UsageError, did_you_mean
from harness.precision import Precision, Tolerance, default_tolerance

# Symbolic dimensions the matrix fills in: "batch" from --batch-sizes, "seq" from --seq-lens.
BATCH = "batch"
SEQ = "seq"
TASKS = ("classification", "embedding", "lm", "regression")


@dataclass(frozen=True)
class TensorSpec:
    """One model input: a name, a shape whose entries are ints or symbolic dim names, a numpy dtype.

    Integer inputs (token ids, masks) are drawn uniformly from [low, high); `value` fills the input with one
    value instead (an attention mask of ones, a sample rate), `fill="arange"` with positions 0, 1, ... along
    the last axis (position ids).
    """

    name: str
    shape: tuple[int | str, ...]
    dtype: str = "float32"
    low: int = 0
    high: int = 2
    value: float | None = None
    fill: str = "uniform"  # uniform | arange

    def ident(self) -> tuple[Any, ...]:
        """What defines the feed of this input (the fingerprint's part): new fields only where set."""
        base = (self.name, self.shape, self.dtype, self.low, self.high)
        return base + (("value", self.value),) * (self.value is not None) + (("fill", self.fill),) * (
            self.fill != "uniform")

    def describe(self) -> str:
        """How this input is fed, e.g. `token_type_ids: int64 in [0, 2)`."""
        if self.value is not None:
            return f"{self.name}: {self.dtype} = {self.value:g}"
        if self.fill == "arange":
            return f"{self.name}: {self.dtype} positions 0..n-1"
        if self.dtype == "bool" or "int" in self.dtype:
            return f"{self.name}: {self.dtype} in [{self.low}, {self.high})"
        return f"{self.name}: {self.dtype} standard normal"

    def concrete_shape(self, dims: Mapping[str, int]) -> tuple[int, ...]:
        out = []
        for d in self.shape:
            if isinstance(d, int):
                out.append(d)
            elif d in dims:
                out.append(int(dims[d]))
            else:
                raise UsageError(f"input {self.name!r}: no value for symbolic dimension {d!r}")
        return tuple(out)


@dataclass(frozen=True)
class Pipeline:
    """A model's pre- and post-processing, for end-to-end latency (harness.measure.end_to_end).

    raw(dims, seed): what a client sends for one call of the case's shape (encoded images, text);
    pre(raw, dims): the model's feed {input name: array} at the case's shape (pad, resize); post(outputs, feed):
    what the client gets back (labels, an embedding); steps: one line naming them, e.g. "decode PGM, scale to
    [0, 1] -> model -> argmax".
    """

    raw: Callable[[Mapping[str, int], int], Any]
    pre: Callable[[Any, Mapping[str, int]], Mapping[str, Any]]
    post: Callable[[Mapping[str, Any], Mapping[str, Any]], Any]
    steps: str


@dataclass(frozen=True)
class ModelSpec:
    """A model the harness can build, feed and judge. Nothing heavy at import time: `build` imports torch.

    build: returns a torch.nn.Module in eval mode (deterministic: seed its own init). None for ONNX-only.
    onnx_path: a user-supplied ONNX file (instead of exporting `build`).
    inputs/outputs: names (and input shapes with symbolic "batch"/"seq" dims).
    task: "classification" adds top-1 agreement to the drift metrics.
    tolerances: per-precision overrides of DEFAULT_TOLERANCES (only the bounds given replace defaults).
    make_feed: optional (dims, seed) -> {name: ndarray}; default draws from the TensorSpecs.
    config: what defines the model (sizes, seeds); it goes into the fingerprint.
    version: bump when the model's definition changes in a way the config does not show.
    reference_runtime: the FP32 runtime whose outputs every case is judged against.
    problem: set for a user model that failed its checks; every case of it is an error row with this reason.
    eval_split: optional () -> harness.accuracy.task.EvalSplit, a labelled held-out split: every case then
      records its task accuracy (top-1) beside the FP32 reference's and fails below Tolerance.min_task_ratio.
    unavailable: optional () -> reason or None: why the model cannot be built on this machine (an optional
      package that is not installed). A reason makes every case of the model a skip, not an error.
    pipeline: optional () -> Pipeline: pre- and post-processing steps; every measured case then also reports
      end-to-end latency (raw input -> pre -> the runtime -> post) beside the model-only figures.
    """

    name: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[str, ...]
    build: Callable[[], Any] | None = None
    onnx_path: Path | None = None
    task: str = "regression"
    tolerances: Mapping[Precision, Tolerance] = field(default_factory=dict)
    make_feed: Callable[[Mapping[str, int], int], Mapping[str, Any]] | None = None
    calibration: Callable[[], Iterable[Mapping[str, Any]]] | None = None
    config: Mapping[str, Any] = field(default_factory=dict)
    tags: frozenset[str] = frozenset()
    version: str = "1"
    description: str = ""
    reference_runtime: str | None = None
    problem: str | None = None  # why this model cannot be used (a refused user file): its cases are errors
    problem_detail: str | None = None  # the traceback behind `problem` (user code that raised): the case's log
    eval_split: Callable[[], Any] | None = None
    unavailable: Callable[[], str | None] | None = None
    pipeline: Callable[[], Pipeline] | None = None

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"model {self.name!r}: task {self.task!r} is not one of {TASKS}")
        if self.build is None and self.onnx_path is None:
            raise ValueError(f"model {self.name!r}: needs a torch `build` callable or an `onnx_path`")

    @property
    def reference(self) -> str:
        """The runtime that produces the FP32 reference outputs: PyTorch when there is a module."""
        if self.reference_runtime:
            return self.reference_runtime
        return "torch-cpu" if self.build is not None else "ort-cpu"

    def unavailable_reason(self) -> str | None:
        """Why this model cannot run here (its cases are skipped with this reason), or None. Probed once."""
        if self.unavailable is None:
            return None
        if "_unavailable_reason" not in self.__dict__:
            object.__setattr__(self, "_unavailable_reason", self.unavailable())
        return self.__dict__["_unavailable_reason"]

    @property
    def context_length(self) -> int | None:
        """The most positions the model takes (prompt + generated tokens), from its config where it says."""
        for key in ("max_position_embeddings", "n_positions", "max_sequence_length", "n_ctx"):
            value = self.config.get(key)
            if isinstance(value, int) and value > 0:
                return value
        return None

    @property
    def symbolic_dims(self) -> frozenset[str]:
        return frozenset(d for t in self.inputs for d in t.shape if isinstance(d, str))

    @property
    def has_seq(self) -> bool:
        return SEQ in self.symbolic_dims

    def fixed_batch(self) -> tuple[int, str] | None:
        """(size, why) for a model whose batch is not a matrix axis, None when its inputs have a "batch" dim.

        An input whose axis 0 the model fixes runs at that size; a model without inputs, or with scalar inputs
        only, computes one sample per call (batch 1).
        """
        if BATCH in self.symbolic_dims or self.problem:  # a refused file's inputs are unknown
            return None
        src = Path(self.onnx_path).name if self.onnx_path is not None and self.build is None \
            else f"model {self.name!r}"
        for t in self.inputs:
            if t.shape and isinstance(t.shape[0], int):
                return int(t.shape[0]), f"{src} fixes input {t.name!r} axis 0 at {t.shape[0]}"
        if not self.inputs:
            return 1, f"{src} has no inputs (no batch axis: one sample per call)"
        names = ", ".join(repr(t.name) for t in self.inputs)
        return 1, f"{src} has no batch axis (inputs {names} are scalars: one sample per call)"

    def batch_sizes(self, requested: Iterable[int]) -> tuple[int, ...]:
        """The matrix's batch sizes for this model: the requested ones, plus the model's fixed batch when it
        has one the request lacks (requested sizes it contradicts stay in the matrix as skips)."""
        requested = tuple(requested)
        fixed = self.fixed_batch()
        return requested if fixed is None else tuple(dict.fromkeys((*requested, fixed[0])))

    def batch_refusal(self, batch: int) -> str | None:
        """Why `batch` does not apply to this model (its case is a skip with this reason), or None."""
        fixed = self.fixed_batch()
        if fixed is None or batch == fixed[0]:
            return None
        return f"{fixed[1]}; --batch-sizes {batch} does not apply"

    def tolerance(self, precision: Precision, override: Tolerance | None = None) -> Tolerance:
        return default_tolerance(precision, self.task).merged(self.tolerances.get(precision)).merged(override)

    def fingerprint(self) -> str:
        """sha256 of what defines the model: name, version, config, inputs, and the build code or ONNX bytes.

        Results from different fingerprints are never compared as the same model. Computed once per spec
        (a user ONNX file is hashed once per process, not once per case).
        """
        cached = self.__dict__.get("_fingerprint")
        if cached is not None:
            return cached
        h = hashlib.sha256()
        ident = {
            "name": self.name,
            "version": self.version,
            "config": self.config,
            "inputs": [t.ident() for t in self.inputs],
            "outputs": self.outputs,
        }
        h.update(json.dumps(ident, sort_keys=True, default=str).encode())
        if self.build is not None:
            h.update(_source_of(self.build).encode())
        if self.onnx_path is not None and not self.problem:  # never open a refused file (a FIFO blocks)
            h.update(_file_digest(Path(self.onnx_path)).encode())
        object.__setattr__(self, "_fingerprint", h.hexdigest())  # frozen dataclass: memo outside the fields
        return self.__dict__["_fingerprint"]

    def definition(self) -> dict[str, Any]:
        """What builds this model's torch module, part by part (the nightly gate rebuilds side A from it when it is
        unchanged): the fingerprint, the sha256 of each file of the build's own package that it imports (its
        module first), the versions of the other libraries those files import (the harness's own and the
        standard library's left out), the config and the version. Stable across processes; computed once."""
        cached = self.__dict__.get("_definition")
        if cached is not None:
            return cached
        sources, libraries = _build_sources(self.build) if self.build is not None else ({}, {})
        out = {"fingerprint": self.fingerprint(), "sources": sources, "libraries": libraries,
               "config": json.loads(json.dumps(dict(self.config), sort_keys=True, default=str)),
               "version": self.version}
        object.__setattr__(self, "_definition", out)
        return out


def _source_of(fn: Callable[..., Any]) -> str:
    """The source of the module that defines `fn` (its code decides the weights), or its qualname."""
    target = getattr(fn, "func", fn)  # functools.partial
    try:
        module = inspect.getmodule(target)
        return inspect.getsource(module) if module is not None else inspect.getsource(target)
    except (OSError, TypeError):
        return getattr(target, "__qualname__", repr(target))


MAX_SOURCES = 64  # files of one build's package followed; a package larger than this is hashed as far as that


def _build_sources(fn: Callable[..., Any]) -> tuple[dict[str, str], dict[str, str | None]]:
    """({module: sha256 of its file}, {distribution: version}) of what `fn` is built from: its module and the
    modules of the same top-level package it imports (followed transitively), and the distributions of every
    other third-party module they import."""
    target = getattr(fn, "func", fn)  # functools.partial
    module = inspect.getmodule(target)
    if module is None:
        return {getattr(target, "__qualname__", repr(target)): hashlib.sha256(
            _source_of(fn).encode()).hexdigest()}, {}
    # a partial of the harness's own loader (a `--model pkg.module:factory`): the factory's module is the source
    named = [a.split(":")[0] for a in getattr(fn, "args", ()) if isinstance(a, str) and ":" in a]
    todo = [n for n in named if _module_file(n)] or [module.__name__]
    roots = {n.split(".")[0] for n in todo}
    sources: dict[str, str] = {}
    libraries: dict[str, str | None] = {}
    while todo and len(sources) < MAX_SOURCES:
        name = todo.pop(0)
        if name in sources:
            continue
        path = _module_file(name)
        try:
            data = Path(path).read_bytes() if path else None
        except OSError:
            data = None
        if data is None:
            sources[name] = "unreadable"
            continue
        sources[name] = hashlib.sha256(data).hexdigest()
        for imported in _imports(data, name, str(path)):
            top = imported.split(".")[0]
            if top in roots:
                if imported not in sources and _module_file(imported):
                    todo.append(imported)
            elif top not in ("harness", "__main__") and top not in sys.stdlib_module_names:
                dist = _distribution_of(top)
                if dist is not None:
                    libraries[dist] = _version_of(dist)
    return sources, dict(sorted(libraries.items()))


def _module_file(name: str) -> str | None:
    """The source file of module `name` (imported or not; None: none, or not a module)."""
    import importlib.util

    loaded = sys.modules.get(name)
    if loaded is not None:
        file = getattr(loaded, "__file__", None)
        return str(file) if file else None
    try:
        spec = importlib.util.find_spec(name)
    except Exception:  # noqa: BLE001 - an attribute named like a submodule, a parent that fails to import
        return None
    if spec is None or not spec.origin or spec.origin in ("built-in", "frozen"):
        return None
    return str(spec.origin) if spec.origin.endswith(".py") else None


def _imports(data: bytes, name: str, path: str) -> list[str]:
    """Every module (and `from X import y`'s candidate submodule X.y) that the source `data` of `name` names."""
    import ast
    import importlib.util

    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError):
        return []
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                try:
                    base = importlib.util.resolve_name("." * node.level + base, package)
                except (ImportError, ValueError):
                    continue
            if base:
                out.append(base)
                out.extend(f"{base}.{a.name}" for a in node.names if a.name != "*")
    return list(dict.fromkeys(out))


@functools.cache
def _distributions() -> dict[str, list[str]]:
    from importlib import metadata

    return dict(metadata.packages_distributions())


def _distribution_of(top: str) -> str | None:
    dists = _distributions().get(top)
    return sorted(dists)[0] if dists else None


def _version_of(dist: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def definition_changes(old: Mapping[str, Any], new: Mapping[str, Any], ignore: Iterable[str] = ()) -> str:
    """What differs between two `ModelSpec.definition()`s, in words ("" when nothing does); the distributions in
    `ignore` (side A's runtime release, pinned apart) are left out."""
    from packaging.utils import canonicalize_name

    parts = []
    a, b = dict(old.get("sources") or {}), dict(new.get("sources") or {})
    edited = [n for n in a if n in b and a[n] != b[n]]
    if edited:
        parts.append(f"{_names(edited)} {'was' if len(edited) == 1 else 'were'} edited "
                     f"({', '.join(f'{a[n][:12]} -> {b[n][:12]}' for n in edited[:3])})")
    if [n for n in a if n not in b]:
        parts.append(f"{_names([n for n in a if n not in b])} no longer imported")
    if [n for n in b if n not in a]:
        parts.append(f"{_names([n for n in b if n not in a])} newly imported")
    skip = {canonicalize_name(d) for d in ignore if d}
    la, lb = dict(old.get("libraries") or {}), dict(new.get("libraries") or {})
    for dist in sorted(set(la) | set(lb)):
        if canonicalize_name(dist) not in skip and la.get(dist) != lb.get(dist):
            parts.append(f"{dist} {la.get(dist) or 'not installed'} -> {lb.get(dist) or 'not installed'}")
    ca, cb = dict(old.get("config") or {}), dict(new.get("config") or {})
    keys = [k for k in sorted(set(ca) | set(cb)) if ca.get(k) != cb.get(k)]
    if keys:
        shown = ", ".join(f"{k}: {json.dumps(ca.get(k))} -> {json.dumps(cb.get(k))}" for k in keys[:4])
        parts.append(f"config {shown}" + (f" and {len(keys) - 4} more" if len(keys) > 4 else ""))
    if old.get("version") != new.get("version"):
        parts.append(f"version {old.get('version')} -> {new.get('version')}")
    fa, fb = str(old.get("fingerprint") or ""), str(new.get("fingerprint") or "")
    if not parts and fa != fb:
        parts.append(f"its name, inputs or outputs (fingerprint {fa[:12]} -> {fb[:12]})")
    return "; ".join(parts)


def _names(names: list[str]) -> str:
    return ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except OSError as exc:
        return f"unreadable:{exc}"
    return h.hexdigest()


def name_outputs(raw: Any, names: tuple[str, ...]) -> dict[str, Any]:
    """Map what a framework returned (tensor, tuple, dict-like) to the model's output names."""
    if isinstance(raw, Mapping):
        return {n: raw[n] for n in names if n in raw} or dict(raw)
    if isinstance(raw, (tuple, list)):
        if len(raw) < len(names):
            raise ValueError(f"module returned {len(raw)} outputs, the model declares {len(names)}: {names}")
        return dict(zip(names, raw))
    return {names[0]: raw}


# ---------------------------------------------------------------------------------------------- registry

_MODELS: dict[str, ModelSpec] = {}


def register_model(spec: ModelSpec, *, replace: bool = False) -> ModelSpec:
    """Add a model to the registry (user packages do this through the `harness.models` entry point)."""
    if spec.name in _MODELS and not replace and _MODELS[spec.name] is not spec:
        raise ValueError(f"a model named {spec.name!r} is already registered")
    _MODELS[spec.name] = spec
    return spec


def get_model(name: str) -> ModelSpec:
    """A registered model; plugins (the zoo, user packages) count once harness.plugins.load_plugins() ran."""
    try:
        return _MODELS[name]
    except KeyError:
        raise UsageError(f"unknown model {name!r}{did_you_mean(name, model_names())}; valid models: "
                         f"{', '.join(model_names()) or '(none)'}") from None


def model_names() -> list[str]:
    return sorted(_MODELS)


def all_models() -> list[ModelSpec]:
    return [_MODELS[n] for n in model_names()]
