"""User model files: safety checks made before any library opens them, and ModelSpecs for ONNX files."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from harness.errors import ModelError
from harness.model import BATCH, SEQ, ModelSpec, TensorSpec, register_model

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


def _numpy_dtype(elem_type: int) -> str:
    from onnx import helper

    import numpy as np

    return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).name


def spec_from_onnx(path: str | Path, name: str | None = None) -> ModelSpec:
    """A ModelSpec for a user ONNX file: inputs from its declared types; symbolic dims mapped to batch/seq.

    Integer inputs are fed from [0, 2) when their name contains "mask", else [0, 100) (valid token ids for
    any vocabulary of 100 or more). No PyTorch module exists, so the reference is ort-cpu FP32.
    """
    import onnx

    p = check_model_path(path)
    try:
        model = onnx.load(str(p), load_external_data=False)
    except Exception as exc:  # noqa: BLE001 - protobuf errors have many types
        raise ModelError(f"{p}: not a readable ONNX model: {type(exc).__name__}: {exc}") from None
    check_external_data(p, model)
    init_names = {i.name for i in model.graph.initializer}
    inputs = []
    for vi in model.graph.input:
        if vi.name in init_names:
            continue
        tt = vi.type.tensor_type
        if not tt.HasField("elem_type"):
            raise ModelError(f"{p}: input {vi.name!r} is not a tensor")
        shape: list[int | str] = []
        for i, d in enumerate(tt.shape.dim):
            param = d.dim_param or ""
            if d.HasField("dim_value") and d.dim_value > 0:
                shape.append(int(d.dim_value))
            elif _SEQ_NAMES.match(param) and i > 0:
                shape.append(SEQ)
            elif _BATCH_NAMES.match(param) or i == 0:
                shape.append(BATCH)
            else:
                raise ModelError(f"{p}: input {vi.name!r} axis {i} is symbolic ({param or '?'}) and "
                                 f"not a batch or sequence axis; give it a size")
        dtype = _numpy_dtype(tt.elem_type)
        high = 2 if "mask" in vi.name.lower() else 100
        inputs.append(TensorSpec(vi.name, tuple(shape), dtype, 0, high))
    outputs = tuple(o.name for o in model.graph.output)
    return ModelSpec(name=name or p.stem, onnx_path=p.absolute(), inputs=tuple(inputs), outputs=outputs,
                     task="regression", tags=frozenset({"user", "onnx"}), config={"path": str(p.absolute())},
                     description=f"user ONNX file {p}")


def register_user_model(path: str) -> str:
    """Register `--model PATH.onnx`; a file that fails its checks is registered as a broken model (its cases
    become error rows with the reason, and the run goes on)."""
    p = Path(path)
    name = p.stem
    try:
        spec = spec_from_onnx(p, name)
    except ModelError as exc:
        spec = ModelSpec(name=name, onnx_path=p.absolute(), inputs=(), outputs=(), problem=str(exc),
                         tags=frozenset({"user", "onnx"}), config={"path": str(p.absolute())})
    register_model(spec, replace=True)
    return name
