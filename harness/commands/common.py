"""What the command modules share: the registry entry (Command), add_groups (options are groups of harness.options),
exit codes, the session driver of `conform` and `ab`, and the size and age cells of the listings."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness.options import OptionGroup, add_options

if TYPE_CHECKING:
    from harness.config import RunConfig
    from harness.execution.session import HarnessSession
    from harness.results.schema import CaseId

# the statuses of commands that do not decide (a decision's are in harness.gating.verdicts)
EXIT_OK, EXIT_FAILED, EXIT_INTERRUPTED = 0, 1, 130


@dataclass(frozen=True)
class Command:
    """One command of a module's COMMANDS: its run (parsed arguments -> exit status), and whether it resolves model
    or runtime names, so that the plugins (the zoo, user packages) are loaded before it runs."""

    run: Callable[[argparse.Namespace], int]
    plugins: bool = True


def add_groups(parser: argparse.ArgumentParser, groups: tuple[OptionGroup, ...]) -> None:
    """A command's options: the option groups it composes (harness.options), one argparse group each."""
    made: dict[str, Any] = {}

    def add(group: OptionGroup, *flags: str, **kw: Any) -> None:
        if group.name not in made:
            made[group.name] = parser.add_argument_group(group.title)
        made[group.name].add_argument(*flags, **kw)

    add_options(add, groups)


def session_cases(config: RunConfig, cases: list[CaseId]) -> tuple[HarnessSession, bool]:
    """Run `cases` of the config's workload through one run session (no pytest; HarnessSession.run_cases), one
    line per broken case; returns (the session, finished: written and rendered either way) and prints the
    workload's terminal lines."""
    from harness.execution.session import HarnessSession
    from harness.report.progress import RunProgress
    from harness.workloads import get_workload

    session = HarnessSession(config, progress=RunProgress(case_lines=False))
    finished = session.run_cases(cases)
    assert session.run is not None  # run_cases raises when stopped before the session started
    for line in get_workload(config.workload).terminal_lines(session.run):
        print(line)
    return session, finished


def size_text(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def age_text(seconds: float) -> str:
    for unit, span in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= span:
            return f"{seconds / span:.0f}{unit}"
    return f"{seconds:.0f}s"
