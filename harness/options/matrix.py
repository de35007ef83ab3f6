"""The matrix's options (models, shapes, runtimes, precisions) and how a workload's default models and runtimes
are chosen."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from harness.errors import UsageError
from harness.options.base import OptionDef, OptionGroup
from harness.options.values import names, positive_ints, switch
from harness.precision import Precision

if TYPE_CHECKING:
    from harness.workloads.base import Workload


def precisions(text: Any, what: str) -> tuple[Precision, ...]:
    try:
        return tuple(Precision.parse(p) for p in names(text, what))
    except ValueError as exc:
        raise UsageError(str(exc)) from None


MODELS = OptionGroup("models", "models and shapes", (
    OptionDef("models", "comma-separated zoo model names (default: all; with --quick: models tagged quick)",
              "NAMES"),
    OptionDef("model", "a user model to add to the matrix: path/to/model.onnx or package.module:factory "
                       "(repeatable; combines with --models; alone, only these models run)", "PATH",
              multiple=True),
    OptionDef("shape", "sizes for free dimensions of --model ONNX files other than batch/seq, by name or "
                       "INPUT:AXIS, e.g. height=224,width=224", "NAME=DIM,..."),
    OptionDef("batch-sizes", "comma-separated batch sizes (default: 1,8; with --quick: 1,4)", "INTS",
              field="batch_sizes", parse=positive_ints, quick="1,4"),
    OptionDef("seq-lens", "comma-separated sequence lengths for text models, ignored by models without a "
                          "sequence axis (default: 128; with --quick: 32)", "INTS",
              field="seq_lens", parse=positive_ints, quick="32"),
    OptionDef("quick", "a small default matrix for a smoke run", flag=True, field="quick", parse=switch(True)),
))
RUNTIMES = OptionGroup("runtimes", "runtimes and precisions", (
    OptionDef("runtimes", "comma-separated runtime names (default: every runtime that can run on this machine, "
                          "see `harness runtimes`; with --quick: torch-cpu,ort-cpu)", "NAMES"),
    OptionDef("precisions", "comma-separated precisions: fp32, fp16, bf16, int8 (default: fp32)", "NAMES",
              field="precisions", parse=precisions),
))


def models_option(raw: Mapping[str, Any], quick: bool, workload: Workload
                  ) -> tuple[tuple[str, ...], tuple[str, ...], tuple[tuple[str, int], ...]]:
    """--models / --model / --shape: the model names (none given: the workload's defaults), the user model
    references and the shape sizes."""
    from harness.model import get_model
    from harness.model_files import (check_shape_names, is_factory_ref, normalize_user_model, parse_shapes,
                                     register_user_model)

    for ref in raw.get("model") or ():
        if not is_factory_ref(ref) and not os.path.lexists(ref):
            raise UsageError(f"--model {ref}: no such file (expected path/to/model.onnx or "
                             "package.module:factory)")
    user_paths = tuple(normalize_user_model(p) for p in (raw.get("model") or ()))
    shapes = parse_shapes(raw.get("shape"))
    if shapes and not user_paths:
        raise UsageError("--shape sizes dimensions of --model ONNX files; no --model was given")
    # registered here to name their cases; every worker registers them again (ensure_user_models)
    user_names = tuple(register_user_model(p, shapes) for p in user_paths)
    check_shape_names(shapes, (get_model(n) for n in user_names if "onnx" in get_model(n).tags))
    if raw.get("models"):
        models = names(raw["models"], "models")
        for m in models:
            get_model(m)
    elif user_names:
        models = ()
    else:
        models = workload.default_models(quick)
    return tuple(dict.fromkeys(models + user_names)), user_paths, shapes


def runtimes_option(raw: Mapping[str, Any], quick: bool, workload: Workload) -> tuple[str, ...]:
    """--runtimes (checked by name); none given: the workload's defaults."""
    from harness.runtimes import get_runtime

    if raw.get("runtimes"):
        runtimes = names(raw["runtimes"], "runtimes")
        for r in runtimes:
            get_runtime(r)
        return runtimes
    return workload.default_runtimes(quick)


def available_runtimes() -> tuple[str, ...]:
    """The default runtime set: every registered runtime that can run on this machine (availability probes)."""
    from harness.plugins import load_plugins
    from harness.runtimes import get_runtime, runtime_names

    load_plugins()
    return tuple(r for r in runtime_names() if get_runtime(r).availability())  # as Workload.default_runtimes


