"""pytest plugin (entry point `pytest11: harness`): options, matrix parametrisation, the case fixture,
results after every case, outputs and the terminal table at session end.

Nothing happens unless a test asks for the `harness_case` fixture (the suites under harness_suites do), so
the plugin is inert in other projects' test runs.
"""

from __future__ import annotations

from typing import Any

import pytest

from harness.config import OPTIONS, RunConfig
from harness.errors import UsageError
from harness.results.schema import CaseResult
from harness.session import HarnessSession

SESSION_KEY = pytest.StashKey[HarnessSession]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("harness", "inference harness matrix (the same options as `harness run`)")
    for o in OPTIONS:
        if o.flag:
            group.addoption(f"--harness-{o.name}", action="store_true", default=False, dest=f"harness_{o.dest}",
                            help=o.help)
        elif o.multiple:
            group.addoption(f"--harness-{o.name}", action="append", default=None, dest=f"harness_{o.dest}",
                            metavar=o.metavar, help=o.help)
        else:
            group.addoption(f"--harness-{o.name}", default=None, dest=f"harness_{o.dest}", metavar=o.metavar,
                            help=o.help)


def raw_options(config: pytest.Config) -> dict[str, Any]:
    return {o.dest: config.getoption(f"harness_{o.dest}") for o in OPTIONS}


def pytest_configure(config: pytest.Config) -> None:
    raw = raw_options(config)
    if any(v not in (None, False) for v in raw.values()):
        _session(config)  # validate early: a bad name is a usage error before collection


def _session(config: pytest.Config) -> HarnessSession:
    if SESSION_KEY not in config.stash:
        try:
            config.stash[SESSION_KEY] = HarnessSession(RunConfig.from_options(raw_options(config)))
        except UsageError as exc:
            raise pytest.UsageError(str(exc)) from None
    return config.stash[SESSION_KEY]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "harness_case" in metafunc.fixturenames:
        try:
            cases = _session(metafunc.config).config.cases()
        except UsageError as exc:
            raise pytest.UsageError(str(exc)) from None
        metafunc.parametrize("harness_case", cases, ids=[c.id for c in cases])


@pytest.fixture
def harness_session(request: pytest.FixtureRequest) -> HarnessSession:
    return _session(request.config)


def check_result(result: CaseResult) -> None:
    """Turn a case result into the test's outcome: skip with the reason, or fail with the figures."""
    if result.status == "skipped":
        pytest.skip(result.reason)
    if result.status != "passed":
        detail = f"{result.status}: {result.reason}"
        if result.stderr_tail:
            detail += "\n--- worker stderr (last lines) ---\n" + result.stderr_tail
        pytest.fail(detail, pytrace=False)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    hs = session.config.stash.get(SESSION_KEY, None)
    if hs is not None and hs.started:
        writer = session.config.get_terminal_writer()
        hs.finish(interrupted=exitstatus == pytest.ExitCode.INTERRUPTED, progress=lambda line: writer.line(line))
        gate = hs.gate_status()  # --baseline: a regression fails the run through the exit status
        if gate == 2:
            session.exitstatus = pytest.ExitCode.USAGE_ERROR
        elif gate == 1 and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    hs = config.stash.get(SESSION_KEY, None)
    if hs is None or not hs.started or hs.run is None:
        return
    from harness.report.terminal import terminal_table

    tr = terminalreporter
    tr.section("inference harness")
    tr.write_line(terminal_table(hs.run))
    counts = ", ".join(f"{n} {s}" for s, n in hs.run.counts().items() if n)
    tr.write_line(f"\n{counts}" + ("" if hs.run.complete else " (incomplete: interrupted)"))
    if hs.comparison is not None:
        from harness.gating import verdicts_markdown

        tr.write_line("")
        tr.write_line(verdicts_markdown(hs.comparison, only_changes=True))
        tr.write_line(hs.comparison.summary())
    if hs.gate_error:
        tr.write_line(f"gate: error: {hs.gate_error}", red=True)
    for name, path in hs.outputs.items():
        tr.write_line(f"{name:>9}: {path}")
