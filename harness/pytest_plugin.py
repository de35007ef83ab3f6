"""pytest plugin (entry point `pytest11: harness`): options, matrix parametrisation, the case fixture,
results after every case, outputs and the terminal table at session end."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from harness.config import RunConfig
from harness.errors import UsageError
from harness.gating.verdicts import EXIT_UNJUDGED
from harness.options import OPTIONS, RUN_GROUPS, add_options, parse_run_options
from harness.plugins import load_plugins
from harness.report.progress import RunProgress, first_line, noise_lines, skipped_lines, terminal_stream
from harness.results.schema import CaseResult
from harness.execution.session import HarnessSession

SESSION_KEY = pytest.StashKey[HarnessSession]()
CASE_NODES_KEY = pytest.StashKey[frozenset]()
CARRIED_KEY = pytest.StashKey[RunConfig]()


def pytest_addoption(parser: pytest.Parser) -> None:
    """The run options of `harness run`, group by group (harness.options.RUN_GROUPS), spelled --harness-NAME."""
    groups: dict[str, Any] = {}

    def add(group: Any, *flags: str, **kw: Any) -> None:
        if group.name not in groups:
            groups[group.name] = parser.getgroup(f"harness-{group.name}", f"inference harness: {group.title} "
                                                 "(the same options as `harness run`)")
        groups[group.name].addoption(*flags, **kw)

    add_options(add, RUN_GROUPS, prefix="--harness-")


def raw_options(config: pytest.Config) -> dict[str, Any]:
    return {o.dest: config.getoption(f"harness_{o.dest}") for o in OPTIONS}


def pytest_configure(config: pytest.Config) -> None:
    raw = raw_options(config)
    if CARRIED_KEY in config.stash or any(v not in (None, False) for v in raw.values()):
        # now, before collection: a bad name is a usage error, and the progress stream is taken while
        # pytest's output capture is suspended (taken during collection it would write into the capture)
        _session(config)


class RunConfigCarrier:
    """Hands `harness run`'s parsed RunConfig to this plugin in-process (`pytest.main(plugins=[...])`): the
    options are parsed once, by the CLI, and never turned back into `--harness-*` strings."""

    def __init__(self, run_config: RunConfig) -> None:
        self.run_config = run_config
        self.gate_status = 0  # the session's gate_status() once the run finished (3: a gated row not judged)
        self.unjudged_line: str | None = None  # `harness run` prints it after pytest's last line

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        hs = session.config.stash.get(SESSION_KEY, None)
        if hs is not None and hs.started:
            self.gate_status = hs.gate_status()
            self.unjudged_line = hs.unjudged_line()

    @pytest.hookimpl(tryfirst=True)
    def pytest_configure(self, config: pytest.Config) -> None:
        config.stash[CARRIED_KEY] = self.run_config


def _session(config: pytest.Config) -> HarnessSession:
    if SESSION_KEY not in config.stash:
        load_plugins()  # the zoo and user models/runtimes, before any name is resolved
        try:
            run_config = config.stash.get(CARRIED_KEY, None) or parse_run_options(raw_options(config))
        except UsageError as exc:
            raise pytest.UsageError(str(exc)) from None
        progress = RunProgress(terminal_stream(), live=None if config.get_verbosity() <= 0 else False,
                               case_lines=config.get_verbosity() <= 0)  # -v: pytest prints a line per case
        config.stash[SESSION_KEY] = HarnessSession(run_config, progress=progress)
    return config.stash[SESSION_KEY]


def pytest_collection_finish(session: pytest.Session) -> None:
    cases = [item.nodeid for item in session.items if "harness_case" in getattr(item, "fixturenames", ())]
    session.config.stash[CASE_NODES_KEY] = frozenset(cases)
    if cases:
        _session(session.config).progress.start("case", len(cases))


def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config) -> tuple[str, str, str] | None:
    """Matrix cases are shown by the harness's own progress lines: no pytest dots, and a case the harness
    reported as broken or over its tolerance gets no FAILURES block (its log file has the traceback)."""
    if report.when != "call" or report.nodeid not in config.stash.get(CASE_NODES_KEY, frozenset()):
        return None
    word = report.outcome.upper() if config.get_verbosity() > 0 else ""  # -v: pytest's word after the id
    return ("case failed" if report.failed else report.outcome), "", word


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "harness_case" in metafunc.fixturenames:
        try:
            session = _session(metafunc.config)
            cases = session.workload.cases(session.config)
        except UsageError as exc:
            raise pytest.UsageError(str(exc)) from None
        metafunc.parametrize("harness_case", cases, ids=[c.id for c in cases])


@pytest.fixture
def harness_session(request: pytest.FixtureRequest) -> HarnessSession:
    return _session(request.config)


def check_result(result: CaseResult) -> None:
    """Turn a case result into the test's outcome: skip with the reason, or fail with one line (the worker's
    traceback is in the case's log file, named by the progress line)."""
    if result.status == "skipped":
        pytest.skip(result.reason)
    if result.status != "passed":
        where = f" in phase {result.phase}" if result.phase else ""
        pytest.fail(f"{result.status}{where}: {first_line(result.reason)}", pytrace=False)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    hs = session.config.stash.get(SESSION_KEY, None)
    if hs is not None and hs.started:
        hs.finish(interrupted=exitstatus == pytest.ExitCode.INTERRUPTED)
        if hs.exit_status() is not None:  # stopped by a signal: 130 (SIGINT) or 143 (SIGTERM)
            session.exitstatus = hs.exit_status()
            return
        gate = hs.gate_status()  # --baseline: a regression fails the run through the exit status
        if gate == 2:
            session.exitstatus = pytest.ExitCode.USAGE_ERROR
        elif gate == 1 and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        elif gate == EXIT_UNJUDGED and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = EXIT_UNJUDGED  # could not judge (not a pass, not a regression): `harness run` 3


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    hs = config.stash.get(SESSION_KEY, None)
    if hs is None or not hs.started or hs.run is None:
        return
    from harness.report.terminal import terminal_table

    tr = terminalreporter
    tr.section("inference harness")
    shown = dataclasses.replace(hs.run, cases=[c for c in hs.run.cases if c.status != "skipped"])
    if shown.cases:  # skipped cases: grouped below, one line per unavailable runtime (the report lists each)
        tr.write_line(terminal_table(shown))
    for line in hs.workload.terminal_lines(hs.run):  # e.g. TTFT/TPOT of generation, conformance pass rates
        tr.write_line(line)
    for line in skipped_lines(hs.run):
        tr.write_line(line)
    for line in noise_lines(hs.run):
        tr.write_line(line, yellow=True)
    counts = ", ".join(f"{n} {s}" for s, n in hs.run.counts().items() if n)
    tr.write_line(f"\n{counts}" + ("" if hs.run.complete else " (incomplete: interrupted)"))
    if hs.comparison is not None:
        from harness.report.verdicts import verdicts_text

        tr.write_line("")
        tr.write_line(verdicts_text(hs.comparison, only_changes=True))
        tr.write_line(hs.comparison.summary())
    if hs.gate_error:
        tr.write_line(f"gate: error: {hs.gate_error}", red=True)
    for name, path in hs.outputs.items():
        tr.write_line(f"{name:>9}: {path}")
    unjudged = hs.unjudged_line()
    if unjudged and config.stash.get(CARRIED_KEY, None) is None:  # plain pytest: the last line of the section
        tr.write_line(unjudged, yellow=True)  # (`harness run` prints it after pytest's own last line)
