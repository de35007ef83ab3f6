"""The history's tables (SQLAlchemy 2 declarative): runs, cases, and one row of statistics per run and case."""

from __future__ import annotations

from sqlalchemy import Boolean, Float, ForeignKey, Integer, String, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


class Base(DeclarativeBase):
    pass


class Run(Base):
    """One recorded run on one machine (a merged report of several machines is recorded run by run)."""

    __tablename__ = "runs"
    __table_args__ = (UniqueConstraint("run_id", "machine_fingerprint", name="uq_runs_run_machine"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[str] = mapped_column(String(200))
    started_at: Mapped[str] = mapped_column(String(64), index=True)  # ISO 8601 UTC, as results.json holds it
    finished_at: Mapped[str | None] = mapped_column(String(64))
    commit: Mapped[str | None] = mapped_column(String(64))
    dirty: Mapped[bool | None] = mapped_column(Boolean)
    machine_fingerprint: Mapped[str] = mapped_column(String(64), index=True)
    machine: Mapped[str] = mapped_column(String(500))
    harness_version: Mapped[str] = mapped_column(String(64))
    complete: Mapped[bool] = mapped_column(Boolean)
    source: Mapped[str] = mapped_column(String(1000))
    added_at: Mapped[str] = mapped_column(String(64))
    results: Mapped[list[CaseStat]] = relationship(back_populates="run", cascade="all, delete-orphan")


class Case(Base):
    """A matrix cell by its id (model-runtime-precision-bN[-sM]) and its parts."""

    __tablename__ = "cases"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    key: Mapped[str] = mapped_column(String(400), unique=True)
    model: Mapped[str] = mapped_column(String(200))
    runtime: Mapped[str] = mapped_column(String(100))
    precision: Mapped[str] = mapped_column(String(16))
    batch: Mapped[int] = mapped_column(Integer)
    seq: Mapped[int | None] = mapped_column(Integer)
    device: Mapped[str] = mapped_column(String(32))


class CaseStat(Base):
    """A case's outcome in a run: status and, when measured, p50/p99/mean latency (ms), throughput and the model's
    fingerprint."""

    __tablename__ = "case_results"
    __table_args__ = (UniqueConstraint("run_pk", "case_pk", name="uq_case_results_run_case"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_pk: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    case_pk: Mapped[int] = mapped_column(ForeignKey("cases.id"), index=True)
    status: Mapped[str] = mapped_column(String(16))
    p50_ms: Mapped[float | None] = mapped_column(Float)
    p99_ms: Mapped[float | None] = mapped_column(Float)
    mean_ms: Mapped[float | None] = mapped_column(Float)
    throughput_sps: Mapped[float | None] = mapped_column(Float)
    samples: Mapped[int] = mapped_column(Integer)
    noisy: Mapped[bool | None] = mapped_column(Boolean)
    # the sha256 of what defined the case's model in this run (CaseResult.model_fingerprint; None: not recorded,
    # e.g. rows recorded before migration 0002): a case's series marks the run where it changed
    model_fingerprint: Mapped[str | None] = mapped_column(String(64))
    run: Mapped[Run] = relationship(back_populates="results")
    case: Mapped[Case] = relationship()
