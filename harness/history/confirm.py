"""A change point is reported as a regression only once an interleaved A/B of the runs on either side agrees
(docs/history.md, Confirmation); the confirmer is injectable: tests use fakes, `--confirm` uses AbConfirmer."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CONFIRMED = "confirmed"  # the A/B agrees: reported as a regression
DISAGREES = "disagrees"  # the A/B ran and found no regression: reported unconfirmed, not a regression
UNCONFIRMED = "unconfirmed"  # could not be re-measured: reported as the history's regression, unconfirmed
MODEL_CHANGED = "model changed"  # what a change point is reported as where the model's fingerprint changed


@dataclass(frozen=True)
class Confirmation:
    state: str  # CONFIRMED | DISAGREES | UNCONFIRMED
    reason: str


Confirmer = Callable[[dict[str, Any]], Confirmation]


def not_remeasured(row: dict[str, Any]) -> Confirmation:
    """The confirmer without --confirm: nothing is measured again."""
    return Confirmation(UNCONFIRMED, "not re-measured (`harness history changes --confirm` runs an interleaved "
                                     "A/B of the model files on either side)")


def apply_confirmation(rows: Sequence[dict[str, Any]], confirmer: Confirmer,
                       stop: SignalGuard | None = None) -> list[dict[str, Any]]:
    """Each regression row asks `confirmer`; the row gets `confirmation` (state) and `confirmation_reason`, and
    `reported` (what the report calls it): "regression" when the A/B agrees or nothing could be re-measured
    (then `confirmation` says unconfirmed), "unconfirmed" when the A/B disagrees. Other rows (improvements,
    spread changes) are reported by their direction and need no confirmation. A row whose model changed at the
    change point (`model_changed`) is reported as MODEL_CHANGED whatever its direction, never as a regression;
    its slowdown still asks the confirmer (an A/B of the two model files measures exactly that change).
    `stop`: the command's SignalGuard; a SIGINT or SIGTERM (SignalStop) during a confirmation then keeps the rows
    confirmed so far and leaves this and every later regression unconfirmed, "interrupted" (without `stop` the
    interrupt propagates)."""
    out = []
    for row in rows:
        row = dict(row)
        if row["direction"] != "regression":
            row.update(confirmation=None, confirmation_reason="", reported=row["direction"])
        else:
            try:
                if stop is not None and stop.signum is not None:
                    c = Confirmation(UNCONFIRMED, f"not re-measured: interrupted by {stop.name}")
                else:
                    c = confirmer(row)
            except KeyboardInterrupt as exc:  # SIGINT or SIGTERM (SignalStop) during the A/B: its child was ended
                if stop is None:
                    raise
                stop.seen(getattr(exc, "signum", None) or signal.SIGINT)
                c = Confirmation(UNCONFIRMED, f"not re-measured: interrupted by {stop.name}")
            except (OSError, subprocess.SubprocessError, RuntimeError, ValueError) as exc:  # never costs the finding
                c = Confirmation(UNCONFIRMED, f"the A/B failed: {type(exc).__name__}: {exc}")
            row.update(confirmation=CONFIRMED if c.state == CONFIRMED else UNCONFIRMED,
                       confirmation_reason=c.reason,
                       reported="unconfirmed" if c.state == DISAGREES else "regression")
        if row.get("model_changed"):
            row["reported"] = MODEL_CHANGED
        out.append(row)
    return out


def case_artifact(source: str | None, case: str) -> tuple[str | None, str]:
    """(the case's model file recorded in the run's results.json at `source`, or None; why not)."""
    if not source:
        return None, "the run was recorded without its results.json path"
    path = Path(source)
    if path.is_dir():
        path = path / "results.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return None, f"its results.json {source} cannot be read ({type(exc).__name__})"
    from harness.errors import ResultsError
    from harness.results.schema import CaseId

    for c in data.get("cases", []) if isinstance(data, dict) else ():
        try:
            cid = CaseId.from_dict(c["case"]).id
        except (KeyError, TypeError, ValueError, ResultsError):  # a case id the reader refuses: not this case
            continue
        if cid == case:
            art = c.get("artifact")
            if not art:
                return None, f"{source} records no model file for the case"
            if not Path(art).is_file():
                return None, f"its model file {art} is no longer on disk"
            return str(art), ""
    return None, f"{source} holds no result of the case"


Runner = Callable[[list[str]], int]
CHILD_GRACE_S = 30.0  # how long a stopped A/B may take to end its worker and write what it has, before SIGKILL


def _run(cmd: list[str]) -> int:
    """Run `cmd` (a `harness ab`) and return its exit status. A SIGINT or SIGTERM that stops this process while
    it runs is passed on to the child, which stops as `harness run` does (its worker ended, its folders
    removed); after CHILD_GRACE_S it is killed. The interrupt then goes on: never an orphaned child."""
    proc = subprocess.Popen(cmd)
    try:
        return proc.wait()
    except KeyboardInterrupt as exc:
        end_child(proc, int(getattr(exc, "signum", None) or signal.SIGINT))
        raise


def end_child(proc: subprocess.Popen[Any], signum: int, grace_s: float = CHILD_GRACE_S) -> int | None:
    """Pass `signum` on to a running child, wait up to `grace_s` for it to end, then SIGKILL it; its status."""
    if proc.poll() is None:
        try:
            proc.send_signal(signum)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


class SignalGuard:
    """SIGINT and SIGTERM as `harness run` takes them, for `harness history`: the first stops the command (a
    SignalStop raised in the main thread, carrying the signal), any further one during the stop is absorbed;
    once `finishing` is set (what finished is being printed and written) a signal is recorded and waits for it.
    The old handlers come back on exit. `signum`: the first signal seen (None: none)."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.finishing = False
        self._old: dict[int, Any] = {}

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum is not None else ""

    def seen(self, signum: int) -> None:
        if self.signum is None:
            self.signum = int(signum)

    def exit_status(self) -> int | None:
        """128 + the signal that stopped the command (130 SIGINT, 143 SIGTERM), else None."""
        return 128 + self.signum if self.signum is not None else None

    def _handler(self, signum: int, frame: Any) -> None:
        from harness.errors import SignalStop

        if self.signum is not None:
            return  # a further signal during the stop: absorbed
        self.signum = signum
        if not self.finishing:
            raise SignalStop(signum)

    def __enter__(self) -> SignalGuard:
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._old[sig] = signal.signal(sig, self._handler)
            except ValueError:  # not the main thread (a library call): the caller's handlers stay
                pass
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old.clear()


class AbConfirmer:
    """Re-measure a regression's two sides with `harness ab BEFORE AFTER --out DIR` (an interleaved A/B in one
    worker) and read its verdict from DIR/results.json: regressed confirms it; pass, improved or noise
    disagree; inconclusive (a contended machine), a broken case or no results leave it unconfirmed with the
    A/B's reason. `sources`: run id -> the results.json it was recorded from; `case_parts`: case id -> (model,
    runtime, precision, batch, seq); `runner`: runs the command, returns its exit status."""

    def __init__(self, sources: dict[str, str | None], case_parts: dict[str, tuple[str, str, str, int, int | None]],
                 runner: Runner = _run, workdir: Path | None = None) -> None:
        self.sources, self.case_parts, self.runner, self.workdir = sources, case_parts, runner, workdir

    def __call__(self, row: dict[str, Any]) -> Confirmation:
        case = row["case"]
        before, why_b = case_artifact(self.sources.get(row["before_run"]), case)
        after, why_a = case_artifact(self.sources.get(row["after_run"]), case)
        if before is None or after is None:
            side, why = ("before", why_b) if before is None else ("after", why_a)
            return Confirmation(UNCONFIRMED, f"cannot re-measure the run {side} ({row[f'{side}_run']}): {why}")
        moved = row.get("model_changed")
        if Path(before).resolve() == Path(after).resolve() and moved:
            return Confirmation(UNCONFIRMED, f"the model file {after} was changed in place (fingerprint "
                                             f"{moved['before'][:12]} -> {moved['after'][:12]}): its earlier version "
                                             "is not on disk to re-measure")
        if Path(before).resolve() == Path(after).resolve():
            return Confirmation(UNCONFIRMED, "both runs measured the same model file: the change is outside it "
                                             "(runtime, release or machine); `harness bisect` re-measures releases")
        if case not in self.case_parts:
            return Confirmation(UNCONFIRMED, "the case's model and runtime are not recorded")
        import tempfile

        _model, runtime, precision, batch, seq = self.case_parts[case]  # the files are the models of the A/B
        with tempfile.TemporaryDirectory(prefix="harness-confirm-", dir=self.workdir) as tmp:
            out = Path(tmp) / "ab"
            cmd = [sys.executable, "-m", "harness.cli", "ab", before, after, "--runtimes", runtime,
                   "--precisions", precision, "--batch-sizes", str(batch), "--out", str(out)]
            if seq is not None:
                cmd += ["--seq-lens", str(seq)]
            status = self.runner(cmd)
            verdict, reason = _ab_verdict(out / "results.json")
        if verdict == "regressed":
            return Confirmation(CONFIRMED, f"interleaved A/B of the two model files: regressed ({reason})")
        if verdict in ("pass", "improved", "noise"):
            return Confirmation(DISAGREES, f"interleaved A/B of the two model files: {verdict} ({reason})")
        if verdict is not None:
            return Confirmation(UNCONFIRMED, f"the A/B could not judge: {verdict} ({reason})")
        return Confirmation(UNCONFIRMED, f"the A/B left no verdict (`harness ab` exit {status})")


def _ab_verdict(path: Path) -> tuple[str | None, str]:
    """(the first case's A/B verdict, its reason) from a `harness ab` results.json, or (None, "")."""
    try:
        cases = json.loads(path.read_text()).get("cases") or []
    except (OSError, ValueError, AttributeError):
        return None, ""
    ab = cases[0].get("ab") if cases and isinstance(cases[0], dict) else None
    if not isinstance(ab, dict):
        return (str(cases[0].get("status")) if cases and isinstance(cases[0], dict) else None), \
            (str(cases[0].get("reason") or "") if cases and isinstance(cases[0], dict) else "")
    return str(ab.get("verdict")), str(ab.get("reason") or "")
