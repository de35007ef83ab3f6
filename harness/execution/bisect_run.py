"""`harness bisect`: the first release of a runtime's package where a case's latency or outputs changed."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.config import RunConfig
from harness.errors import UsageError
from harness.gating.compare import compare_case
from harness.gating.gates import GateConfig
from harness.gating.unjudged import unjudged_cause
from harness.gating.verdicts import Verdict
from harness.results.schema import CaseId, CaseResult

CHANGES = (Verdict.REGRESSED, Verdict.IMPROVED, Verdict.BROKE, Verdict.FIXED)


def _version_key(v: str) -> Any:
    from packaging.version import InvalidVersion, Version

    try:
        return (0, Version(v))
    except InvalidVersion:
        return (1, v)


def available_versions(distribution: str, wheels: Path | None = None) -> list[str]:
    """The releases of `distribution` pip can install here (from `wheels` alone when given), oldest first."""
    cmd = [sys.executable, "-m", "pip", "index", "versions", distribution, "--disable-pip-version-check"]
    if wheels is not None:
        cmd += ["--no-index", "--find-links", str(wheels)]
    done = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    m = re.search(r"Available versions:\s*(.+)", done.stdout)
    if done.returncode != 0 or m is None:
        last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise UsageError(f"cannot list the releases of {distribution}: {last[0]}")
    return sorted((v.strip() for v in m.group(1).split(",") if v.strip()), key=_version_key)


def version_range(spec: str, distribution: str, wheels: Path | None = None,
                  lister: Callable[[str, Path | None], list[str]] = available_versions) -> list[str]:
    """`A,B,C` as given (sorted), or `A..B`: every release from A to B inclusive that pip can install here."""
    if ".." not in spec:
        versions = sorted(dict.fromkeys(v.strip() for v in spec.split(",") if v.strip()), key=_version_key)
    else:
        lo, _, hi = (x.strip() for x in spec.partition(".."))
        known = lister(distribution, wheels)
        for end in (lo, hi):
            if end and end not in known:
                raise UsageError(f"--versions {spec}: {distribution} {end} is not a release pip can install here "
                                 f"(known: {', '.join(known[-12:]) or 'none'})")
        keys = [_version_key(v) for v in known]
        start = keys.index(_version_key(lo)) if lo else 0
        stop = keys.index(_version_key(hi)) if hi else len(known) - 1
        if start > stop:
            raise UsageError(f"--versions {spec}: a reversed range ({lo} is newer than {hi}); give the older "
                             f"release first: {hi}..{lo}")
        versions = known[start:stop + 1]
    if len(versions) < 2:
        raise UsageError(f"--versions {spec}: bisect needs at least two releases, got {versions or 'none'}")
    return versions


@dataclass
class BisectStep:
    version: str
    result: CaseResult
    changed: bool | None  # None: could not judge (contended, too few samples): never "same"
    why: str

    @property
    def label(self) -> str:
        return "CHANGED" if self.changed else "could not judge" if self.changed is None else "same"


@dataclass
class Bisection:
    runtime: str
    case: CaseId
    versions: list[str]
    steps: list[BisectStep] = field(default_factory=list)
    first_changed: str | None = None
    last_same: str | None = None
    problem: str = ""
    # the releases between which a step could not be judged: the change, if any, lies after the first and at or
    # before the second, and the search stopped there (exit 3)
    unjudged: tuple[str, str] | None = None

    @property
    def measured(self) -> list[str]:
        return [s.version for s in self.steps]

    def lines(self) -> list[str]:
        out = [f"bisect {self.runtime} over {len(self.versions)} releases ({self.versions[0]} .. {self.versions[-1]}),"
               f" case {self.case.id}: measured {len(self.steps)}: {', '.join(self.measured)}"]
        for s in self.steps:
            p50 = (s.result.latency or {}).get("p50_ms")
            rel = (s.result.accuracy or {}).get("rel_l2")
            figs = f"p50 {p50:.3f} ms" if isinstance(p50, (int, float)) else s.result.status
            figs += f", rel_l2 {rel:.2e}" if isinstance(rel, (int, float)) else ""
            out.append(f"  {s.version:<12} {figs:<34} {s.label}: {s.why}")
        if self.problem:
            out.append(f"result: {self.problem}")
        elif self.unjudged is not None:
            lo, hi = self.unjudged
            why = next((s.why for s in self.steps if s.changed is None), "")
            out.append(f"result: could not judge between {lo} and {hi} ({why}); not a `no change`: rerun on a "
                       "quieter machine or measure longer")
        elif self.first_changed is None:
            out.append(f"result: no change from {self.versions[0]} to {self.versions[-1]} (a change that was "
                       "undone in between is not looked for)")
        else:
            out.append(f"result: first changed in {self.first_changed} (last like {self.versions[0]}: "
                       f"{self.last_same})")
        return out


def judge(good: CaseResult, other: CaseResult, gates: GateConfig) -> tuple[bool | None, str]:
    """Did `other` change from `good`: latency by the gate (compare's verdicts), outputs by the drift
    tolerance (over it now and not before, or the reverse), a case that broke or came back? None when a gated
    row could not be judged (contended, too few samples) and nothing else changed: never `same`."""
    other = dataclasses.replace(other, case=good.case)  # the same case on another release
    records = compare_case(good, other, gates)
    changed = [r for r in records if r.verdict in CHANGES]
    if changed:
        return True, "; ".join(f"{r.metric} {r.verdict.value}"
                               + (f" x{r.ratio:.3f}" if r.ratio else "") + (f" ({r.reason})" if r.reason else "")
                               for r in changed)
    unjudged = [r for r in records if unjudged_cause(r)]
    if unjudged:
        # the step's label already says "could not judge": the reason is the rows' causes alone
        return None, "; ".join(f"{r.metric} {unjudged_cause(r)}" for r in unjudged)
    inconclusive = [r for r in records if r.verdict not in (Verdict.PASS, Verdict.NOISE)]
    note = "; ".join(f"{r.metric} {r.verdict.value}" for r in inconclusive)
    return False, note or "latency and outputs as before"


def bisect(versions: Sequence[str], measure: Callable[[str], CaseResult],
           judge_fn: Callable[[CaseResult, CaseResult], tuple[bool | None, str]], runtime: str = "",
           case: CaseId | None = None) -> Bisection:
    """The first of `versions` (oldest first) whose case differs from the oldest's, by binary search: the two
    ends, then halves, so at most 2 + ceil(log2(n - 1)) releases are measured. A step `judge_fn` could not judge
    (None) ends the search: `unjudged` names the releases the change (if any) lies between."""
    first = measure(versions[0])
    out = Bisection(runtime, case or first.case, list(versions))
    out.steps.append(BisectStep(versions[0], first, False, "the reference release"))
    if not first.measured:
        out.problem = f"{versions[0]} was not measured ({first.status}: {first.reason})"
        return out

    def changed(i: int) -> bool | None:
        r = measure(versions[i])
        is_changed, why = judge_fn(first, r)
        out.steps.append(BisectStep(versions[i], r, is_changed, why))
        return is_changed

    lo, hi = 0, len(versions) - 1
    end = changed(hi)
    if end is None:
        out.unjudged = (versions[lo], versions[hi])
        return out
    if not end:
        out.last_same = versions[hi]
        return out
    while hi - lo > 1:  # versions[lo] is like the first, versions[hi] is not
        mid = (lo + hi) // 2
        step = changed(mid)
        if step is None:  # which half holds the change is unknown: say where it lies, never guess
            out.unjudged = (versions[lo], versions[hi])
            return out
        if step:
            hi = mid
        else:
            lo = mid
    out.first_changed, out.last_same = versions[hi], versions[lo]
    return out


def run_bisect(config: RunConfig, runtime: str, versions: Sequence[str], gates: GateConfig,
               on_line: Callable[[str], None] = print) -> Bisection:
    """Bisect with real runs: each release a run session of its own (`RUNTIME@VERSION`, its environment built on
    first use) of the one case of `config`'s matrix, written under OUT/VERSION/."""
    from harness.execution.session import HarnessSession
    from harness.report.progress import RunProgress
    from harness.workloads import get_workload

    out_dir = Path(config.outputs.out_dir)

    def measure(version: str) -> CaseResult:
        name = f"{runtime}@{version}"
        cfg = config.replace(runtimes=(name,), out_dir=out_dir / version)
        cases = get_workload(cfg.workload).cases(cfg)
        if len(cases) != 1:
            raise UsageError(f"bisect takes one case; the options give {len(cases)}: narrow --models, --precisions "
                             "and the shapes")
        session = HarnessSession(cfg, progress=RunProgress(case_lines=False))  # environments built: said
        results: list[CaseResult] = []
        if not session.run_cases(cases, on_result=results.append):
            raise session.interrupt()  # SIGTERM: 143, as harness run; what finished is written
        (result,) = results
        on_line(f"  measured {name}: {result.status}"
                + (f", p50 {result.latency['p50_ms']:.3f} ms" if result.latency else f" ({result.reason})"))
        return result

    return bisect(versions, measure, lambda a, b: judge(a, b, gates), runtime)
