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
from harness.execution.session import HarnessSession
from harness.gating.ab import ab_cause, judge_ab
from harness.gating.compare import VerdictRecord, compare_case
from harness.gating.gates import GateConfig
from harness.gating.unjudged import unjudged_cause
from harness.gating.verdicts import Verdict
from harness.measure.contention import wait_quiet
from harness.results.schema import AbBlock, AbResult, CaseId, CaseResult
from harness.workloads.ab.pairs import PairLoop, Stop

CHANGES = (Verdict.REGRESSED, Verdict.IMPROVED, Verdict.BROKE, Verdict.FIXED)
SIDE_BY_SIDE_DIR = "side-by-side"  # under OUT: the releases measured side by side, one row per comparison


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
            p50 = s.result.latency.p50_ms if s.result.latency else None
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


# the interleaved A/B of two releases of the case at a threshold: its row (CaseResult with `ab`), or why it could
# not be measured (SideBySide)
SideBySideFn = Callable[[CaseResult, CaseResult, float], CaseResult | str]


def judge(good: CaseResult, other: CaseResult, gates: GateConfig, side_by_side: SideBySideFn | None = None
          ) -> tuple[bool | None, str]:
    """Did `other` change from `good`: latency by the gate (compare's verdicts), outputs by the drift
    tolerance (over it now and not before, or the reverse), a case that broke or came back? None when a gated
    row could not be judged (contended, too few samples) and nothing else changed: never `same`.

    With `side_by_side` (run_bisect: SideBySide) and a median gate, the median is judged on the two releases
    measured side by side, interleaved, at the gate's threshold (harness.gating.ab.judge_ab, with its rule for
    large effects under load) instead of on the two figures measured apart; other statistics stay on those
    figures. A step whose outputs or state changed is decided without it."""
    measured = other
    other = dataclasses.replace(other, case=good.case)  # the same case on another release
    records = compare_case(good, other, gates)
    if not any(r.verdict in CHANGES for r in records if not r.metric.startswith("latency_")):
        median = next((g for g in gates.gates_for(good.case.model) if g.statistic == "median"), None)
        if side_by_side is not None and median is not None and good.measured and measured.measured:
            got = side_by_side(good, measured, median.threshold)
            if isinstance(got, CaseResult) and got.ab is not None:
                records = [r for r in records if r.metric != median.metric] + [side_by_side_record(good, got,
                                                                                                   median.metric)]
            else:  # the figures measured apart judge it, and the row says why
                why = got if isinstance(got, str) else f"{got.status}: {got.reason}"
                records = [dataclasses.replace(r, reason=f"{r.reason}; {NOT_SIDE_BY_SIDE}{why}")
                           if r.metric == median.metric else r for r in records]
    changed = [r for r in records if r.verdict in CHANGES]
    if changed:
        return True, "; ".join(f"{r.metric} {r.verdict.value}"
                               + (f" x{r.ratio:.3f}" if r.ratio else "") + (f" ({r.reason})" if r.reason else "")
                               for r in changed)
    unjudged = [r for r in records if unjudged_cause(r)]
    if unjudged:
        # the step's label already says "could not judge": the reason is the rows' causes and their figures
        return None, "; ".join(f"{r.metric} {unjudged_cause(r)}" + _figures(r) for r in unjudged)
    inconclusive = [r for r in records if r.verdict not in (Verdict.PASS, Verdict.NOISE)]
    note = "; ".join(f"{r.metric} {r.verdict.value}" for r in inconclusive)
    side = "".join(f"; {r.metric} {r.verdict.value}{_figures(r)}"
                   + (", judged under load" if "judged under load" in r.reason else "")
                   for r in records if r.reason.startswith(SIDE_BY_SIDE))
    return False, (note or "latency and outputs as before") + side


def _figures(r: VerdictRecord) -> str:
    """ (x1.052 [0.981, 1.127], side by side with ort-cpu@1.29.0): a row not judged still shows its estimate."""
    apart = r.reason.partition(NOT_SIDE_BY_SIDE)[2]
    if r.ratio is None:
        return f" ({NOT_SIDE_BY_SIDE}{apart})" if apart else ""
    bounds = f" [{r.ci_low:.3f}, {r.ci_high:.3f}]" if r.ci_low is not None and r.ci_high is not None else ""
    where = f", {r.reason.split(':', 1)[0]}" if r.reason.startswith(SIDE_BY_SIDE) else \
        f"; {NOT_SIDE_BY_SIDE}{apart}" if apart else ""
    return f" (x{r.ratio:.3f}{bounds}{where})"


SIDE_BY_SIDE = "side by side with"
NOT_SIDE_BY_SIDE = "not measured side by side: "


def side_by_side_record(good: CaseResult, row: CaseResult, metric: str) -> VerdictRecord:
    """The median's verdict from the two releases measured side by side (row.ab), as a gated row."""
    ab = row.ab
    assert ab is not None
    side_a = (row.details.get("bisect") or {}).get("side_a") or {}
    return VerdictRecord(good.case, metric, Verdict(ab.verdict), baseline=(side_a.get("latency") or {}).get("p50_ms"),
                         current=row.latency.p50_ms if row.latency else None, ratio=ab.ratio, ci_low=ab.ci_low,
                         ci_high=ab.ci_high, threshold=ab.min_effect, unit="ms",
                         reason=f"{SIDE_BY_SIDE} {ab.a}: {ab.reason}", timing=True, unjudged=ab_cause(ab))


def bisect(versions: Sequence[str], measure: Callable[[str], CaseResult],
           judge_fn: Callable[[CaseResult, CaseResult], tuple[bool | None, str]], runtime: str = "",
           case: CaseId | None = None) -> Bisection:
    """The first of `versions` (oldest first) whose case differs from the oldest's, by binary search: the two
    ends, then halves, so at most 2 + ceil(log2(n - 1)) releases are measured. A release judged neither like nor
    unlike the oldest (None) is judged against the nearest newer release known to have changed: unlike it, it is
    like the oldest; like it, it changed (bisect assumes one change). A step neither judgement decides ends the
    search: `unjudged` names the releases the change (if any) lies between."""
    first = measure(versions[0])
    out = Bisection(runtime, case or first.case, list(versions))
    out.steps.append(BisectStep(versions[0], first, False, "the reference release"))
    if not first.measured:
        out.problem = f"{versions[0]} was not measured ({first.status}: {first.reason})"
        return out
    results = {0: first}

    def changed(i: int, hi: int | None = None) -> bool | None:
        r = results[i] = measure(versions[i])
        is_changed, why = judge_fn(first, r)
        if is_changed is None and hi is not None and results[hi].measured:
            # under load a step may be plain against one end and not the other (an overwhelming change, A/A here)
            other, why_hi = judge_fn(r, results[hi])
            ahead = f"could not judge against {versions[0]} ({why}); "
            if other is True:
                is_changed, why = False, (f"{ahead}differs from {versions[hi]} (changed): {why_hi}; so like "
                                          f"{versions[0]} (one change assumed)")
            elif other is False:
                is_changed, why = True, f"{ahead}like {versions[hi]} (changed): {why_hi}"
            else:
                why = f"{ahead}nor against {versions[hi]} ({why_hi})"
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
        step = changed(mid, hi)
        if step is None:  # which half holds the change is unknown: say where it lies, never guess
            out.unjudged = (versions[lo], versions[hi])
            return out
        if step:
            hi = mid
        else:
            lo = mid
    out.first_changed, out.last_same = versions[hi], versions[lo]
    return out


class SideBySide:
    """Two releases of the bisected case measured side by side, as the nightly gate measures its two sides: each
    release's side activated in the worker of its own environment (harness.workloads.gate: both build the case's
    model by its own artifact path, as tonight's side does), then interleaved pairs of blocks (harness.workloads.
    ab.pairs.PairLoop: the drawn order, both sides activated anew every pairs / --ab-activations pairs, quiet waits
    after a contended pair, more pairs within --ab-budget while unjudged), judged by the paired test with its rule
    for large effects under load (harness.gating.ab.judge_ab) at the threshold given (the median gate's). Each
    comparison is one row of the session's results.json (OUT/side-by-side/), its blocks kept."""

    wait = staticmethod(wait_quiet)  # how the pairs wait for quiet cores (tests give a fake one)

    def __init__(self, session: HarnessSession, on_line: Callable[[str], None] = print) -> None:
        self.session = session
        self.on_line = on_line

    def __call__(self, good: CaseResult, other: CaseResult, min_effect: float) -> CaseResult | str:
        from harness.data import case_feed
        from harness.model import get_model
        from harness.workloads.common import ensure_user_models
        from harness.workloads.gate.workload import SidePayload

        session = self.session
        if not session.started:
            session.start()
            session.progress.start("case", 0)
        cfg = session.config.replace(ab_min_effect=min_effect)
        ex = session.executor
        cases = {"a": good.case, "b": other.case}
        ensure_user_models(cfg)
        feed, _ = case_feed(get_model(good.case.model), good.case.dims, cfg.inputs)
        # both sides run the case's model as built here (SidePayload side "b": the model's own artifact path, no
        # stored graph); they differ only in the release their environment holds
        payload = SidePayload("b", good.case.model, feed)
        first: dict[str, CaseResult] = {}

        def activate(act: int) -> None:
            for s in ("a", "b"):
                res = ex.run(cases[s], cfg, payload)
                if res.status != "passed":
                    raise Stop(f"{cases[s].runtime} failed in its activation {act + 1}: {res.status}: "
                               f"{_short(res.reason)}")
                first.setdefault(s, res)

        def measure(s: str, i: int, act: int) -> AbBlock:
            if session.stopping:
                raise KeyboardInterrupt("bisect is stopping")
            reply = ex.measure_block(cases[s], cfg, False)
            if "error" in reply:
                raise Stop(f"{cases[s].runtime} failed in pair {i}: {_short(str(reply['error']))}")
            return AbBlock(s, i, list(reply["samples_ns"]), reply.get("contention"), act)

        label = f"{other.case.id} side by side with {good.case.runtime}"
        session.progress.begin(label)
        try:
            activate(0)
            loop = PairLoop(cfg.ab, cfg.measure.threads, measure, activate, wait=self.wait)
            loop.run()
        except Stop as stop:
            session.progress.end(f"{label}: not measured: {stop.value}")
            return str(stop.value)
        row = self._row(cfg, cases, first, loop)
        session.record(row, begun=True)
        ab = row.ab
        assert ab is not None
        interval = f" [{ab.ci_low:.4f}, {ab.ci_high:.4f}]" if ab.ci_low is not None and ab.ci_high is not None \
            else ""
        self.on_line(f"  side by side {good.case.runtime} vs {other.case.runtime}: {ab.verdict}"
                     + (f", B/A {ab.ratio:.4f}{interval}" if ab.ratio is not None else "")
                     + f" ({len(loop.order)} pairs, {len({b.pair for b in loop.blocks if _contended(b)})} "
                       "contended)")
        return row

    @staticmethod
    def _row(cfg: RunConfig, cases: dict[str, CaseId], first: dict[str, CaseResult], loop: PairLoop) -> CaseResult:
        from harness.measure.contention import case_contention
        from harness.results.stats import latency_stats, throughput_sps

        ab, blocks = cfg.ab, loop.blocks
        judged = judge_ab(blocks, ab.ab_min_effect, ab.ab_confidence)
        r = judged.ratio
        samples = {s: [x for b in blocks if b.side == s for x in b.samples_ns] for s in ("a", "b")}
        stats = latency_stats(samples["b"], cfg.measure.noise_cv)
        res_a, res_b = first["a"], first["b"]
        case = cases["b"]
        result = AbResult(
            a=cases["a"].runtime, b=case.runtime, b_case=case, order=loop.order, blocks=blocks,
            block_time_s=ab.ab_block_time_s, verdict=judged.verdict.value, reason=judged.reason,
            ratio=r.ratio if r else None, ci_low=r.low if r else None, ci_high=r.high if r else None,
            confidence=ab.ab_confidence, min_effect=ab.ab_min_effect, pairs_used=judged.pairs_used,
            waited_s=round(loop.waited_s, 3), extra_pairs=loop.extra_pairs)
        regressed = judged.verdict is Verdict.REGRESSED
        side_a = {"case": cases["a"].id, "runtime": cases["a"].runtime,
                  "environment": res_a.environment.as_dict() if res_a.environment else None,
                  "latency": latency_stats(samples["a"], cfg.measure.noise_cv).as_dict()}
        return CaseResult(
            case, "failed" if regressed else "passed",
            reason=judged.reason if regressed or judged.verdict is Verdict.INCONCLUSIVE else "",
            samples_ns=samples["b"], warmup_iters=res_b.warmup_iters, timing_scope=res_b.timing_scope,
            scenario="single-stream" if case.batch == 1 else "offline", latency=stats,
            throughput_sps=throughput_sps(case.batch, stats.p50_ms), setup_s=res_b.setup_s, artifact=res_b.artifact,
            feed_sha256=res_b.feed_sha256, model_fingerprint=res_b.model_fingerprint,
            precision_recipe=res_b.precision_recipe, ab=result,
            contention=case_contention([b.contention for b in blocks]), environment=res_b.environment,
            details={"bisect": {"side_a": side_a}})


def _contended(block: AbBlock) -> bool:
    return bool(block.contention and block.contention.contended)


def _short(text: str, n: int = 160) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[:n - 3] + "..."


def run_bisect(config: RunConfig, runtime: str, versions: Sequence[str], gates: GateConfig,
               on_line: Callable[[str], None] = print) -> Bisection:
    """Bisect with real runs: each release a run session of its own (`RUNTIME@VERSION`, its environment built on
    first use) of the one case of `config`'s matrix, written under OUT/VERSION/; the median judged on the two
    releases of each comparison measured side by side (SideBySide, one session: OUT/side-by-side/)."""
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
                + (f", p50 {result.latency.p50_ms:.3f} ms" if result.latency else f" ({result.reason})"))
        return result

    both = HarnessSession(config.replace(workload="gate", repeats=1, out_dir=out_dir / SIDE_BY_SIDE_DIR),
                          progress=RunProgress(case_lines=False))
    side_by_side = SideBySide(both, on_line)
    interrupted = True
    try:
        found = bisect(versions, measure, lambda a, b: judge(a, b, gates, side_by_side), runtime)
        interrupted = False
    finally:
        both.finish(interrupted=interrupted)
    if both.stopping:
        raise both.interrupt()
    return found
