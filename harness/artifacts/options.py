"""RuntimeOptions: what a run gives every runtime and build step (threads, artifact cache, exporter, INT8 recipe)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from harness.artifacts.cache import ArtifactCache
from harness.artifacts.int8 import DEFAULT_CALIBRATION_METHOD


@dataclass(frozen=True)
class RuntimeOptions:
    """What every adapter gets from the run: thread count, artifact cache, ONNX exporter, INT8 recipe.

    int8_method: auto | static | dynamic (harness.artifacts.int8.choose_method resolves auto).
    calibration_method: minmax | entropy | percentile (static INT8 only).
    int8_activations: u8 (asymmetric, x86 CPU kernels) | s8 (symmetric; TensorRT wants this: an adapter
    passes dataclasses.replace(options, int8_activations="s8") to onnx_for_precision).
    The fields after compile_mode are set by a deployment variant (harness.variants) only.
    """

    threads: int
    cache: ArtifactCache = field(default_factory=ArtifactCache)
    exporter: str = "dynamo"
    # The run's shapes, e.g. ({"batch": 1}, {"batch": 8}): engines with optimisation profiles (TensorRT) cover
    # them at activation. Empty when unknown (a runtime then picks a default range).
    shapes: tuple[Mapping[str, int], ...] = ()
    int8_method: str = "auto"
    calibration_method: str = DEFAULT_CALIBRATION_METHOD
    int8_activations: str = "u8"
    compile_mode: str = "default"  # torch.compile mode (torch-compile-* runtimes)
    # A deployment variant's knobs (harness.variants; each applies them with dataclasses.replace):
    opset: int | None = None  # the export's ONNX opset (None: the exporter's default)
    graph_transforms: tuple[str, ...] = ()  # FP32 ONNX transforms, in order (harness.artifacts.transform)
    per_channel: bool = True  # INT8 weights per output channel (False: per tensor)
    fixed_axes: bool = False  # free dimensions fixed to the case's shape when a session is made
    session: tuple[tuple[str, str], ...] = ()  # runtime session knobs (ONNX Runtime: SESSION_KNOBS)
    tuning_trials: int = 0  # TVM MetaSchedule trials before the compile (tvm-cpu; 0: untuned)
    variant: str | None = None  # the variant's canonical name (None: the run's defaults)
    # may the runtime's threads spin between calls (ONNX Runtime's intra-op pool)? An interleaved A/B turns it
    # off: the side not being measured must not compete for the cores (a variant's explicit spin=on still wins)
    idle_spinning: bool = True
