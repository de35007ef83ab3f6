"""User models: ONNX files (safety checks before any library opens them) and PyTorch factories, as ModelSpecs."""

from __future__ import annotations

import functools
import hashlib
import importlib
import inspect
import os
import re
import stat
import traceback
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import ModelError, UsageError
from harness.model import BATCH, SEQ, ModelSpec, TensorSpec, name_outputs, register_model

# `--model pkg.module:factory`: a dotted module path, a colon, a Python name.
_FACTORY_REF = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")

_BATCH_NAMES = re.compile(r"^(batch|batch_size|n|bs|b|N|unk__\d+|dynamic_batch)$", re.I)
_SEQ_NAMES = re.compile(r"^(seq|seq_len|sequence|sequence_length|seqlen|tokens|num_tokens|s)$", re.I)


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def check_model_path(path: str | Path) -> Path:
    """Refuse what could hang, exhaust memory or escape: non-regular files and symlinks out of the folder.

    Uses stat only: nothing is opened, so a FIFO cannot block and /dev/zero cannot be read.
    """
    p = Path(path)
    try:
        lst = os.lstat(p)
    except FileNotFoundError:
        raise ModelError(f"{p}: no such model file") from None
    except OSError as exc:
        raise ModelError(f"{p}: cannot stat: {exc.strerror}") from None
    if stat.S_ISLNK(lst.st_mode):
        folder = p.absolute().parent.resolve()
        target = p.resolve()
        if folder not in target.parents:
            raise ModelError(f"{p}: symlink leads out of the model's folder ({folder}) to {target}; refused")
    try:
        st = os.stat(p)
    except OSError as exc:
        raise ModelError(f"{p}: cannot stat the link's target: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise ModelError(f"{p}: is {_kind(st.st_mode)}, not a regular model file; refused")
    if st.st_size == 0:
        raise ModelError(f"{p}: empty file (0 bytes)")
    return p


def check_external_data(model_path: Path, model: object) -> None:
    """Every external-data file must be a plain, single-linked regular file inside the model's folder."""
    from onnx.external_data_helper import _get_all_tensors, uses_external_data

    folder = model_path.absolute().parent.resolve()
    seen: set[str] = set()
    for tensor in _get_all_tensors(model):
        if not uses_external_data(tensor):
            continue
        info = {e.key: e.value for e in tensor.external_data}
        location = info.get("location", "")
        if location in seen:
            continue
        seen.add(location)
        where = f"{model_path}: initializer {tensor.name!r} external data {location!r}"
        if not location or os.path.isabs(location):
            raise ModelError(f"{where}: the location must be a relative path inside the model's folder")
        data = folder / location
        if folder not in data.absolute().parents or ".." in Path(location).parts:
            raise ModelError(f"{where}: points outside the model's folder ({folder}); refused")
        try:
            lst = os.lstat(data)
        except FileNotFoundError:
            raise ModelError(f"{where}: file not found") from None
        if stat.S_ISLNK(lst.st_mode):
            raise ModelError(f"{where}: is a symbolic link; refused")
        if not stat.S_ISREG(lst.st_mode):
            raise ModelError(f"{where}: is {_kind(lst.st_mode)}; refused")
        if lst.st_nlink > 1:
            raise ModelError(f"{where}: is a hard link (link count {lst.st_nlink}); refused")
        end = int(info.get("offset", 0) or 0) + int(info.get("length", 0) or 0)
        if end > lst.st_size:
            raise ModelError(f"{where}: offset+length {end} exceeds the file's {lst.st_size} bytes (truncated?)")


def _numpy_dtype(elem_type: int, path: Path, input_name: str) -> str:
    """The numpy dtype feeding an ONNX tensor type; string, bfloat16, float8 (not numpy types) refused."""
    from onnx import TensorProto, helper

    import numpy as np

    try:
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
    except Exception:  # noqa: BLE001 - unknown or ml_dtypes-only element types
        dtype = None
    if dtype is None or dtype.kind not in "biuf":
        known = elem_type in TensorProto.DataType.values()
        kind = TensorProto.DataType.Name(elem_type) if known else elem_type
        raise ModelError(f"{path}: input {input_name!r} has element type {kind}; the harness feeds float, "
                         f"integer and bool inputs only")
    return dtype.name


def check_opsets(path: Path, model: Any) -> None:
    """Refuse an ai.onnx opset newer than the installed onnx knows (onnxruntime supports at most that many).

    Opsets the onnx package knows but onnxruntime does not yet are refused by onnxruntime at session creation
    ("Current official support for domain ai.onnx is till opset N"): an error row for each case.
    """
    import onnx

    known = onnx.defs.onnx_opset_version()
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx") and imp.version > known:
            raise ModelError(f"{path}: the model needs ai.onnx opset {imp.version}, newer than the installed "
                             f"onnx {onnx.__version__} and its runtimes support (opset {known} at most); "
                             f"export it with an older opset_version")


def check_graph(path: Path) -> None:
    """The ONNX checker's verdict on the graph (duplicate initializer names, dangling inputs, bad attributes).

    Without full_check: shape inference on a hostile graph can crash the process; runtimes do it later, in a
    worker. Checked by path, so external data resolves against the model's folder (already vetted by
    check_external_data). The checker's first complaint becomes the reason, on one line.
    """
    import onnx

    try:
        onnx.checker.check_model(str(path))
    except Exception as exc:  # noqa: BLE001 - ValidationError, and protobuf/C++ errors of other types
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        complaint = lines[0] if lines else type(exc).__name__
        raise ModelError(f"{path}: the ONNX checker rejects the model: {complaint}") from None


def parse_shapes(text: str | None) -> tuple[tuple[str, int], ...]:
    """`--shape NAME=DIM,...`: NAME is a symbolic dimension of a user ONNX file (its dim_param) or INPUT:AXIS.

    batch and seq are matrix axes (--batch-sizes, --seq-lens) and cannot be set here.
    """
    if not text:
        return ()
    out: dict[str, int] = {}
    for part in (p.strip() for p in str(text).split(",")):
        if not part:
            continue
        name, sep, value = part.rpartition("=")
        name = name.strip()
        if not sep or not name:
            raise UsageError(f"--shape {part!r}: expected NAME=DIM (e.g. height=224 or pixel_values:2=224)")
        try:
            dim = int(value)
        except ValueError:
            raise UsageError(f"--shape {part!r}: {value.strip()!r} is not an integer") from None
        if dim <= 0:
            raise UsageError(f"--shape {part!r}: {dim} is not a positive size (a dimension must be >= 1)")
        if dim > 1 << 20:  # as --batch-sizes and --seq-lens (harness.options.MAX_DIM)
            raise UsageError(f"--shape {part!r}: {dim} is above the maximum {1 << 20} (a feed that size would not "
                             "fit in memory)")
        if name in _UNNAMED or name.endswith(":"):
            raise UsageError(f"--shape {part!r}: {name!r} is no input or dimension name ({name!r} is how an "
                             "exporter marks an axis it left unnamed, e.g. paddle2onnx); size such an axis as "
                             "INPUT:AXIS=DIM, e.g. x:2=48")
        if name in (BATCH, SEQ):
            axis = "--batch-sizes" if name == BATCH else "--seq-lens"
            raise UsageError(f"--shape {part!r}: {name} is a matrix axis; use {axis}")
        out[name] = dim
    return tuple(out.items())


def check_shape_names(shapes: Iterable[tuple[str, int]], specs: Iterable[ModelSpec]) -> None:
    """Every --shape name must name a dimension of some user ONNX file (UsageError otherwise).

    Not checked while a user file is broken (its dimensions are unknown; its cases are error rows anyway).
    """
    specs = list(specs)
    if any(s.problem for s in specs):
        return
    known: set[str] = set()
    for s in specs:
        known.update(s.config.get("shape_names", ()))
    unknown = [n for n, _ in shapes if n not in known]
    if unknown:
        have = ", ".join(sorted(known)) or "(no user ONNX model with symbolic dimensions)"
        raise UsageError(f"--shape: no user ONNX model has a dimension {', '.join(map(repr, unknown))}; "
                         f"names these models accept: {have}")


# Ops that pass an input's values on unchanged (so a Gather after them still indexes with the input's values).
_VALUE_PRESERVING = frozenset({"Cast", "Identity", "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Expand",
                               "Transpose"})
_SAMPLE_RATE = re.compile(r"^(sr|sample_?rate|sampling_?rate)$", re.IGNORECASE)


def index_bounds(model: Any) -> dict[str, int]:
    """Graph inputs that index a Gather on a constant table (an initializer or Constant), directly or through
    value-preserving ops: input name -> the table's rows on the gathered axis (the smallest such table)."""
    tables = {i.name: tuple(i.dims) for i in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant":
            for a in node.attribute:
                if a.name == "value" and a.HasField("t"):
                    tables[node.output[0]] = tuple(a.t.dims)
    origin = {vi.name: vi.name for vi in model.graph.input if vi.name not in tables}
    bounds: dict[str, int] = {}
    for node in model.graph.node:  # ONNX graphs list nodes in topological order
        if node.op_type in _VALUE_PRESERVING and node.input and node.input[0] in origin:
            for out in node.output[:1]:
                origin[out] = origin[node.input[0]]
        if node.op_type == "Gather" and len(node.input) >= 2 and node.input[1] in origin \
                and node.input[0] in tables:
            dims = tables[node.input[0]]
            axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
            if dims and -len(dims) <= axis < len(dims) and dims[axis] > 0:
                name = origin[node.input[1]]
                bounds[name] = min(bounds.get(name, dims[axis]), int(dims[axis]))
    return bounds


def input_by_construction(name: str, shape: tuple[int | str, ...], dtype: str, rows: int | None) -> TensorSpec:
    """How an input of a user ONNX file is fed when no feeds are given, valid by construction where the graph
    or the name tells: an index into a table of `rows` rows takes [0, rows); `*position_ids` positions along
    the last axis; `*mask` ones; a sample rate (`sr`, `sample_rate`) 16000; `token_type_ids` [0, 2); other
    integers [0, 100); bool {0, 1}; floats standard normal."""
    lower = name.lower()
    integer = dtype != "bool" and not dtype.startswith("float")
    if integer and ("position_ids" in lower or lower in ("pos_ids", "positions")):
        return TensorSpec(name, shape, dtype, fill="arange")
    if integer and "mask" in lower:
        return TensorSpec(name, shape, dtype, 0, 2, value=1)
    if _SAMPLE_RATE.match(name):
        return TensorSpec(name, shape, dtype, value=16000)
    if rows is not None:
        return TensorSpec(name, shape, dtype, 0, rows)
    if "token_type" in lower:
        return TensorSpec(name, shape, dtype, 0, 2)
    return TensorSpec(name, shape, dtype, 0, 2 if dtype == "bool" else 100)


# dim_param values that name nothing (paddle2onnx writes "?" for every unnamed axis).
UNNAMED_DIMS = _UNNAMED = frozenset({"", "?"})


def free_dim(d: Any) -> int | None:
    """The fixed size of an ONNX dimension, or None when it is free.

    Free is every form onnxruntime accepts any size for: a dim_param, neither value nor param, or a negative
    dim_value (paddle2onnx writes -1). A dim_value of 0 is fixed: onnxruntime refuses any other size for it.
    """
    if d.HasField("dim_value") and d.dim_value >= 0:
        return int(d.dim_value)
    return None


def dim_name(d: Any) -> str:
    """The name a free dimension can be given by in --shape ("" when unnamed: no dim_param, or "?")."""
    param = d.dim_param if d.HasField("dim_param") else ""
    return "" if param in _UNNAMED else param


def _free_form(d: Any) -> str:
    if d.HasField("dim_value"):
        return f"dim_value {d.dim_value}"
    if d.HasField("dim_param"):
        return f"unnamed: dim_param {d.dim_param!r}"
    return "no size and no name"


def _missing_sizes(p: Path, missing: list[tuple[str, int, str, str]]) -> str:
    """One error for every free axis that has no size (input, axis, its name or "", its ONNX form), with the one
    --shape that sizes them all."""
    named = list(dict.fromkeys(param for _, _, param, _ in missing if param))
    also = (f" (or {', '.join(f'{n}=N' for n in named)} for every axis of {'that name' if len(named) == 1 else 'those names'})"
            if named else "")
    shape = ",".join(f"{name}:{i}=N" for name, i, _, _ in missing)
    if len(missing) == 1:
        name, i, param, form = missing[0]
        what = f"is free, named {param!r}," if param else f"is free ({form})"
        return (f"{p}: input {name!r} axis {i} {what} and not a batch or sequence axis; give it a size with "
                f"--shape {shape}{also}")
    axes = ", ".join(f"input {name!r} axis {i} ({f'named {param!r}' if param else form})"
                     for name, i, param, form in missing)
    return (f"{p}: {len(missing)} free axes are not batch or sequence axes: {axes}; give them sizes with "
            f"--shape {shape}{also}")


def spec_from_onnx(path: str | Path, name: str | None = None,
                   shapes: Mapping[str, int] | Iterable[tuple[str, int]] = ()) -> ModelSpec:
    """A ModelSpec for a user ONNX file: inputs from its declared types; symbolic dims mapped to batch/seq.

    A free dimension (`free_dim`: a dim_param, no size, or a negative size) takes its size from `shapes`
    (--shape) by its name (`dim_name`) or as "INPUT:AXIS", else axis 0 -> batch, a seq-like name -> seq,
    else the error names the --shape to give; a size for an
    axis the model fixes to another value is refused. Inputs are fed valid by construction
    (`input_by_construction`: the Gather tables they index, name conventions). No PyTorch module exists, so
    the reference is ort-cpu FP32.
    """
    given = dict(shapes)
    p = check_model_path(path)
    model = _read_checked(p)
    init_names = {i.name for i in model.graph.initializer}
    bounds = index_bounds(model)
    sizing = _AxisSizing(p, given)
    inputs = []
    for vi in model.graph.input:
        if vi.name in init_names:
            continue
        tt = vi.type.tensor_type
        if not vi.type.HasField("tensor_type") or not tt.HasField("elem_type"):
            raise ModelError(f"{p}: input {vi.name!r} is not a tensor; only tensor inputs can be fed")
        shape = tuple(sizing.axis(vi.name, i, d) for i, d in enumerate(tt.shape.dim))
        dtype = _numpy_dtype(tt.elem_type, p, vi.name)
        inputs.append(input_by_construction(vi.name, shape, dtype, bounds.get(vi.name)))
    if sizing.missing:
        raise ModelError(_missing_sizes(p, sizing.missing))
    outputs = tuple(o.name for o in model.graph.output)
    return ModelSpec(name=name or p.stem, onnx_path=p.absolute(), inputs=tuple(inputs), outputs=outputs,
                     task="regression", tags=frozenset({"user", "onnx"}),
                     config={"path": str(p.absolute()), "shape": sizing.used, "shape_names": sorted(sizing.names)},
                     description=f"user ONNX file {p}")


def _read_checked(p: Path) -> Any:
    """The ONNX model at `p` (external data not loaded) after the checks a user file passes: its external data,
    opsets and graph; ModelError naming the file otherwise."""
    import onnx

    try:
        model = onnx.load(str(p), load_external_data=False)
    except Exception as exc:  # noqa: BLE001 - protobuf errors have many types
        raise ModelError(f"{p}: not a readable ONNX model: {type(exc).__name__}: {exc}") from None
    check_external_data(p, model)
    check_opsets(p, model)
    check_graph(p)
    return model


@dataclass
class _AxisSizing:
    """The sizes of a user ONNX file's input axes as spec_from_onnx gives them, `given` being --shape's: the axis
    keys ("INPUT:AXIS") and dim names met (`names`), the --shape sizes used (`used`), and every free axis with no
    size (`missing`: input, axis, its name or "", its ONNX form), named together in one error."""

    p: Path
    given: dict[str, int]
    names: set[str] = field(default_factory=set)
    used: dict[str, int] = field(default_factory=dict)
    missing: list[tuple[str, int, str, str]] = field(default_factory=list)

    def axis(self, input_name: str, i: int, d: Any) -> int | str:
        """The size of axis `i` (ONNX dim `d`) of input `input_name`: the model's fixed size, else the --shape
        given by axis key or dim name, else SEQ or BATCH by its name and place; a free axis none of these sizes
        is listed as missing (BATCH stands in until the model is refused)."""
        p, shapes = self.p, self.given
        axis_key = f"{input_name}:{i}"
        self.names.add(axis_key)
        size = free_dim(d)
        if size == 0:
            raise ModelError(f"{p}: input {input_name!r} axis {i} is fixed at 0 by the model (an empty tensor); "
                             f"onnxruntime refuses any other size, and the harness feeds inputs of at least "
                             f"one element")
        if size is not None:
            if axis_key in shapes and shapes[axis_key] != size:
                raise ModelError(f"{p}: input {input_name!r} axis {i} is fixed at {size} by the "
                                 f"model; --shape {axis_key}={shapes[axis_key]} contradicts it")
            return size
        param = dim_name(d)
        if param:
            self.names.add(param)
        key = axis_key if axis_key in shapes else param if param in shapes else None
        if key is not None:
            self.used[key] = int(shapes[key])
            return int(shapes[key])
        if _SEQ_NAMES.match(param) and i > 0:
            return SEQ
        if _BATCH_NAMES.match(param) or i == 0:
            return BATCH
        self.missing.append((input_name, i, param, _free_form(d)))
        return BATCH  # a placeholder: the model is refused, naming every such axis


def is_user_model_ref(text: str) -> bool:
    """The one rule for "a user's model, not a registered name" (run's --model, recommend's --model, an A/B side):
    an ONNX file (a name ending in .onnx, or any path) or a `pkg.module:factory` reference."""
    t = str(text).strip()
    return t.endswith(".onnx") or "/" in t or os.path.sep in t or is_factory_ref(t)


def is_factory_ref(ref: str) -> bool:
    """`pkg.module:factory` (and not an existing file of that name)."""
    return bool(_FACTORY_REF.match(ref)) and not os.path.exists(ref)


def normalize_user_model(ref: str) -> str:
    """A --model value as workers re-register it: factories unchanged, files as absolute paths."""
    return ref if is_factory_ref(ref) else str(Path(ref).absolute())


def user_model_name(ref: str) -> str:
    """The model name of a --model value: the file's stem, or `module.factory` (last module component)."""
    if is_factory_ref(ref):
        module, func = ref.split(":")
        return f"{module.rsplit('.', 1)[-1]}.{func}"
    return Path(ref).stem


def register_user_model(ref: str, shapes: Iterable[tuple[str, int]] = ()) -> str:
    """Register `--model PATH.onnx` or `--model pkg.module:factory`; one that fails its checks (unreadable
    file, import error, bad factory result) is registered as a broken model: its cases become error rows
    with the reason, and the run goes on."""
    name = user_model_name(ref)
    if is_factory_ref(ref):
        try:
            spec = spec_from_factory(ref, name)
        except ModelError as exc:
            spec = ModelSpec(name=name, build=functools.partial(_factory_module, ref), inputs=(), outputs=(),
                             problem=str(exc), problem_detail=exc.detail, tags=frozenset({"user", "torch"}),
                             config={"factory": ref})
    else:
        p = Path(ref)
        try:
            spec = spec_from_onnx(p, name, shapes)
        except ModelError as exc:
            spec = ModelSpec(name=name, onnx_path=p.absolute(), inputs=(), outputs=(), problem=str(exc),
                             tags=frozenset({"user", "onnx"}), config={"path": str(p.absolute())})
    register_model(spec, replace=True)
    return name


# ---------------------------------------------------------------------------------------------- factories

def _one_line(exc: BaseException) -> str:
    """`Type: first line of the message` (the rest of a multi-line message is in the traceback)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def _load_factory(ref: str) -> Any:
    module_name, func_name = ref.split(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any import-time failure of user code
        raise ModelError(f"--model {ref}: cannot import {module_name!r}: {_one_line(exc)}",
                         detail=traceback.format_exc()) from None
    factory = getattr(module, func_name, None)
    if not callable(factory):
        raise ModelError(f"--model {ref}: module {module_name!r} has no callable {func_name!r}")
    return factory


def _call_factory(ref: str) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """Call a factory and check its result: (module, example_inputs[, meta])."""
    import torch

    try:
        result = _load_factory(ref)()
    except ModelError:
        raise
    except Exception as exc:  # noqa: BLE001 - user code
        raise ModelError(f"--model {ref}: the factory raised {_one_line(exc)} (traceback in the case's "
                         f"log)", detail=traceback.format_exc()) from None
    if not isinstance(result, tuple) or len(result) not in (2, 3):
        raise ModelError(f"--model {ref}: the factory must return (module, example_inputs) or "
                         f"(module, example_inputs, meta), got {type(result).__name__}")
    module, example, meta = result[0], result[1], (result[2] if len(result) == 3 else {}) or {}
    if not isinstance(module, torch.nn.Module):
        raise ModelError(f"--model {ref}: the factory's module is a {type(module).__name__}, "
                         f"not a torch.nn.Module")
    if not isinstance(example, Mapping) or not example or not all(
            isinstance(k, str) and isinstance(v, torch.Tensor) and v.dim() >= 1 for k, v in example.items()):
        raise ModelError(f"--model {ref}: example_inputs must be a non-empty dict of input name -> "
                         f"tensor with at least one dimension (dim 0 is the batch)")
    unknown = set(meta) - {"seq_dims", "outputs", "task"}
    if not isinstance(meta, Mapping) or unknown:
        raise ModelError(f"--model {ref}: meta keys {sorted(unknown)} unknown "
                         f"(valid: seq_dims, outputs, task)")
    return module.eval(), dict(example), dict(meta)


def _factory_module(ref: str) -> Any:
    return _call_factory(ref)[0]


def spec_from_factory(ref: str, name: str | None = None) -> ModelSpec:
    """A ModelSpec for `pkg.module:factory` (the contract is in docs/bring-your-own-model.md, "Your own PyTorch module").

    Inputs come from the example tensors: dim 0 is the batch, `meta["seq_dims"][name]` the sequence axis;
    dtypes as given; integer inputs are fed from [min, max] of the example (token ids stay inside the
    vocabulary), bool from {0, 1}, floats from a standard normal. Outputs are named by `meta["outputs"]`, else
    by what forward returns: a tensor "output", a tuple "output_0", "output_1", ..., a dict its keys.
    """
    module, example, meta = _call_factory(ref)
    seq_dims = dict(meta.get("seq_dims") or {})
    for k, axis in seq_dims.items():
        if k not in example or not isinstance(axis, int) or not 0 < axis < example[k].dim():
            raise ModelError(f"--model {ref}: meta seq_dims {k!r}: {axis!r} is not an axis 1..rank-1 of an "
                             f"example input (inputs: {sorted(example)})")
    inputs = [_example_input(ref, k, t, seq_dims.get(k)) for k, t in example.items()]
    outputs = meta.get("outputs") or _forward_output_names(ref, module, example)
    source_module = inspect.getmodule(_load_factory(ref))
    try:
        source = inspect.getsource(source_module) if source_module is not None else ref
    except (OSError, TypeError):
        source = ref
    signature = [(k, list(t.shape), str(t.dtype)) for k, t in example.items()]
    config = {"factory": ref, "source_sha256": hashlib.sha256(source.encode()).hexdigest(),
              "example_inputs": signature, "seq_dims": seq_dims}
    return ModelSpec(name=name or user_model_name(ref), build=functools.partial(_factory_module, ref),
                     inputs=tuple(inputs), outputs=tuple(outputs), task=str(meta.get("task", "regression")),
                     config=config, tags=frozenset({"user", "torch"}),
                     description=f"user torch factory {ref}")


def _example_input(ref: str, k: str, t: Any, seq_axis: int | None) -> TensorSpec:
    """How input `k` is fed, from its example tensor `t`: dim 0 the batch, `seq_axis` the sequence, the other
    sizes as given; integers from the example's [min, max], bool from {0, 1}, floats from a standard normal."""
    import numpy as np

    dtype = str(t.dtype).removeprefix("torch.")
    try:
        np.dtype(dtype)
    except TypeError:
        raise ModelError(f"--model {ref}: input {k!r} has dtype {dtype}, which numpy feeds cannot "
                         f"hold; give float32/float16/int64/int32/bool examples") from None
    low, high = 0, 2
    if dtype != "bool" and not t.is_floating_point():
        low, high = int(t.min()), int(t.max()) + 1
    shape = tuple(BATCH if i == 0 else SEQ if seq_axis == i else int(n) for i, n in enumerate(t.shape))
    return TensorSpec(k, shape, dtype, low, high)


def _forward_output_names(ref: str, module: Any, example: dict[str, Any]) -> tuple[str, ...]:
    """The output names of what forward(**example) returns: a dict's keys, "output_0", "output_1", ... for a
    tuple or list, else "output"; the module is told them (name_outputs)."""
    import torch

    try:
        with torch.no_grad():
            raw = module(**example)
    except Exception as exc:  # noqa: BLE001 - user code
        raise ModelError(f"--model {ref}: forward(**example_inputs) raised {_one_line(exc)} (traceback in "
                         f"the case's log)", detail=traceback.format_exc()) from None
    if isinstance(raw, Mapping):
        outputs: tuple[str, ...] = tuple(raw)
    elif isinstance(raw, (tuple, list)):
        outputs = tuple(f"output_{i}" for i in range(len(raw)))
    else:
        outputs = ("output",)
    name_outputs(raw, outputs)
    return outputs
