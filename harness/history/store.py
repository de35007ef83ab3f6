"""Open the history database (migrated to head with Alembic on first use), record runs, read series back."""

from __future__ import annotations

import datetime as _dt
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import Engine, create_engine, event, select
from sqlalchemy.exc import ArgumentError, SQLAlchemyError
from sqlalchemy.orm import Session

from harness.errors import UsageError, install_hint
from harness.history.changes import ChangePoint, Modes, NoiseModel, Settings, analyse, min_detectable_step, noise
from harness.history.models import Case, CaseStat, Run
from harness.results.schema import MEASURED, RunResults

ENV_VAR = "HARNESS_HISTORY"
MIGRATIONS = Path(__file__).resolve().parent / "migrations"
METRICS = {"p50": ("p50_ms", "ms", True), "p99": ("p99_ms", "ms", True),
           "throughput": ("throughput_sps", "samples/s", False)}  # name -> (column, unit, lower is better)


class HistoryError(UsageError):
    """The history database cannot be opened or holds something we refuse (a run recorded twice)."""


def default_url() -> str:
    """SQLite in the user's data folder: platformdirs' user_data_dir('harness')/history.db
    (~/.local/share/harness/history.db on Linux)."""
    from platformdirs import user_data_dir

    return f"sqlite:///{Path(user_data_dir('harness')) / 'history.db'}"


def history_url(url: str | None = None) -> str:
    """The database to use: `url`, else $HARNESS_HISTORY, else default_url(). A bare path means SQLite."""
    url = url or os.environ.get(ENV_VAR) or default_url()
    if "://" not in url:
        url = f"sqlite:///{Path(url).expanduser().absolute()}"
    return url


def masked(url: str) -> str:
    """The URL with any password hidden, for messages and stored configurations."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return url


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


@dataclass(frozen=True)
class Point:
    """One run's figure for a case on a machine, and the fingerprint of the model it measured (None: not
    recorded)."""

    run_id: str
    started_at: str
    commit: str | None
    value: float
    model: str | None = None


@dataclass(frozen=True)
class ModelChange:
    """Where a series' model changed: `index` is the first run measuring the new model (`after`), `since` the
    index after the last run that measured the old one (`before`); runs between them recorded no fingerprint,
    so the change happened somewhere in runs since..index. A change point there is the model's doing."""

    index: int
    since: int
    before: str
    after: str

    def covers(self, index: int) -> bool:
        return self.since <= index <= self.index

    def words(self) -> str:
        return f"model changed: fingerprint {self.before[:12]} -> {self.after[:12]}"


def model_changes(points: Sequence[Point]) -> list[ModelChange]:
    """The runs where the model's fingerprint differs from the last one recorded before it (runs without a
    fingerprint are skipped: unknown is never a change)."""
    out: list[ModelChange] = []
    last: tuple[int, str] | None = None
    for i, p in enumerate(points):
        if not p.model:
            continue
        if last is not None and p.model != last[1]:
            out.append(ModelChange(i, last[0] + 1, last[1], p.model))
        last = (i, p.model)
    return out


@dataclass
class Series:
    """A case's figures on one machine, oldest first, with the change points found in them."""

    case: str
    machine: str
    fingerprint: str
    metric: str
    unit: str
    points: list[Point] = field(default_factory=list)
    changes: list[ChangePoint] = field(default_factory=list)
    modes: Modes | None = None  # two alternating levels (not change points)
    model: NoiseModel | None = None  # the noise model its steps were tested under
    settings: Settings = field(default_factory=Settings)
    model_changes: list[ModelChange] = field(default_factory=list)  # where the measured model changed

    def model_change_at(self, index: int) -> ModelChange | None:
        """The model change a change point whose first run after is `index` falls on, if any."""
        return next((m for m in self.model_changes if m.covers(index)), None)


def upgrade(engine: Engine) -> None:
    """Alembic `upgrade head` with the migration scripts shipped in this package (creates an empty database's
    tables; later versions add their migrations)."""
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")


def open_history(url: str | None = None) -> History:
    """The history at `url` (see history_url), migrated to the current schema."""
    resolved = history_url(url)
    try:
        if resolved.startswith("sqlite:///"):
            Path(resolved.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(resolved)
        if engine.dialect.name == "sqlite":
            event.listen(engine, "connect", lambda c, _r: c.execute("PRAGMA foreign_keys=ON"))
        upgrade(engine)
    except ImportError as exc:  # the URL's driver is not installed
        raise HistoryError(f"history {masked(resolved)}: cannot open: {_first_line(exc)} (PostgreSQL: "
                           f"{install_hint('postgres')}, the psycopg driver)") from None
    except (ArgumentError, SQLAlchemyError, OSError) as exc:
        raise HistoryError(f"history {masked(resolved)}: cannot open: {_first_line(exc)}") from None
    return History(engine, resolved)


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


class History:
    """Runs and their per-case statistics in one database."""

    def __init__(self, engine: Engine, url: str) -> None:
        self.engine, self.url = engine, url

    def close(self) -> None:
        self.engine.dispose()

    def check_writable(self) -> None:
        """A HistoryError unless a run can be recorded: a probe row is written and rolled back (a read-only
        file, a read-only database user or a locked database are found before a run starts, not after it)."""
        try:
            with Session(self.engine) as s:
                s.begin()
                s.add(Run(run_id="harness-write-probe", started_at=_now(), finished_at=None, commit=None,
                          dirty=None, machine_fingerprint="probe", machine="probe", harness_version="probe",
                          complete=False, source="", added_at=_now()))
                s.flush()
                s.rollback()
        except (SQLAlchemyError, OSError) as exc:
            raise HistoryError(f"history {masked(self.url)}: cannot record runs: {_first_line(exc)}") from None

    def add(self, run: RunResults, source: str = "") -> int:
        """Record `run` (its measured cases' p50/p99/mean/throughput, every case's status); returns how many
        cases it recorded. A run already recorded (same run id on the same machine) is refused; a database
        that refuses the write is a HistoryError (one line)."""
        try:
            return self._add(run, source)
        except (SQLAlchemyError, OSError) as exc:
            raise HistoryError(f"history {masked(self.url)}: cannot record run {run.run_id}: "
                               f"{_first_line(exc)}") from None

    def _add(self, run: RunResults, source: str) -> int:
        env = run.environment
        fingerprint = str(env.machine_fingerprint or env.hostname or "unknown")
        git = env.git or {}
        with Session(self.engine) as s, s.begin():
            dup = s.scalar(select(Run.id).where(Run.run_id == run.run_id, Run.machine_fingerprint == fingerprint))
            if dup is not None:
                raise HistoryError(f"history {masked(self.url)}: run {run.run_id} on machine {fingerprint} is "
                                   "already recorded")
            row = Run(run_id=run.run_id, started_at=run.started_at, finished_at=run.finished_at,
                      commit=git.get("commit"), dirty=git.get("dirty"), machine_fingerprint=fingerprint,
                      machine=str(env.machine or env.hostname or fingerprint)[:500],
                      harness_version=run.harness_version[:64], complete=run.complete, source=source[:1000],
                      added_at=_now())
            s.add(row)
            cases = {c.key: c for c in s.scalars(select(Case).where(Case.key.in_([c.case.id for c in run.cases])))}
            for c in run.cases:
                case = cases.get(c.case.id)
                if case is None:
                    cid = c.case
                    case = cases[cid.id] = Case(key=cid.id, model=cid.model, runtime=cid.runtime,
                                                precision=str(cid.precision), batch=cid.batch, seq=cid.seq,
                                                device=cid.device)
                    s.add(case)
                lat = c.latency if c.measured else None
                row.results.append(CaseStat(case=case, status=c.status, p50_ms=lat and lat.p50_ms,
                                            p99_ms=lat and lat.p99_ms, mean_ms=lat and lat.mean_ms,
                                            throughput_sps=c.throughput_sps if c.measured else None,
                                            samples=len(c.samples_ns), noisy=lat and lat.noisy,
                                            model_fingerprint=(c.model_fingerprint or None) and c.model_fingerprint[:64]))
        return len(run.cases)

    def runs(self) -> list[dict[str, Any]]:
        """Every recorded run, oldest first, with its case counts."""
        with Session(self.engine) as s:
            out = []
            for r in s.scalars(select(Run).order_by(Run.started_at, Run.id)):
                statuses = [x.status for x in r.results]
                out.append({"run_id": r.run_id, "started_at": r.started_at, "commit": r.commit,
                            "machine": r.machine, "fingerprint": r.machine_fingerprint, "complete": r.complete,
                            "cases": len(statuses), "measured": sum(st in MEASURED for st in statuses),
                            "source": r.source})
            return out

    def case_parts(self) -> dict[str, tuple[str, str, str, int, int | None]]:
        """Case id -> (model, runtime, precision, batch, seq), what a re-measurement of the case needs."""
        with Session(self.engine) as s:
            return {c.key: (c.model, c.runtime, c.precision, c.batch, c.seq) for c in s.scalars(select(Case))}

    def case_keys(self) -> list[str]:
        with Session(self.engine) as s:
            return list(s.scalars(select(Case.key).order_by(Case.key)))

    def series(self, cases: Iterable[str] | None = None, metric: str = "p50", *,
               max_pvalue: float | None = None, min_magnitude: float | None = None,
               settings: Any = None) -> list[Series]:
        """Per case and machine, the metric over the recorded runs (measured cases only, oldest first) and its
        change points, drifts and modes (harness.history.changes.analyse). `cases`: case ids (default: all);
        `settings`: a harness.history.settings.CaseSettings (per case; default: the built-in settings with
        `max_pvalue` and `min_magnitude` where given)."""
        if metric not in METRICS:
            raise HistoryError(f"--metric {metric!r}: valid metrics: {', '.join(METRICS)}")
        column, unit, _ = METRICS[metric]
        q = (select(Case.key, Run.machine_fingerprint, Run.machine, Run.run_id, Run.started_at, Run.commit,
                    getattr(CaseStat, column), CaseStat.model_fingerprint)
             .join(CaseStat.case).join(CaseStat.run)
             .where(getattr(CaseStat, column).is_not(None))
             .order_by(Case.key, Run.machine_fingerprint, Run.started_at, Run.id))
        wanted = list(cases) if cases is not None else None
        if wanted is not None:
            q = q.where(Case.key.in_(wanted))
        out: dict[tuple[str, str], Series] = {}
        with Session(self.engine) as s:
            for key, fp, machine, run_id, started, commit, value, model in s.execute(q):
                ser = out.setdefault((key, fp), Series(key, machine, fp, metric, unit))
                ser.machine = machine  # the newest label
                ser.points.append(Point(run_id, started, commit, float(value), model))
        if settings is None:
            from harness.history.settings import CaseSettings

            kwargs = {k: v for k, v in (("max_pvalue", max_pvalue), ("min_magnitude", min_magnitude)) if v is not None}
            settings = CaseSettings(Settings(**kwargs))
        for ser in out.values():
            ser.settings = settings.for_case(ser.case)
            found = analyse([p.value for p in ser.points], ser.settings)
            ser.changes, ser.modes, ser.model = found.changes, found.modes, found.model
            ser.model_changes = model_changes(ser.points)
        return list(out.values())


def detectable(ser: Series, max_pvalue: float | None = None, after: tuple[int, ...] = (5, 10)) -> dict[Any, Any]:
    """{runs after: the smallest relative step the series' history can show then (None: too short), "noise":
    its run-to-run noise (relative), "level_runs": the runs at the current level}: `harness history changes`
    and the trend section print them. A new step is tested against the runs since the last level change point
    or model change, whichever is later (all the runs when there is none, or when fewer than 3 follow it)."""
    values = [p.value for p in ser.points]
    start = max([c.index for c in ser.changes if c.kind == "level"] + [m.index for m in ser.model_changes],
                default=0)
    if len(values) - start >= 3:
        values = values[start:]
    kw = {"max_pvalue": max_pvalue if max_pvalue is not None else ser.settings.max_pvalue}
    out: dict[Any, Any] = {n: min_detectable_step(values, n, **kw) for n in after}
    med = sorted(values)[len(values) // 2] if values else 0.0
    out["noise"] = noise(np.asarray(values) / med) if len(values) >= 3 and med > 0 else None
    out["level_runs"] = len(values)
    return out


def describe_change(ser: Series, cp: ChangePoint) -> dict[str, Any]:
    """A change point with the runs around it: the last run before and the first run after; `model_changed`
    (the fingerprints and runs on either side) when the model measured changed there (ModelChange.covers)."""
    before, after = ser.points[cp.index - 1], ser.points[cp.index]
    _, _, lower_better = METRICS[ser.metric]
    worse = cp.change > 0 if lower_better else cp.change < 0
    if cp.kind == "spread":  # the run-to-run spread moved, not the level: noisier or steadier, never a slowdown
        direction = "noisier" if cp.change > 0 else "steadier"
    else:
        direction = "regression" if worse else "improvement"
    extra: dict[str, Any] = {}
    if cp.kind == "drift":  # a creep: from its first run to the run after it, slope per run
        end = min(cp.end or len(ser.points), len(ser.points))
        extra = {"end_run": ser.points[end - 1].run_id, "drift_runs": end - cp.index,
                 "slope_percent_per_run": 100.0 * (cp.slope or 0.0)}
    moved = ser.model_change_at(cp.index)
    if moved is not None:  # the model measured changed here: the change point is attributed to it
        extra["model_changed"] = {"before": moved.before, "after": moved.after,
                                  "first_run": ser.points[moved.index].run_id,
                                  "last_run_before": ser.points[moved.since - 1].run_id}
    return {**extra, "case": ser.case, "machine": ser.machine, "metric": ser.metric, "unit": ser.unit, "kind": cp.kind,
            "before_run": before.run_id, "before_commit": before.commit, "after_run": after.run_id,
            "after_commit": after.commit, "after_started_at": after.started_at, "runs_after": len(ser.points) - cp.index,
            "mean_before": cp.before, "mean_after": cp.after, "change_percent": 100.0 * cp.change,
            "pvalue": cp.pvalue, "direction": direction}


def recent(rows: Sequence[dict[str, Any]], last: int | None) -> list[dict[str, Any]]:
    """Change points whose first run after the change is among the newest `last` runs of its series."""
    return [r for r in rows if last is None or r["runs_after"] <= last]
