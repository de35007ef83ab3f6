"""Runs a qualification spec's cases through a HarnessSession; harness.gating.qualify judges what they stored."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.config import RunConfig
from harness.errors import UsageError
from harness.execution.session import HarnessSession
from harness.gating.qualify import QualifySpec, SpecError
from harness.report.progress import RunProgress
from harness.runtimes import get_runtime


def runtime_device(name: str) -> str:
    """The device of a registered runtime (UsageError naming the valid ones): load_spec's runtime lookup."""
    return get_runtime(name).device


def run_spec(spec: QualifySpec, out_dir: Path, progress: Any = None) -> Path:
    """Run the spec's cases through a HarnessSession (the machinery of `harness run`); returns results.json.
    `progress`: a harness.report.progress.RunProgress (default: one on stdout)."""
    try:
        config = RunConfig.from_options(spec.run_options(out_dir))
    except UsageError as exc:
        raise SpecError(f"{spec.path}: {exc}") from None
    session = HarnessSession(config, progress=progress or RunProgress())
    session.progress.start("case", len(spec.cases))
    interrupted = False
    try:
        for sc in spec.cases:
            session.execute(sc.case)
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:
        session.finish(interrupted=interrupted)
    return out_dir / "results.json"
