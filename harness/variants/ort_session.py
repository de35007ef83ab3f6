"""ONNX Runtime session knobs (the seeds' tuning): graph optimisation level, execution mode, memory pattern."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from harness.variants.base import ChoiceKind

if TYPE_CHECKING:
    from harness.artifacts.options import RuntimeOptions


class _SessionKnob(ChoiceKind):
    """A knob the ORT adapter applies to its SessionOptions (runtimes/onnxruntime.py, SESSION_KNOBS)."""

    needs = "ort-session"
    option: str  # the RuntimeOptions.session key the adapter reads

    def apply_options(self, value: str, options: RuntimeOptions) -> RuntimeOptions:
        session = tuple((k, v) for k, v in options.session if k != self.option) + ((self.option, value),)
        return dataclasses.replace(options, session=session)


class OptLevel(_SessionKnob):
    key = "opt"
    title = "ONNX Runtime graph optimisation level (the harness's default: all)"
    values = "disabled, basic, extended or all"
    choices = ("disabled", "basic", "extended", "all")
    option = "graph_optimization_level"


class ExecMode(_SessionKnob):
    key = "exec"
    title = "ONNX Runtime execution mode (default: sequential; parallel runs independent branches on inter-op threads)"
    values = "sequential or parallel"
    choices = ("sequential", "parallel")
    option = "execution_mode"


class MemPattern(_SessionKnob):
    key = "mem"
    title = "ONNX Runtime memory pattern and buffer reuse (default: on)"
    values = "on or off"
    choices = ("on", "off")
    option = "memory_pattern"


class Spinning(_SessionKnob):
    key = "spin"
    title = ("ONNX Runtime's intra-op thread pool spinning while it waits for work (default: on); off frees the "
             "cores between calls, the wait policy that matters when the machine is shared")
    values = "on or off"
    choices = ("on", "off")
    option = "intra_op_spinning"


OPT, EXEC, MEM, SPIN = OptLevel(), ExecMode(), MemPattern(), Spinning()
