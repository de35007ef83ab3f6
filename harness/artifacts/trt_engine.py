"""TrtEngineFromOnnx: a serialized TensorRT engine built from an ONNX artifact, cached by what decides it."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.artifacts.cache import Artifact, ArtifactCache
from harness.errors import ModelError
from harness.model import ModelSpec

# Used when the run's shapes are unknown (a runtime used outside a run): one profile over these ranges.
DEFAULT_DIM_RANGES = {"batch": (1, 8), "seq": (1, 128)}
WORKSPACE_BYTES = 4 * 2**30
STEP = "TrtEngineFromOnnx/2"  # /2: TF32 cleared (FP32 layers are IEEE FP32)

Shape = tuple[int, ...]


Ranges = dict[str, tuple[Shape, Shape, Shape]]  # input name -> (min, opt, max) shape


def profile_ranges(spec: ModelSpec, shapes: Sequence[Mapping[str, int]] = ()) -> Ranges:
    """One (min, opt, max) shape per input covering `shapes`; opt is the largest (TensorRT tunes for it)."""
    if shapes:
        given = [d for d in spec.symbolic_dims if any(d in s for s in shapes)]
        lo = {d: min(int(s[d]) for s in shapes if d in s) for d in given}
        hi = {d: max(int(s[d]) for s in shapes if d in s) for d in lo}
    else:
        lo, hi = {}, {}
    for d in spec.symbolic_dims:
        if d not in lo:
            lo[d], hi[d] = DEFAULT_DIM_RANGES.get(d, (1, 1))
    return {t.name: (t.concrete_shape(lo), t.concrete_shape(hi), t.concrete_shape(hi)) for t in spec.inputs}


def exact_profiles(spec: ModelSpec, shapes: Sequence[Mapping[str, int]]) -> list[Ranges]:
    """One profile per distinct run shape (min = opt = max): each shape gets kernels tuned for it."""
    out: list[Ranges] = []
    seen: set[tuple[tuple[str, int], ...]] = set()
    for dims in shapes:
        key = tuple(sorted((d, int(v)) for d, v in dims.items() if d in spec.symbolic_dims))
        if key in seen:
            continue
        seen.add(key)
        out.append({t.name: (t.concrete_shape(dims),) * 3 for t in spec.inputs})  # type: ignore[misc]
    return out


@dataclass(frozen=True)
class EngineFlags:
    """What the builder is asked for. `int8_source`: "qdq" (explicit Q/DQ model) or "entropy" (calibrator)."""

    fp16: bool = False
    int8: bool = False
    int8_source: str | None = None
    strongly_typed: bool = False  # TensorRT 11: precision comes from the ONNX types, no builder flags

    def as_dict(self) -> dict[str, Any]:
        return {"fp16": self.fp16, "int8": self.int8, "int8_source": self.int8_source,
                "strongly_typed": self.strongly_typed}


@dataclass(frozen=True)
class TrtEngineFromOnnx:
    """Lazy build step: calling it returns the cached engine Artifact, building it with TensorRT on a miss.

    onnx: the ONNX artifact (FP32 export, or the FP16 / QDQ model where the precision needs one).
    profiles: optimisation profiles, each {input: (min, opt, max)}.
    calibration: for INT8 with an entropy calibrator, a callable returning host feeds (all one shape).
    trt / torch: injectable modules (tests pass fakes).
    """

    onnx: Artifact
    cache: ArtifactCache
    flags: EngineFlags
    profiles: tuple[Mapping[str, tuple[Shape, Shape, Shape]], ...]
    label: str = "model"
    calibration: Callable[[], Iterable[Mapping[str, Any]]] | None = None
    trt: Any = None
    torch: Any = None
    workspace_bytes: int = WORKSPACE_BYTES
    _logger: list[Any] = field(default_factory=list, compare=False, repr=False)

    def _trt(self) -> Any:
        if self.trt is not None:
            return self.trt
        import tensorrt

        return tensorrt

    def _torch(self) -> Any:
        if self.torch is not None:
            return self.torch
        import torch

        return torch

    def gpu_identity(self) -> dict[str, Any]:
        torch = self._torch()
        props = torch.cuda.get_device_properties(0)
        return {"gpu": props.name, "compute_capability": f"{props.major}.{props.minor}"}

    def key_parts(self) -> dict[str, Any]:
        return {"onnx_fingerprint": self.onnx.key, "flags": self.flags.as_dict(),
                "profiles": [{k: [list(s) for s in v] for k, v in sorted(p.items())} for p in self.profiles],
                "tensorrt": self._trt().__version__, **self.gpu_identity(),
                "workspace_bytes": self.workspace_bytes, "step": STEP}

    def __call__(self) -> Artifact:
        return self.cache.get_or_build("trt-engine", self.label, self.key_parts(), "model.engine", self._build)

    def _build(self, path: Path) -> dict[str, Any]:
        trt = self._trt()
        self._check_precision_support(trt)
        logger = trt.Logger(trt.Logger.WARNING)
        self._logger.append(logger)
        builder = trt.Builder(logger)
        network, _parser = self._parse_network(trt, builder, logger)  # the parser holds weights until the build
        config = builder.create_builder_config()
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, self.workspace_bytes)
        if hasattr(trt.BuilderFlag, "TF32"):  # on by default: FP32 layers would run in TF32 (see ieee_fp32)
            config.clear_flag(trt.BuilderFlag.TF32)
        if self.flags.fp16 and not self.flags.strongly_typed:
            config.set_flag(trt.BuilderFlag.FP16)
        if self.flags.int8 and not self.flags.strongly_typed:
            config.set_flag(trt.BuilderFlag.INT8)
        for ranges in self.profiles:
            config.add_optimization_profile(self._profile(builder, network, ranges))
        calibrator = None
        if self.flags.int8 and self.flags.int8_source == "entropy":
            calibrator = self._entropy_calibration(trt, builder, network, config, path)
        serialized = builder.build_serialized_network(network, config)
        if serialized is None:
            raise ModelError(f"{self.onnx.path}: TensorRT could not build an engine with {self.flags.as_dict()} "
                             f"(see the TensorRT log above)")
        path.write_bytes(bytes(serialized))
        return {"tensorrt": trt.__version__, "flags": self.flags.as_dict(), "onnx": str(self.onnx.path),
                "profiles": len(self.profiles), "calibration_batches": getattr(calibrator, "batches", None)}

    def _check_precision_support(self, trt: Any) -> None:
        """ModelError when this TensorRT cannot build the precision asked for the way the flags ask (TensorRT 11
        has no entropy calibrator and no precision builder flags)."""
        entropy = self.flags.int8 and self.flags.int8_source == "entropy"
        if entropy and not hasattr(trt, "IInt8EntropyCalibrator2"):
            raise ModelError(f"tensorrt {trt.__version__} has no IInt8EntropyCalibrator2 (removed in TensorRT "
                             "11): INT8 needs a QDQ model there")
        if (self.flags.fp16 or self.flags.int8) and not self.flags.strongly_typed \
                and not hasattr(trt.BuilderFlag, "FP16"):
            raise ModelError(f"tensorrt {trt.__version__} has no precision builder flags (TensorRT 11): build "
                             "strongly typed from an FP16 / QDQ ONNX model instead")

    def _parse_network(self, trt: Any, builder: Any, logger: Any) -> tuple[Any, Any]:
        """The network of the ONNX artifact (strongly typed when the flags ask and TensorRT can) and the parser
        that filled it; ModelError with the parser's errors when it refuses the model."""
        flags = 0
        if self.flags.strongly_typed and hasattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED"):
            flags |= 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
        network = builder.create_network(flags)
        parser = trt.OnnxParser(network, logger)
        if not parser.parse_from_file(str(self.onnx.path)):
            errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
            raise ModelError(f"{self.onnx.path}: TensorRT's ONNX parser refused the model: {errors}")
        return network, parser

    def _entropy_calibration(self, trt: Any, builder: Any, network: Any, settings: Any, path: Path) -> Any:
        """INT8 entropy calibration set on `settings` (the builder config): its profile at the feeds' one shape
        and the calibrator (cache beside `path`), returned; ModelError when the model has no feeds or feeds of
        several shapes."""
        feeds = list(self.calibration() if self.calibration is not None else [])
        if not feeds:
            raise ModelError(f"{self.label}: INT8 entropy calibration needs calibration feeds; "
                             "the model has none")
        shapes = {tuple((k, tuple(v.shape)) for k, v in sorted(f.items())) for f in feeds}
        if len(shapes) != 1:
            raise ModelError(f"{self.label}: calibration feeds must share one shape, got {len(shapes)}")
        calib_ranges = {k: (tuple(v.shape),) * 3 for k, v in feeds[0].items()}
        settings.set_calibration_profile(self._profile(builder, network, calib_ranges))
        calibrator = make_entropy_calibrator(trt, self._torch(), feeds, path.with_suffix(".calib"))
        settings.int8_calibrator = calibrator
        return calibrator

    @staticmethod
    def _profile(builder: Any, network: Any, ranges: Mapping[str, tuple[Shape, Shape, Shape]]) -> Any:
        profile = builder.create_optimization_profile()
        names = {network.get_input(i).name for i in range(network.num_inputs)}
        for name, (lo, opt, hi) in ranges.items():
            if name in names:
                profile.set_shape(name, lo, opt, hi)
        return profile


def make_entropy_calibrator(trt: Any, torch: Any, feeds: list[Mapping[str, Any]], cache_path: Path) -> Any:
    """An IInt8EntropyCalibrator2 (TensorRT 10) feeding `feeds` one by one through CUDA buffers."""
    base = getattr(trt, "IInt8EntropyCalibrator2", None)
    if base is None:
        raise ModelError(f"tensorrt {trt.__version__} has no IInt8EntropyCalibrator2 (removed in TensorRT 11): "
                         "INT8 needs a QDQ model there")

    class EntropyCalibrator(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            base.__init__(self)
            self.batches = 0
            self._feeds = iter(feeds)
            self._buffers: dict[str, Any] = {}

        def get_batch_size(self) -> int:
            return 1  # explicit-batch networks: the batch is in the calibration profile's shapes

        def get_batch(self, names: list[str]) -> list[int] | None:
            feed = next(self._feeds, None)
            if feed is None:
                return None
            self.batches += 1
            for name in names:
                self._buffers[name] = torch.from_numpy(feed[name]).cuda()
            return [int(self._buffers[name].data_ptr()) for name in names]

        def read_calibration_cache(self) -> bytes | None:
            return cache_path.read_bytes() if cache_path.is_file() else None

        def write_calibration_cache(self, cache: Any) -> None:
            cache_path.write_bytes(bytes(cache))

    return EntropyCalibrator()
