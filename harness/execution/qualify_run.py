"""Runs a qualification spec's cases through a HarnessSession; harness.gating.qualify judges what they stored."""

from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Any

from harness.config import RunConfig
from harness.execution.session import HarnessSession
from harness.gating.qualify import QualifySpec
from harness.matrix import case_ids
from harness.measure.memory import default_case_memory_gb
from harness.measure.timer import TimingPolicy
from harness.precision import Precision
from harness.report.progress import RunProgress
from harness.results.schema import CaseId


def spec_case(model: str, runtime: str, precision: Precision, batch: int, seq: int | None) -> CaseId:
    """A spec case's identity by `harness run`'s rule (harness.matrix.case_ids): load_spec's case rule."""
    (case,) = case_ids((model,), (runtime,), (precision,), (batch,), () if seq is None else (seq,))
    return case


def spec_run_config(spec: QualifySpec, out_dir: Path) -> RunConfig:
    """The run configuration covering the spec's cases, with its [measure] settings."""
    def uniq(values: list[Any]) -> tuple[Any, ...]:
        return tuple(dict.fromkeys(values))

    cs = [s.case for s in spec.cases]
    given = spec.measure  # RunConfig field values, parsed by the run options' definitions (load_spec)
    timing = {dest.removeprefix("timing."): v for dest, v in given.items() if dest.startswith("timing.")}
    settings = {dest: v for dest, v in given.items() if not dest.startswith("timing.")}
    settings.setdefault("case_memory_gb", default_case_memory_gb())
    settings["audit"] = True  # qualification audits every case inside its timed run
    return RunConfig.build(models=uniq([c.model for c in cs]), runtimes=uniq([c.runtime for c in cs]),
                           precisions=uniq([c.precision for c in cs]), batch_sizes=uniq([c.batch for c in cs]),
                           seq_lens=uniq([c.seq for c in cs if c.seq is not None]) or (128,), out_dir=Path(out_dir),
                           run_id=_dt.datetime.now().strftime("%Y%m%d-%H%M%S"), timing=TimingPolicy(**timing),
                           **settings)


def run_spec(spec: QualifySpec, out_dir: Path, progress: Any = None, golden_dir: Path | None = None,
             record_golden: bool = False) -> Path:
    """Run the spec's cases through a HarnessSession (the machinery of `harness run`); returns results.json.
    `progress`: a harness.report.progress.RunProgress (default: one on stdout); `golden_dir`: the golden store
    the cases record into (`record_golden`) or are compared with."""
    config = spec_run_config(spec, out_dir)
    if golden_dir is not None:
        config = config.replace(golden_dir=str(Path(golden_dir).resolve()), record_golden=record_golden)
    session = HarnessSession(config, progress=progress or RunProgress())
    if not session.run_cases([sc.case for sc in spec.cases]):
        raise session.interrupt()  # stopped: what finished is written, and no certificate of part of the spec
    return out_dir / "results.json"
