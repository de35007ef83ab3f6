"""What a person sees while a run goes: a live line on a terminal (rich), one plain line per case elsewhere."""

from __future__ import annotations

import math
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from harness.report.tables import flags_text, interval_text
from harness.results.schema import BROKEN, CaseResult, RunResults
from harness.results.stats import TAIL_P90_RATIO, TAIL_P99_RATIO, robust_cv
from harness.results.stats import tail_basis as _basis

# Live line refreshes per second: the elapsed time moves, and the parent stays idle while a worker measures.
REFRESH_PER_S = 1.0


def terminal_stream() -> IO[str]:
    """A text stream on the process's stdout that pytest's output capture cannot redirect (a dup of fd 1
    taken now, before any test runs), so progress lines reach the person during a case."""
    try:
        return os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1, encoding="utf-8", errors="replace")
    except (AttributeError, OSError, ValueError):  # no real stdout (embedded, pytester in-process)
        return sys.stdout


def _clock(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    h, rest = divmod(seconds, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


def case_line(result: CaseResult, log: str | None = None) -> str:
    """One line for a finished case: status, id and its p50 (or the phase and first line of the reason)."""
    status = result.status
    head = f"{status:<7} {result.case.id}"
    if result.measured and result.latency:
        lat = result.latency
        interval = lat.interval(50)
        ci = "" if interval is None else " " + _bounded_interval(*interval)
        tail = f"  p50 {lat.p50_ms:.4g} ms{ci}  rcv {_rcv(result):.2f}"
        flags = flags_text(lat, result.contention)
        if flags:
            tail += f" ({flags})"
        if status == "failed":  # the reason says "drift over tolerance: ..." with the figures
            tail += f"  {first_line(result.reason)}"
        elif (result.details or {}).get("caveat"):  # how the runtime was set up (an untuned compiler)
            tail += f"  [{first_line(str(result.details['caveat']))}]"
        return head + tail
    if status == "skipped":
        return f"{head}  {first_line(result.reason)}"
    where = f" in phase {result.phase}" if result.phase else ""
    reason = first_line(result.reason)
    return f"{head}{where}: {reason}" + (f"  (log: {log})" if log else "")


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _bounded_interval(lo: Any, hi: Any) -> str:
    """The p50's 95% interval on a case line: "[12.1, 12.6]"; a side the samples cannot bound (too few of them
    for an order-statistic interval) as "n/a", and "(CI needs more samples)" when neither side is bounded,
    never "[-inf, inf]"."""
    if not _finite(lo) and not _finite(hi):
        return "(CI needs more samples)"
    text = interval_text(lo if _finite(lo) else None, hi if _finite(hi) else None)
    return text.replace("-inf", "n/a").replace("inf", "n/a")


def _rcv(result: CaseResult) -> float:
    """The robust CV of a case's stored statistics (results written before it existed: from its samples)."""
    v = None if result.latency is None else result.latency.rcv
    if v is None:
        return robust_cv(result.samples_ns) if result.samples_ns else float("nan")
    return float(v)


def first_line(text: str | None, limit: int = 160) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


class RunProgress:
    """Progress of one run. `begin(label)` starts a unit (a case, a block of --repeats, a confirmation
    block); `end(line)` finishes it with a printed line; `note(line)` prints a line. On a terminal a live
    line names the unit, i of N, the elapsed time and an estimate of what is left; off a terminal only the
    finished lines are printed, one per unit."""

    def __init__(self, stream: IO[str] | None = None, live: bool | None = None,
                 clock: Callable[[], float] = time.monotonic, case_lines: bool = True) -> None:
        self.stream = stream if stream is not None else sys.stdout
        self.live = self._isatty() if live is None else live
        self.case_lines = case_lines  # False under pytest -v, which prints a line per case itself
        self.clock = clock
        self.phase, self.total, self.done = "case", 0, 0
        self.label = ""
        self._t_run = clock()
        self._t_phase = self._t_run
        self._t_unit: float | None = None
        self._live: Any = None
        self._console: Any = None

    def _isatty(self) -> bool:
        try:
            return bool(self.stream.isatty()) and os.environ.get("TERM") != "dumb"
        except (AttributeError, ValueError):
            return False

    # ------------------------------------------------------------------ events
    def start(self, phase: str, total: int) -> None:
        """A phase of `total` units: "case" (the matrix), "block" (--repeats rounds), "confirm"."""
        self.phase, self.total, self.done = phase, max(0, int(total)), 0
        self._t_phase = self.clock()

    def begin(self, label: str) -> None:
        self.label = label
        self._t_unit = self.clock()
        if self.live and self._shown():
            self._ensure_live()
            self._refresh()

    def end(self, line: str) -> None:
        self.done += 1
        took = self.clock() - self._t_unit if self._t_unit is not None else None
        self._t_unit = None
        if not self._shown():
            return
        prefix = f"[{self.done}/{self.total}]" if self.total else f"[{self.done}]"
        self.print(f"{prefix} {line}" + (f"  ({took:.1f} s)" if took is not None else ""))

    def _shown(self) -> bool:
        return self.case_lines or self.phase != "case"

    def note(self, line: str) -> None:
        self.print(line)

    def print(self, line: str) -> None:
        if self._live is not None:
            from rich.text import Text

            self._console.print(Text(line), soft_wrap=True)
            self._refresh()
        else:
            self.stream.write(line + "\n")
            self.stream.flush()

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    # ------------------------------------------------------------------ the live line
    def status_line(self) -> str:
        """`case 3/12 mlp-ort-cpu-fp32-b4 · elapsed 0:42 · ~1:10 left` (no estimate before a unit finished)."""
        now = self.clock()
        i = min(self.done + 1, self.total) if self.total else self.done + 1
        of = f"{i}/{self.total}" if self.total else f"{i}"
        parts = [f"{self.phase} {of} {self.label}", f"elapsed {_clock(now - self._t_run)}"]
        left = self.estimate_left(now)
        if left is not None:
            parts.append(f"~{_clock(left)} left")
        return " · ".join(parts)

    def estimate_left(self, now: float | None = None) -> float | None:
        """Seconds left in this phase: the mean time of its finished units times the units not finished."""
        if not self.done or not self.total:
            return None
        now = self.clock() if now is None else now
        per_unit = (now - self._t_phase - (now - self._t_unit if self._t_unit is not None else 0.0)) / self.done
        running = now - self._t_unit if self._t_unit is not None else 0.0
        return max(0.0, per_unit * (self.total - self.done) - running)

    def _ensure_live(self) -> None:
        if self._live is not None:
            return
        from rich.console import Console
        from rich.live import Live
        from rich.text import Text

        self._console = Console(file=self.stream, force_terminal=True, highlight=False)
        self._live = Live(console=self._console, auto_refresh=True, refresh_per_second=REFRESH_PER_S,
                          transient=True, redirect_stdout=False, redirect_stderr=False,
                          get_renderable=lambda: Text(self.status_line(), no_wrap=True, overflow="ellipsis"))
        self._live.start()

    def _refresh(self) -> None:
        if self._live is not None:
            self._live.refresh()


# ---------------------------------------------------------------------------------------------- logs

def write_case_log(result: CaseResult, out_dir: Path) -> str | None:
    """The full reason and the worker's traceback / stderr of a broken case, in `out_dir/logs/CASE.log`;
    returns the path relative to `out_dir` (None when there is nothing more than the one line)."""
    if result.status not in BROKEN and result.status != "failed":
        return None
    if not result.stderr_tail and "\n" not in (result.reason or ""):
        return None
    from harness.results.store import atomic_write_text

    name = re.sub(r"[^A-Za-z0-9._-]", "_", result.case.id)[:180] + ".log"
    text = (f"case: {result.case.id}\nstatus: {result.status}\nphase: {result.phase}\n"
            + (f"signal: {result.signal}\n" if result.signal else "")
            + f"reason:\n{result.reason}\n\nworker output (last lines):\n{result.stderr_tail}\n")
    atomic_write_text(Path(out_dir) / "logs" / name, text)
    return f"{Path(out_dir) / 'logs' / name}"


# ---------------------------------------------------------------------------------------------- summaries

def skipped_lines(run: RunResults) -> list[str]:
    """Skipped cases grouped: one line per runtime whose every case was skipped for one reason (a runtime that
    cannot run here), one per other reason (with counts), instead of a row per case. Read from the stored rows
    alone: a report never asks the runtimes again."""
    per_runtime: dict[str, set[str]] = {}
    for r in run.cases:
        per_runtime.setdefault(r.case.runtime, set()).add(first_line(r.reason) if r.status == "skipped" else "")
    groups: dict[tuple[str, str], int] = {}
    for r in run.cases:
        if r.status != "skipped":
            continue
        reasons = per_runtime[r.case.runtime]
        whole = len(reasons) == 1  # every case of this runtime skipped, for one reason
        key = (r.case.runtime, first_line(r.reason)) if whole else ("", first_line(r.reason))
        groups[key] = groups.get(key, 0) + 1
    out = []
    for (runtime, reason), n in groups.items():
        cases = f"{n} case{'s' if n > 1 else ''}"
        out.append(f"skipped {runtime}: {reason} ({cases})" if runtime else f"skipped {cases}: {reason}")
    return out


def noise_lines(run: RunResults) -> list[str]:
    """Where people look: was the CPU busy at the start or during the run, and which cases are noisy."""
    env = run.environment
    out = []
    start = env.cpu_busy_percent_at_start
    if start is not None and env.cpu_quiet_at_start is False:
        out.append(f"CPU busy at start: {start:.0f}% of the CPUs used by other processes: figures may be inflated")
    during = env.cpu_busy_others_percent
    if during is not None and during >= BUSY_DURING_PERCENT:
        out.append(f"CPU busy during the run: other processes used {during:.0f}% of the CPUs while cases ran: "
                   "figures may be inflated; rerun on a quiet machine")
    threads = (env.threads or {}).get("harness_threads")
    free = env.cpu_cores_free_at_start
    if isinstance(threads, int) and free is not None and threads > 1 and threads > free + 0.5:
        out.append(f"--threads {threads} with {free:.1f} core(s) free at the start: a thread pool of more threads "
                   "than free cores waits whole scheduler slices at its barriers (stalls at multiples of ~24 ms "
                   f"were measured); rerun with --threads {max(1, int(free + 0.5))} or on a quiet machine")
    cv_limit = (run.config or {}).get("noise_cv")
    noisy = [c for c in run.cases if c.measured and c.latency is not None and c.latency.noisy]
    if noisy:
        shown = ", ".join(f"{c.case.id} (rcv {_rcv(c):.2f})" for c in noisy[:8])
        more = f" and {len(noisy) - 8} more" if len(noisy) > 8 else ""
        out.append(f"noisy (robust cv > {cv_limit}): {len(noisy)} case(s): {shown}{more}")
    heavy = [(c, c.latency) for c in run.cases if c.measured and c.latency is not None and c.latency.tail_heavy]
    if heavy:
        shown = ", ".join(f"{c.case.id} ({_basis(lat.iterations)} "
                          f"{float('nan') if lat.tail_ratio is None else lat.tail_ratio:.3g})" for c, lat in heavy[:8])
        more = f" and {len(heavy) - 8} more" if len(heavy) > 8 else ""
        out.append(f"tail-heavy (p99/p50 > {TAIL_P99_RATIO:g}, or p90/p50 > {TAIL_P90_RATIO:g} under 100 samples: "
                   f"a second mode of slow calls, stalls): {len(heavy)} case(s): {shown}{more}")
    contended = [c for c in run.cases if c.measured and c.contention and c.contention.contended]
    if contended:
        first = contended[0]
        more = f"; and {len(contended) - 1} more" if len(contended) > 1 else ""
        out.append(f"contended: {len(contended)} case(s) measured while the machine kept the worker from the CPU "
                   f"(compare, gates and qualify call their figures inconclusive): {first.case.id}: "
                   f"{first.contention.cause}{more}")
    return out


# Other processes' share of the CPUs during the run above which the run is called busy.
BUSY_DURING_PERCENT = 15.0
