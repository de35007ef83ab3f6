"""How artifacts are built (harness.artifacts): the cache, the exporter, INT8 recipes, torch.compile's mode."""

from __future__ import annotations

from harness.artifacts.int8 import CALIBRATION_METHODS, INT8_METHODS
from harness.config import COMPILE_MODES, EXPORTERS
from harness.options.base import OptionDef, OptionGroup
from harness.options.values import choice, folder

BUILD = OptionGroup("build", "artifacts and recipes", (
    OptionDef("cache-dir", "artifact cache (default: $HARNESS_CACHE_DIR or ~/.cache/harness)", "DIR",
              field="cache_dir", parse=folder),
    OptionDef("exporter", "torch.onnx exporter for zoo models: dynamo (default) or legacy", "NAME",
              field="exporter", parse=choice(EXPORTERS, "exporters")),
    OptionDef("int8-method", "INT8 recipe of ONNX runtimes: static (QDQ, calibrated), dynamic, or auto (default: "
                             "dynamic for MatMul graphs without Conv and without calibration data, else static)",
              "NAME", field="int8_method", parse=choice(INT8_METHODS, "methods", fold=True)),
    OptionDef("calibration-method", "activation calibration of static INT8: minmax (default), entropy, percentile",
              "NAME", field="calibration_method", parse=choice(tuple(CALIBRATION_METHODS), "methods", fold=True)),
    OptionDef("compile-mode", "torch.compile mode for the torch-compile-* runtimes: default, reduce-overhead, "
                              "max-autotune or max-autotune-no-cudagraphs (default: default)", "MODE",
              field="compile_mode", parse=choice(COMPILE_MODES, "modes")),
))

# the cache's own commands (`harness cache ls | clear`, `harness envs ...`, `harness ceilings`): its folder, parsed
# by the CLI's parser, and what `cache` lists or clears
CACHE_DIR = BUILD.only("cache_dir")
CACHE_KIND = OptionGroup("cache", "cache entries", (
    OptionDef("kind", "only entries of this kind (onnx, weights, ...)", "KIND"),
))
