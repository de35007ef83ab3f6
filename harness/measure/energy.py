"""Energy per inference from the machine's own counters (RAPL package/DRAM, NVML total energy), read at each timed
block's ends, idle draw subtracted, short windows refused (docs/method.md#energy)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from harness.results.schema import EnergyRecord, EnergySource

POWERCAP = Path("/sys/class/powercap")
IDLE_S = 0.3  # the idle baseline's length (only where a counter exists)
MIN_UPDATES = 10  # a window must span this many counter updates (uncertainty about 2/MIN_UPDATES at worst)
NVML_UPDATE_S = 0.1  # NVML's total-energy counter moved every 100 ms on the H200 (docs/hardware-runs.md)
RAPL_UPDATE_S = 0.001  # RAPL: about every millisecond (Intel SDM; AMD's powercap driver alike)


class Counter(Protocol):
    """One cumulative energy counter."""

    name: str  # e.g. "cpu package-0", "dram package-0", "gpu 0 NVIDIA H200"
    method: str
    update_s: float  # how often the counter's value moves (its resolution in time)
    wrap_j: float | None  # the counter's range: it wraps to 0 past it (None: does not wrap in practice)

    def read_j(self) -> float: ...


@dataclass
class RaplCounter:
    """A powercap zone: `energy_uj` (microjoules), `max_energy_range_uj` (where it wraps), `name`."""

    zone: Path
    name: str = ""
    method: str = "powercap (RAPL) energy_uj"
    update_s: float = RAPL_UPDATE_S
    wrap_j: float | None = None

    def __post_init__(self) -> None:
        label = _read_text(self.zone / "name") or self.zone.name
        real = self.zone.resolve()  # subzones are links at the top of powercap to a folder inside their package
        parent = _read_text(real.parent / "name") if "rapl" in real.parent.name else None
        self.name = self.name or (f"{label} ({parent})" if parent and parent != label else label)
        top = _read_int(self.zone / "max_energy_range_uj")
        self.wrap_j = top / 1e6 if top else None

    def read_j(self) -> float:
        value = _read_int(self.zone / "energy_uj")
        if value is None:
            raise OSError(f"{self.zone / 'energy_uj'} is not readable")
        return value / 1e6


@dataclass
class NvmlCounter:
    """nvmlDeviceGetTotalEnergyConsumption: millijoules since the driver loaded (64-bit: no wrap)."""

    nvml: Any
    handle: Any
    name: str
    method: str = "NVML nvmlDeviceGetTotalEnergyConsumption"
    update_s: float = NVML_UPDATE_S
    wrap_j: float | None = None

    def read_j(self) -> float:
        return float(self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle)) / 1e3


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _read_int(path: Path) -> int | None:
    text = _read_text(path)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def rapl_counters(root: Path = POWERCAP) -> tuple[list[RaplCounter], str | None]:
    """The package and DRAM zones under `root` that can be read, or why there are none."""
    if not root.is_dir():
        return [], f"no RAPL counters ({root} is absent)"
    zones = sorted(p for p in root.glob("*rapl*:*") if (p / "energy_uj").exists())
    if not zones:
        return [], f"no RAPL zone with an energy_uj file under {root}"
    counters, unreadable = [], []
    for z in zones:
        c = RaplCounter(z)
        if not (c.name.startswith("package") or c.name.startswith("dram")):
            continue  # core/uncore are inside the package's figure
        try:
            c.read_j()
        except OSError:
            unreadable.append(str(z / "energy_uj"))
            continue
        counters.append(c)
    if not counters:
        why = f"not readable ({', '.join(unreadable)}; root only on most kernels)" if unreadable else "no package zone"
        return [], f"RAPL counters under {root}: {why}"
    return counters, None


def nvml_counters(nvml: Any = None) -> tuple[list[NvmlCounter], str | None]:
    """One counter per NVIDIA GPU whose total-energy counter answers, or why there is none."""
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError as exc:
            return [], f"nvidia-ml-py is not importable: {exc}"
    try:
        nvml.nvmlInit()
        n = nvml.nvmlDeviceGetCount()
    except Exception as exc:  # noqa: BLE001 - no driver is a reason, not a crash
        return [], f"no NVIDIA driver: NVML init failed ({type(exc).__name__}: {exc})"
    counters, problems = [], []
    for i in range(n):
        h = nvml.nvmlDeviceGetHandleByIndex(i)
        try:
            nvml.nvmlDeviceGetTotalEnergyConsumption(h)
        except Exception as exc:  # noqa: BLE001 - pre-Volta GPUs and some VMs do not support it
            problems.append(f"GPU {i}: {type(exc).__name__}: {exc}")
            continue
        name = nvml.nvmlDeviceGetName(h)
        counters.append(NvmlCounter(nvml, h, f"gpu {i} {name.decode() if isinstance(name, bytes) else name}"))
    if not counters:
        return [], "NVML has no total-energy counter: " + ("; ".join(problems) or "no GPU")
    return counters, None


def counters_for(device: str, powercap: Path = POWERCAP, nvml: Any = None) -> tuple[list[Counter], list[str]]:
    """The counters a case on `device` draws on: RAPL for the host (every case), NVML for a CUDA device; and
    the reasons for each kind that could not be had."""
    found: list[Counter] = []
    reasons: list[str] = []
    rapl, why = rapl_counters(powercap)
    found += rapl
    reasons += [why] if why else []
    if device == "cuda":
        gpus, why = nvml_counters(nvml)
        found += gpus
        reasons += [why] if why else []
    return found, reasons


_FOUND: dict[str, tuple[list[Counter], list[str]]] = {}


@dataclass
class _Window:
    start: list[float]
    t0: float


@dataclass
class _Totals:
    joules: float = 0.0
    window_s: float = 0.0
    uncertainty_j: float = 0.0
    refused: list[str] = field(default_factory=list)


class EnergyTracker:
    """Energy over a case's timed blocks: `idle()` once, then `start()` / `stop(calls)` around each block,
    `record()` at the end. `clock` and `sleep` are injectable (fake time in the tests)."""

    def __init__(self, counters: Sequence[Counter], reasons: Sequence[str] = (),
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
                 idle_s: float = IDLE_S) -> None:
        self.counters = list(counters)
        self.reasons = list(reasons)
        self.clock, self.sleep, self.idle_s = clock, sleep, idle_s
        self._idle_w: list[float | None] = [None] * len(self.counters)
        self._idle_unc_w: list[float] = [0.0] * len(self.counters)
        self._totals = [_Totals() for _ in self.counters]
        self._window: _Window | None = None
        self._calls = 0
        self._broken: str | None = None
        self._prepared = False

    @classmethod
    def for_device(cls, device: str) -> EnergyTracker:
        """The tracker of a case on `device`; the counters are found once per process and device."""
        if device not in _FOUND:
            _FOUND[device] = counters_for(device)
        counters, reasons = _FOUND[device]
        return cls(counters, reasons)

    @property
    def available(self) -> bool:
        return bool(self.counters) and self._broken is None

    def _read(self) -> list[float]:
        try:
            return [c.read_j() for c in self.counters]
        except Exception as exc:  # noqa: BLE001 - a counter that stops answering ends the record, not the case
            self._broken = f"a counter stopped answering: {type(exc).__name__}: {exc}"
            return []

    def _delta(self, c: Counter, a: float, b: float) -> float:
        d = b - a
        if d < 0 and c.wrap_j:
            d += c.wrap_j  # one wrap between the two reads
        return d

    def idle(self) -> None:
        """The idle draw of each counter over `idle_s` with this process asleep (before the first block)."""
        if not self.available:
            return
        t0, a = self.clock(), self._read()
        self.sleep(self.idle_s)
        t1, b = self.clock(), self._read()
        if not a or not b or t1 <= t0:
            return
        for i, c in enumerate(self.counters):
            d = self._delta(c, a[i], b[i])
            if d >= 0:
                self._idle_w[i] = d / (t1 - t0)
                # one update's worth at each end, over the idle window
                self._idle_unc_w[i] = 2 * max(d / (t1 - t0) * c.update_s, 0.0) / (t1 - t0)

    prepare = idle  # the step before the first block

    @contextmanager
    def track(self, window: Any) -> Iterator[None]:
        """Around one timed block (harness.measure.tracker): the idle draw before the first, the counters read at
        the block's ends, its calls (warm-up ones too: `window.calls`) counted."""
        if not self._prepared:
            self._prepared = True
            self.idle()
        self.start()
        yield
        self.stop(window.calls)

    def fields(self, window: Any) -> dict[str, EnergyRecord]:
        return {"energy": self.record(window.batch)}

    def start(self) -> None:
        if self.available:
            self._window = _Window(self._read(), self.clock())

    def stop(self, calls: int = 0) -> None:
        w, self._window = self._window, None
        if w is None or not self.available:
            return
        end, t1 = self._read(), self.clock()
        if not end or not w.start:
            return
        span = t1 - w.t0
        self._calls += calls
        for i, c in enumerate(self.counters):
            tot = self._totals[i]
            if span < MIN_UPDATES * c.update_s:
                tot.refused.append(f"a {span * 1e3:.0f} ms block is shorter than {MIN_UPDATES} updates of the "
                                   f"counter ({c.update_s * 1e3:g} ms each)")
                continue
            d = self._delta(c, w.start[i], end[i])
            if d < 0:
                tot.refused.append("the counter went backwards (reset or driver reload)")
                continue
            if c.wrap_j and (self._idle_w[i] or 0.0) * span >= c.wrap_j:  # even idle, it wraps within the block
                tot.refused.append(f"a {span:.0f} s block could have wrapped the counter more than once "
                                   f"({c.wrap_j:.0f} J range)")
                continue
            tot.joules += d
            tot.window_s += span
            tot.uncertainty_j += 2 * (d / span) * c.update_s  # a step's worth at each end

    def record(self, batch: int = 1) -> EnergyRecord:
        if not self.counters:
            return EnergyRecord(status="unavailable", reason="; ".join(self.reasons) or "no energy counter")
        if self._broken:
            return EnergyRecord(status="unavailable", reason=self._broken)
        sources = []
        refused = []
        for i, c in enumerate(self.counters):
            tot = self._totals[i]
            if tot.window_s <= 0:
                refused.append(f"{c.name}: " + ("; ".join(dict.fromkeys(tot.refused)) or "no block measured"))
                continue
            idle_w = self._idle_w[i]
            net = tot.joules - (idle_w or 0.0) * tot.window_s
            unc = tot.uncertainty_j + self._idle_unc_w[i] * tot.window_s
            sources.append(EnergySource(name=c.name, method=c.method, joules=tot.joules, window_s=tot.window_s,
                                        idle_w=idle_w, net_joules=net, uncertainty_j=unc,
                                        update_s=c.update_s))
        if not sources:
            return EnergyRecord(status="refused", reason="; ".join(refused), calls=self._calls)
        net = sum(s.net_joules for s in sources)
        unc = sum(s.uncertainty_j for s in sources)
        per = net / self._calls if self._calls and net > 0 else None
        return EnergyRecord(
            status="measured", reason="; ".join(refused + self.reasons), calls=self._calls, batch=batch,
            sources=sources, net_joules=net, uncertainty_j=unc,
            joules_per_inference=per, joules_per_sample=per / batch if per else None,
            inferences_per_joule=1.0 / per if per else None,
            method=f"counters read at each timed block's ends; idle draw over {self.idle_s:g} s before the first "
                   "block subtracted; uncertainty: a counter step at each end of each window plus the idle "
                   "estimate's")


def merge_energy(a: EnergyRecord, b: EnergyRecord) -> EnergyRecord:
    """A case's energy after a later block (a --repeats round, a --confirm block): the windows of `a` and `b`
    together, the sources of one counter summed (its idle draw weighted by window), the per-inference figures
    derived again from the sums. A record that is `unavailable` stays so (a counter that stopped answering in
    a later block ends the case's record: its figure would cover only some blocks)."""
    if a.status == "unavailable":
        return a
    if b.status == "unavailable":
        return dataclasses.replace(b, reason=f"in a later block: {b.reason}")
    by_name: dict[str, EnergySource] = {}
    for s in [*a.sources, *b.sources]:
        o = by_name.get(s.name)
        if o is None:
            by_name[s.name] = s
            continue
        window = o.window_s + s.window_s
        idle = [(w, t) for w, t in ((o.idle_w, o.window_s), (s.idle_w, s.window_s)) if w is not None]
        idle_w = sum(w * t for w, t in idle) / sum(t for _, t in idle) if idle and sum(t for _, t in idle) else (
            idle[0][0] if idle else None)
        by_name[s.name] = dataclasses.replace(o, joules=o.joules + s.joules, window_s=window, idle_w=idle_w,
                                              net_joules=o.net_joules + s.net_joules,
                                              uncertainty_j=o.uncertainty_j + s.uncertainty_j)
    calls = a.calls + b.calls
    reason = "; ".join(dict.fromkeys(r for r in (a.reason, b.reason) if r))
    if not by_name:
        return EnergyRecord(status="refused", reason=reason, calls=calls)
    sources = list(by_name.values())
    net = sum(s.net_joules for s in sources)
    per = net / calls if calls and net > 0 else None
    batch = a.batch if a.status == "measured" else b.batch
    return EnergyRecord(status="measured", reason=reason, calls=calls, batch=batch, sources=sources,
                        net_joules=net, uncertainty_j=sum(s.uncertainty_j for s in sources),
                        joules_per_inference=per, joules_per_sample=per / batch if per else None,
                        inferences_per_joule=1.0 / per if per else None, method=a.method or b.method)
