"""Named baselines: `harness baseline save RESULTS.json --name main`, loaded back by name or path.

Baselines live in `$HARNESS_BASELINE_DIR`, else `.harness/baselines/` under the current folder (commit it,
or cache it in CI), one `NAME.json` each: a validated copy of the results file, raw samples included.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import ResultsError, UsageError
from harness.results.schema import RunResults, load_results
from harness.results.store import atomic_write_text

ENV_VAR = "HARNESS_BASELINE_DIR"
DEFAULT_DIR = Path(".harness") / "baselines"
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def baseline_dir(directory: str | Path | None = None) -> Path:
    """Where named baselines live: `directory`, else $HARNESS_BASELINE_DIR, else ./.harness/baselines."""
    if directory is not None:
        return Path(directory)
    env = os.environ.get(ENV_VAR)
    return Path(env) if env else DEFAULT_DIR


def load_run(path: str | Path) -> RunResults:
    """A results.json checked for gating: readable, known schema, finite samples and statistics.

    Raises ResultsError naming the file for a missing, truncated, newer-schema or NaN-holding file.
    """
    run = load_results(path)
    source = Path(path) / "results.json" if Path(path).is_dir() else Path(path)
    for c in run.cases:
        if not c.measured:
            continue
        where = f"{source}: case {c.case.id}"
        if not isinstance(c.samples_ns, list) or not c.samples_ns:
            raise ResultsError(f"{where}: status {c.status} but no latency samples (samples_ns)")
        bad = next((v for v in c.samples_ns if not _finite_number(v) or v < 0), None)
        if bad is not None:
            raise ResultsError(f"{where}: samples_ns holds {bad!r} (NaN, infinite, negative or not a number)")
        for key, value in (c.latency or {}).items():
            if key not in ("noisy", "iterations") and not _finite_number(value):
                raise ResultsError(f"{where}: latency.{key} is {value!r}: not a finite number")
        if c.throughput_sps is not None and not _finite_number(c.throughput_sps):
            raise ResultsError(f"{where}: throughput_sps is {c.throughput_sps!r}: not a finite number")
    return run


def _finite_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _check_name(name: str) -> str:
    if not _NAME_RE.match(name):
        raise UsageError(f"baseline name {name!r}: use letters, digits, '.', '_' or '-' (at most 100)")
    return name


def save_baseline(results: str | Path, name: str, directory: str | Path | None = None,
                  allow_incomplete: bool = False) -> Path:
    """Validate `results` and store it as baseline `name`; returns the stored file. Overwrites `name`."""
    _check_name(name)
    run = load_run(results)
    if not run.complete and not allow_incomplete:
        raise ResultsError(f"{results}: the run is incomplete (interrupted or killed); a baseline needs a "
                           f"finished run (or pass --allow-incomplete)")
    if not any(c.measured for c in run.cases):
        raise ResultsError(f"{results}: no case was measured; nothing to compare against")
    target = baseline_dir(directory) / f"{name}.json"
    atomic_write_text(target, run.to_json())
    return target


@dataclass(frozen=True)
class BaselineInfo:
    name: str
    path: Path
    run_id: str
    machine: str
    cases: int
    measured: int
    problem: str = ""  # a stored file that no longer loads


def list_baselines(directory: str | Path | None = None) -> list[BaselineInfo]:
    """The stored baselines, by name; a file that does not load is listed with its problem."""
    root = baseline_dir(directory)
    out = []
    for p in sorted(root.glob("*.json")) if root.is_dir() else []:
        try:
            run = load_run(p)
            out.append(BaselineInfo(p.stem, p, run.run_id, str(run.environment.get("machine", "?")),
                                    len(run.cases), sum(c.measured for c in run.cases)))
        except ResultsError as exc:
            out.append(BaselineInfo(p.stem, p, "?", "?", 0, 0, problem=str(exc)))
    return out


def resolve_baseline(name_or_path: str | Path, directory: str | Path | None = None) -> Path:
    """A path (an existing file or folder, or anything with a '/' or ending in .json) or a stored name."""
    text = str(name_or_path)
    p = Path(text)
    if p.exists() or "/" in text or os.sep in text or text.endswith(".json"):
        return p
    _check_name(text)
    root = baseline_dir(directory)
    target = root / f"{text}.json"
    if not target.exists():
        have = ", ".join(b.stem for b in sorted(root.glob("*.json"))) if root.is_dir() else ""
        raise ResultsError(f"{target}: no baseline named {text!r} in {root} "
                           f"({'saved: ' + have if have else 'none saved'}); save one with "
                           f"`harness baseline save RESULTS.json --name {text}`")
    return target


def load_baseline(name_or_path: str | Path, directory: str | Path | None = None) -> RunResults:
    """Load a baseline by stored name or by path, validated like `load_run` (ResultsError naming the file)."""
    return load_run(resolve_baseline(name_or_path, directory))


def describe(info: BaselineInfo) -> str:
    if info.problem:
        return f"{info.name:<20} BROKEN: {info.problem}"
    return f"{info.name:<20} run {info.run_id}  {info.measured}/{info.cases} measured  {info.machine}  {info.path}"


def as_json(infos: list[BaselineInfo]) -> str:
    return json.dumps([{**info.__dict__, "path": str(info.path)} for info in infos], indent=1)
