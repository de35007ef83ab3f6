"""Named baselines: `harness baseline save RESULTS.json [MORE.json ...] --name main`, loaded by name or path."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.display import visible
from harness.errors import ResultsError, UsageError
from harness.results.schema import RunResults, _finite, load_results, results_from_doc
from harness.results.store import atomic_write_text
from harness.results.stored import BundleDoc, read_json_object, validate

ENV_VAR = "HARNESS_BASELINE_DIR"
BASELINE_SCHEMA = 1
DEFAULT_DIR = Path(".harness") / "baselines"
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def baseline_dir(directory: str | Path | None = None) -> Path:
    """Where named baselines live: `directory`, else $HARNESS_BASELINE_DIR, else ./.harness/baselines."""
    if directory is not None:
        return Path(directory)
    env = os.environ.get(ENV_VAR)
    return Path(env) if env else DEFAULT_DIR


def load_run(path: str | Path) -> RunResults:
    """A results.json checked for gating by the one stored-file reader (`load_results`): bounded parsing,
    known schema, finite positive samples, statistics that agree with them, unique case ids, at least one case.

    Raises ResultsError naming the file, the place in it and the problem."""
    return load_results(path)


def _measured_somewhere(run: RunResults, source: str) -> RunResults:
    if not any(c.measured for c in run.cases):
        raise ResultsError(f"{source}: cases: no case was measured (passed or failed): nothing to compare "
                           f"against")
    return run


def _check_name(name: str) -> str:
    if not _NAME_RE.match(name):
        raise UsageError(f"baseline name {name!r}: use letters, digits, '.', '_' or '-' (at most 100)")
    return name


MAX_NAMED = 4  # cases named per warning line; the rest are counted


def disturbed_line(run: RunResults, source: str) -> str | None:
    """One line when a run about to be stored holds figures that contention inflated or that were noisy (they
    would judge every later run against a slow or spread baseline), naming how many and which; else None."""
    contended = [c.case.id for c in run.cases if c.measured and (c.contention or {}).get("contended")]
    noisy = [c.case.id for c in run.cases if c.measured and (c.latency or {}).get("noisy")
             and c.case.id not in contended]
    if not contended and not noisy:
        return None

    def named(ids: list[str]) -> str:
        return ", ".join(ids[:MAX_NAMED]) + (f" and {len(ids) - MAX_NAMED} more" if len(ids) > MAX_NAMED else "")

    parts = ([f"{len(contended)} contended ({named(contended)})"] if contended else []) + (
        [f"{len(noisy)} noisy ({named(noisy)})"] if noisy else [])
    measured = sum(1 for c in run.cases if c.measured)
    return (f"warning: {source}: stored figures of {' and '.join(parts)} of {measured} measured case(s): later runs "
            "are judged against them (contended rows are not judged; re-measure on a quiet machine and save again)")


def save_baseline(results: str | Path | list[str | Path], name: str, directory: str | Path | None = None,
                  allow_incomplete: bool = False, append: bool = False, keep: int | None = None,
                  warn: Callable[[str], None] | None = None) -> Path:
    """Validate the run(s) in `results` and store them as baseline `name`; returns the stored file.

    Replaces `name`, or with `append` adds the runs after the ones it holds (a missing `name` starts empty);
    `keep` then keeps the newest K runs. Runs are stored in the given order (oldest first). `warn` gets one line
    per given run that holds contended or noisy figures (disturbed_line)."""
    _check_name(name)
    paths = [results] if isinstance(results, (str, Path)) else list(results)
    if not paths:
        raise UsageError("baseline save: give at least one results.json")
    if keep is not None and keep < 1:
        raise UsageError(f"baseline save: --keep {keep}: keep at least one run")
    runs, warnings = [], []
    for path in paths:
        run = load_run(path)
        if (not run.complete or run.interrupted) and not allow_incomplete:
            what = "interrupted: true" if run.interrupted else "complete: false"
            raise ResultsError(f"{path}: {what}: the run is incomplete (interrupted or killed); a baseline needs "
                               f"a finished run (or pass --allow-incomplete)")
        runs.append(_measured_somewhere(run, str(path)))
        warnings.append(disturbed_line(run, str(path)))
    target = baseline_dir(directory) / f"{name}.json"
    if append and target.exists():
        runs = load_baseline_runs(target) + runs
    if keep is not None:
        runs = runs[-keep:]
    doc = {"baseline_schema": BASELINE_SCHEMA, "name": name, "runs": [_finite(r.as_dict()) for r in runs]}
    atomic_write_text(target, json.dumps(doc, indent=1))
    for line in warnings:  # after the store: the figures are kept, the user told what they hold
        if line and warn is not None:
            warn(line)
    return target


def load_baseline_runs(name_or_path: str | Path, directory: str | Path | None = None) -> list[RunResults]:
    """The runs of a baseline, oldest first: a stored name, a bundle file, or one results.json / run folder.

    Raises ResultsError naming the file for a missing, truncated, unknown-schema or NaN-holding baseline."""
    path = resolve_baseline(name_or_path, directory)
    file = path / "results.json" if path.is_dir() else path
    doc = read_json_object(file)
    if "baseline_schema" not in doc:
        return [_measured_somewhere(results_from_doc(doc, str(file)), str(file))]
    version = doc.get("baseline_schema")
    if version != BASELINE_SCHEMA:
        raise ResultsError(f"{file}: baseline_schema: {version!r} is not one this harness reads "
                           f"({BASELINE_SCHEMA}); upgrade the harness or save the baseline again")
    bundle = validate(BundleDoc, doc, str(file))
    assert isinstance(bundle, BundleDoc)
    return [_measured_somewhere(results_from_doc(d, str(file), f"runs[{i}]"), f"{file}: runs[{i}]")
            for i, d in enumerate(bundle.runs)]


@dataclass(frozen=True)
class BaselineInfo:
    name: str
    path: Path
    run_id: str
    machine: str
    cases: int
    measured: int
    problem: str = ""  # a stored file that no longer loads
    runs: int = 1


def list_baselines(directory: str | Path | None = None) -> list[BaselineInfo]:
    """The stored baselines, by name; a file that does not load is listed with its problem."""
    root = baseline_dir(directory)
    out = []
    for p in sorted(root.glob("*.json")) if root.is_dir() else []:
        try:
            runs = load_baseline_runs(p)
            run = runs[-1]
            out.append(BaselineInfo(p.stem, p, run.run_id, str(run.environment.get("machine", "?")),
                                    len(run.cases), sum(c.measured for c in run.cases), runs=len(runs)))
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
    """The newest run of a baseline (by stored name or path), validated like `load_run`."""
    return load_baseline_runs(name_or_path, directory)[-1]


def describe(info: BaselineInfo) -> str:
    """One line of `harness baseline ls` (stored text made `visible`)."""
    if info.problem:
        return visible(f"{info.name:<20} BROKEN: {info.problem}")
    runs = f"{info.runs} runs, newest {info.run_id}" if info.runs > 1 else f"run {info.run_id}"
    return visible(f"{info.name:<20} {runs}  {info.measured}/{info.cases} measured  {info.machine}  {info.path}")


def as_json(infos: list[BaselineInfo]) -> str:
    return json.dumps([{**info.__dict__, "path": str(info.path)} for info in infos], indent=1)
