"""`harness gate BASELINE`: every gated case re-measured tonight, side A the stored artifact or torch module on its
stored release, side B tonight's build, interleaved, judged by the A/B test (docs/nightly-gating.md)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.config import RunConfig
from harness.data import case_feed, feed_digest
from harness.execution.session import HarnessSession
from harness.gating.ab import judge_ab
from harness.gating.baseline import Replay, ReplayCase
from harness.gating.compare import NothingInCommon, VerdictRecord, compare_runs
from harness.gating.ab import ab_cause
from harness.gating.unjudged import (
    NODE_LOST,
    NOT_COMPARABLE,
    NOT_PLACED,
    TOO_WIDE,
    decide_exit,
    gate_headline,
    unjudged_cause,
    unjudged_line,
    verdict_text,
)
from harness.gating.verdicts import Verdict
from harness.model import get_model
from harness.results.schema import BROKEN, AbBlock, AbResult, CaseId, CaseResult, RunResults
from harness.results.stats import latency_stats, median_ns, throughput_sps
from harness.measure.contention import wait_quiet
from harness.workloads.ab.pairs import PairLoop, Stop, failed_block_status, renews_workers
from harness.workloads.common import ensure_user_models
from harness.workloads.gate.workload import SidePayload, baseline_model_name
from harness.runtimes.pinned import canonical_dist, same_release

# rows that were not judged: never a pass; the gate exits 3 for them unless --allow-unjudged (each row names its
# cause: harness.gating.unjudged; a stored-figure row of these verdicts without one gets the verdict's)
UNJUDGED = frozenset({Verdict.INCONCLUSIVE, Verdict.NOT_COMPARABLE, Verdict.NOISE})
_STORED_CAUSE = {Verdict.NOISE: TOO_WIDE, Verdict.NOT_COMPARABLE: NOT_COMPARABLE}
STORED = "stored figures"


@dataclass
class GateCase:
    """One gated case: re-measured (fallback "") or judged on the stored figures (fallback says why)."""

    case: CaseId
    fallback: str = ""
    artifact: Path | None = None
    stored: ReplayCase | None = None
    note: str = ""  # what the A/B found worth saying (a changed model, another release, another feed)

    @property
    def rebuilt(self) -> bool:
        """Side A is the torch module rebuilt from the model's stored (unchanged) definition, not an artifact."""
        return self.artifact is None and self.stored is not None and self.stored.model_definition is not None


def plan_gate(baseline: RunResults, replay: Replay | None, models: Sequence[str] = (),
              runtimes: Sequence[str] = ()) -> list[GateCase]:
    """The gated cases of the baseline's newest run (measured there; filtered by model and runtime names, a
    runtime also matching its `NAME@VERSION` pins), each re-measured or with why it falls back."""
    out = []
    graphs: dict[tuple[Path, str], str] = {}  # graph_problem per (blob, model): batch sizes share one graph
    for c in baseline.cases:
        if not c.measured:
            continue
        if models and c.case.model not in models:
            continue
        if runtimes and c.case.runtime not in runtimes and c.case.runtime.split("@")[0] not in runtimes:
            continue
        g = GateCase(c.case)
        if replay is None:
            g.fallback = "the baseline stores no artifacts (saved by an older harness: save it again)"
        elif replay.run_id != baseline.run_id:
            g.fallback = f"the baseline's artifacts are of run {replay.run_id}, not its newest run {baseline.run_id}"
        elif c.case.id not in replay.cases:
            g.fallback = "the baseline stores nothing to re-run it"
        else:
            g.stored = replay.cases[c.case.id]
            g.artifact, problem = replay.check(c.case.id) if g.stored.artifact_sha256 else (None, "")
            if problem and not problem.startswith("its stored artifact is missing"):
                g.fallback = f"{problem} (baseline {replay.source or replay.blobs.parent}): never replayed"
                out.append(g)
                continue
            runtime = _runtime_class(c.case.runtime)
            if g.stored.artifact_sha256 is None and runtime is not None and runtime.runs_torch_module:
                g.fallback = _module_fallback(g.stored, c.case, runtime, baseline)
            elif g.stored.not_kept:
                g.fallback = g.stored.not_kept
            elif g.stored.artifact_sha256 is None:
                g.fallback = (f"runtime {c.case.runtime} is not known tonight" if runtime is None else
                              f"{c.case.runtime} ran no ONNX artifact and does not run the torch module itself: "
                              "nothing to re-run")
            elif g.artifact is None:
                g.fallback = f"its stored artifact is missing from {replay.blobs}"
            else:
                key = (g.artifact, c.case.model)
                if key not in graphs:
                    graphs[key] = graph_problem(g.artifact, g.stored, c.case, baseline)
                g.fallback = graphs[key]
        out.append(g)
    return out


def graph_problem(blob: Path, stored: ReplayCase, case: CaseId, baseline: RunResults) -> str:
    """Why the verified blob is not the graph this case ran ("" when it is): for a user's ONNX model, the model
    fingerprint of the blob (as the run computed it, over the file's bytes) must be the case's stored one; for
    any model, the graph's input and output names must be the model's. Another case's digest put in this case's
    place is refused here, before anything runs."""
    import dataclasses as dc

    from harness.model_files import spec_from_onnx, user_model_name

    try:
        import onnx

        graph = onnx.load(str(blob), load_external_data=False).graph
    except Exception:  # noqa: BLE001 - not a graph onnx reads (a runtime's own format): its runtime says so
        return ""
    names = ({i.name for i in graph.input} - {t.name for t in graph.initializer}, [o.name for o in graph.output])
    try:
        spec = get_model(case.model)
    except Exception:  # noqa: BLE001 - a model unknown tonight: plan_gate's caller reports it
        return ""
    want = {t.name for t in spec.inputs}
    if want and not want <= names[0]:
        return (f"the stored artifact is not this case's graph: its inputs {sorted(names[0])} are not the model's "
                f"{sorted(want)}: never replayed")
    refs = [str(r) for r in baseline.config.get("user_models") or [] if isinstance(r, str)]
    ref = next((r for r in refs if user_model_name(r) == case.model), None)
    if ref is None or not stored.model_fingerprint or spec.onnx_path is None:
        return ""
    try:
        then = spec_from_onnx(blob, case.model, tuple(tuple(x) for x in spec.config.get("shape") or ()))
    except Exception as exc:  # noqa: BLE001 - the blob does not load as the user's model did
        return f"the stored artifact does not load as model {case.model} did ({exc}): never replayed"
    then = dc.replace(then, config={**then.config, "path": str(Path(ref).absolute())})
    if then.fingerprint() != stored.model_fingerprint:
        return (f"the stored artifact is not the model the baseline ran (fingerprint {then.fingerprint()[:12]}, the "
                f"case's {stored.model_fingerprint[:12]}): never replayed")
    return ""


OLD_NOT_KEPT = "(it runs the model itself)"  # what a baseline saved before model definitions says of such a case


def _runtime_class(name: str) -> Any:
    from harness.runtimes import get_runtime

    try:
        return get_runtime(name)
    except Exception:  # noqa: BLE001 - a runtime unknown tonight: the case cannot be re-measured, said so
        return None


def _module_fallback(stored: ReplayCase, case: CaseId, runtime: Any, baseline: RunResults) -> str:
    """Why side A of a case whose runtime runs the torch module itself cannot be rebuilt from the model's stored
    definition tonight ("" when it can: the definition is unchanged, apart from the runtime's own release, which
    side A pins)."""
    from harness.gating.baseline import registered_model
    from harness.model import definition_changes

    if stored.model_definition is None:
        if stored.not_kept.endswith(OLD_NOT_KEPT) or not stored.not_kept:
            return (f"{case.runtime} runs the torch module and the baseline stores no definition of model "
                    f"{case.model} (saved by an older harness: save it again)")
        return stored.not_kept
    spec = registered_model(case.model, baseline)
    if spec is None or spec.build is None:
        what = "not registered" if spec is None else "ONNX-only"
        return f"model {case.model} has no torch module tonight (it is {what})"
    changes = definition_changes(stored.model_definition, spec.definition(), ignore=(runtime.distribution,))
    return f"the model's source changed since the baseline: {changes}" if changes else ""


@dataclass
class GateOutcome:
    records: list[VerdictRecord] = field(default_factory=list)
    fallbacks: dict[str, str] = field(default_factory=dict)  # case id -> why not re-measured
    run: RunResults | None = None
    interrupted: bool = False
    workers_started: int | None = 0  # supervised workers the gate started (two sides in two environments: two);
    # None on a Ray cluster (each node starts its own)
    nodes: dict[str, str] = field(default_factory=dict)  # case id -> the Ray node that measured it (--ray)
    exit_status: int | None = None  # 128 + the signal that stopped the gate (130 SIGINT, 143 SIGTERM)

    def unjudged(self) -> list[VerdictRecord]:
        """The gated rows not judged (each names its cause: harness.gating.unjudged)."""
        return [r for r in self.records if unjudged_cause(r)]

    def exit_code(self, allow_unjudged: bool) -> int:
        return decide_exit(self.records, allow_unjudged)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.records:
            out[r.verdict.value] = out.get(r.verdict.value, 0) + 1
        return out

    def summary(self, allow_unjudged: bool) -> str:
        """The state and counts in the wording compare and summary.md use (unjudged.gate_headline), then how the
        cases were measured."""
        re_measured = len({r.case_id for r in self.records} - set(self.fallbacks))
        return (f"{gate_headline(self.records, allow_unjudged)} ({re_measured} case(s) re-measured A/B tonight, "
                f"{len(self.fallbacks)} on stored figures)")

    def unjudged_line(self, allow_unjudged: bool) -> str:
        return unjudged_line(self.records, allow_unjudged) or "not judged: none (every gated row was judged)"

    def lines(self, allow_unjudged: bool) -> list[str]:
        out = []
        for r in sorted(self.records, key=_order):
            on = f"  [node {self.nodes[r.case_id]}]" if r.case_id in self.nodes else ""
            out.append(f"{verdict_text(r):<15} {r.case_id}{on}  {r.metric}{_figures(r)}  {r.reason}")
        return [*out, self.summary(allow_unjudged), self.unjudged_line(allow_unjudged)]

    def markdown(self, allow_unjudged: bool) -> str:
        """gate.md: its first line is the gate's summary (a CI job's summary reads it first)."""
        node = "| node " if self.nodes else ""
        rows = [f"| verdict | case {node}| metric | A | B | B/A | interval | how | reason |",
                f"| --- | --- {'| --- ' if node else ''}| --- | ---: | ---: | ---: | --- | --- | --- |"]
        for r in sorted(self.records, key=_order):
            how = f"{STORED} (not re-measured)" if r.case_id in self.fallbacks else "re-measured A/B"
            interval = f"[{_cell(r.ci_low)}, {_cell(r.ci_high)}]" if r.ci_low is not None else ""
            reason = r.reason.replace("|", "\\|").replace("\n", " ")
            on = f"| {self.nodes.get(r.case_id, '')} " if node else ""
            rows.append(f"| {verdict_text(r)} | {r.case_id} {on}| {r.metric} | {_cell(r.baseline)} | {_cell(r.current)} | "
                        f"{_cell(r.ratio)} | {interval} | {how} | {reason} |")
        return "\n".join([f"**{self.summary(allow_unjudged)}**", "", self.unjudged_line(allow_unjudged), "",
                          *rows, ""])

    def as_dict(self, allow_unjudged: bool) -> dict[str, Any]:
        return {"exit_code": self.exit_code(allow_unjudged), "summary": self.summary(allow_unjudged),
                "workers_started": self.workers_started,
                "unjudged": [{"row": f"{r.case_id} {r.metric}", "cause": unjudged_cause(r), "ratio": r.ratio,
                              "ci_low": r.ci_low, "ci_high": r.ci_high} for r in self.unjudged()],
                "unjudged_line": unjudged_line(self.records, allow_unjudged),
                "fallbacks": self.fallbacks, **({"nodes": self.nodes} if self.nodes else {}),
                "records": [r.as_dict() for r in self.records]}


def _order(r: VerdictRecord) -> tuple[bool, bool, str]:
    return not r.failing, not unjudged_cause(r), r.case_id


def _figures(r: VerdictRecord) -> str:
    """"  A 0.0310 B 0.0530 B/A 1.7096 [1.6500, 1.7700]": what a row measured, judged or not."""
    ab = f"  A {r.baseline:.4g} B {r.current:.4g} {r.unit}".rstrip() if r.baseline is not None and \
        r.current is not None else ""
    ratio = f"  B/A {r.ratio:.4f}" if r.ratio is not None else ""
    if ratio and r.ci_low is not None and r.ci_high is not None:
        ratio += f" [{r.ci_low:.4f}, {r.ci_high:.4f}]"
    return ab + ratio


def _short(text: str, n: int = 120) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[:n - 3] + "..."


class GateDriver:
    """Drives the gate's cases through one HarnessSession (its supervised executor, progress, atomic results and
    report): per re-measured case, side B then side A activated (each in the worker of its environment), then the
    blocks in the drawn order, one request per block, then the paired verdict; fallback cases run tonight as
    forward cases and are judged against the stored figures."""

    wait = staticmethod(wait_quiet)  # how the pairs wait for quiet cores (tests give a fake one)
    # how a case judged on the stored figures is measured tonight: None = fallback_config (the baseline's timing
    # policy and --repeats, `harness gate`); `harness run --baseline --ray` gives the run's own configuration
    forward_config: RunConfig | None = None

    def __init__(self, session: HarnessSession, baseline_runs: list[RunResults], replay: Replay | None,
                 gates: Any) -> None:
        self.session = session
        self.config = session.config
        self.baseline_runs = baseline_runs
        self.replay = replay
        self.gates = gates
        self.renew_workers = renews_workers()

    # ------------------------------------------------------------------ one re-measured case
    def ab_case(self, g: GateCase) -> CaseResult | str:
        """The case's row measured A/B, or why side A could not be reproduced (the case then falls back)."""
        cfg, case, ex = self.config, g.case, self.session.executor
        ensure_user_models(cfg)
        feed, _ = case_feed(get_model(case.model), case.dims, cfg.inputs)
        digest = feed_digest(feed)
        notes = []
        if g.stored is not None and g.stored.feed_sha256 and g.stored.feed_sha256 != digest:
            notes.append(f"tonight's feed differs from the baseline's ({g.stored.feed_sha256[:12]} vs {digest[:12]}); "
                         "both sides run tonight's")
        res_b, inject_ns = self._side_b(case, feed)
        if res_b.status != "passed":
            return res_b
        side = self._side_a_release(g, res_b, notes)
        a_case = dataclasses.replace(case, model=baseline_model_name(case.model), runtime=side.runtime)
        if g.rebuilt:
            notes.insert(0, "side A: the torch module rebuilt from the model's definition, unchanged since the "
                            "baseline")
        payloads = {"a": SidePayload("a", case.model, feed, artifact=str(g.artifact) if g.artifact else None,
                                     definition=g.stored.model_definition if g.rebuilt and g.stored else None),
                    "b": SidePayload("b", case.model, feed, inject_ns=inject_ns)}
        res_a = ex.run(a_case, cfg, payloads["a"])
        if res_a.status != "passed":
            what = "the module rebuilt from the model's definition" if g.rebuilt else "the stored artifact"
            return f"side A ({side.runtime}, {what}) could not run: {res_a.status}: {_short(res_a.reason)}"
        loop = self._blocks({"a": a_case, "b": case}, payloads)
        if not isinstance(loop, PairLoop):
            return loop
        g.note = "; ".join(notes)
        return self._row(g, res_a, res_b, a_case, side, loop, digest, notes)

    def _side_b(self, case: CaseId, feed: dict[str, Any]) -> tuple[CaseResult, int]:
        """Tonight's side activated (and, for gate-check, re-activated with its planted slowdown: its ns)."""
        cfg, ex, ab = self.config, self.session.executor, self.config.ab
        res_b = ex.run(case, cfg, SidePayload("b", case.model, feed))
        if res_b.status != "passed":
            res_b.details["gate"] = {"side": "b", "failed": True}
            return res_b, 0
        inject_ns = int(ab.ab_inject * median_ns(res_b.samples_ns)) if ab.ab_inject > 0 else 0
        if inject_ns:
            res_b = ex.run(case, cfg, SidePayload("b", case.model, feed, inject_ns=inject_ns))
        return res_b, inject_ns

    def _side_a_release(self, g: GateCase, res_b: CaseResult, notes: list[str]) -> _SideA:
        """Which runtime side A runs: the baseline's release, of the distribution that provided the runtime's
        module then (onnxruntime-gpu on the default install), in its own environment where tonight's differs in
        distribution or version. Side A's release is always said: the release, or why it is not known."""
        from harness.gating.baseline import case_providers, release_by_name
        from harness.results.environment import module_provider
        from harness.runtimes import get_runtime
        from harness.runtimes.pinned import split_pin

        case = g.case
        cls = get_runtime(case.runtime)
        run_env = self.session.run.environment if self.session.run is not None else None
        module, dist = cls.module, cls.distribution
        tonight = case_providers(res_b.environment, run_env).get(module or "")
        if tonight is None and res_b.environment is None and module:
            tonight = module_provider(module)
        if tonight is None:
            tonight = release_by_name(res_b.environment.packages if res_b.environment else None, dist)
        stored = g.stored.providers.get(module or "") if g.stored else None
        how = ""
        if stored is None and g.stored is not None:
            stored = release_by_name(g.stored.packages, dist)
            how = " (inferred from its package list: saved before the harness recorded each runtime's build)" \
                if stored else ""
        a_runtime = case.runtime
        base = split_pin(case.runtime)[0]
        if stored and tonight and not same_release(stored, tonight):
            same_dist = canonical_dist(stored["distribution"]) == canonical_dist(tonight["distribution"])
            pinned = stored["version"] if canonical_dist(stored["distribution"]) == canonical_dist(cls.distribution or "") else \
                f"{stored['distribution']}=={stored['version']}"
            a_runtime = f"{base}@{pinned}"
            notes.append(f"side A runs {stored['distribution']} {stored['version']} (the baseline's release{how}) in "
                         f"its own environment, side B tonight's "
                         f"{tonight['version'] if same_dist else tonight['distribution'] + ' ' + tonight['version']}")
        a_label = f"{stored['distribution']} {stored['version']}" if stored else None
        if stored is None and cls.module is not None:
            now = f"{tonight['distribution']} {tonight['version']}" if tonight else "tonight's"
            a_label = (f"unknown: the baseline recorded no release of {cls.distribution or cls.module} (saved by an "
                       f"older harness); side A runs {now} as side B does: save the baseline again to pin it")
            notes.append(f"side A's release is {a_label}")
        b_label = f"{tonight['distribution']} {tonight['version']}" if tonight else None
        if not g.rebuilt and g.stored and g.stored.model_fingerprint and res_b.model_fingerprint and \
                g.stored.model_fingerprint != res_b.model_fingerprint:
            notes.append(f"the model changed since the baseline (fingerprint {g.stored.model_fingerprint[:12]} vs "
                         f"{res_b.model_fingerprint[:12]}): judged as the stored graph against tonight's")
        return _SideA(a_runtime, cls.distribution, a_label, b_label)

    def _blocks(self, cases: dict[str, CaseId], payloads: dict[str, SidePayload]
                ) -> PairLoop | CaseResult | str:
        """The interleaved blocks (harness.workloads.ab.pairs.PairLoop: the drawn order, both sides activated anew
        every pairs / --ab-activations pairs, quiet waits and more pairs within --ab-budget); a side that fails
        ends them (side A: the case falls back, the reason returned; side B: the case's row, broken)."""
        cfg, ex = self.config, self.session.executor

        def activate(act: int) -> None:
            if self.renew_workers:  # one CPU: the activation in new workers (pairs.renews_workers)
                ex.renew()
            for s in ("b", "a"):  # the two sides activated anew, in the order of their first activation
                res = ex.run(cases[s], cfg, payloads[s])
                if res.status == "passed":
                    continue
                if s == "a":
                    raise Stop(f"side A failed in its activation {act + 1}: {res.status}: {_short(res.reason)}")
                res.reason = f"side B (tonight's) failed in its activation {act + 1}: {res.reason}"
                res.details["gate"] = {"side": "b", "failed": True}
                raise Stop(res)

        def measure(s: str, i: int, act: int) -> AbBlock:
            if self.session.stopping:
                raise KeyboardInterrupt("the gate is stopping")
            reply = ex.measure_block(cases[s], cfg, False)
            if "error" in reply:
                if s == "a":
                    raise Stop(f"side A failed in pair {i}: {_short(str(reply['error']))}")
                raise Stop(CaseResult(cases["b"], failed_block_status(reply), phase="run",
                                      reason=f"side B (tonight's) failed in pair {i}: {reply['error']}",
                                      details={"gate": {"side": "b", "failed": True}}))
            return AbBlock(s, i, list(reply["samples_ns"]), reply.get("contention"), act)

        loop = PairLoop(cfg.ab, cfg.measure.threads, measure, activate, wait=self.wait)
        try:
            loop.run()
        except Stop as stop:
            return stop.value
        return loop

    def _row(self, g: GateCase, res_a: CaseResult, res_b: CaseResult, a_case: CaseId, side: _SideA,
             loop: PairLoop, digest: str, notes: list[str]) -> CaseResult:
        """The case's row: side B's samples, the paired verdict, both sides' identities and notes."""
        order, blocks = loop.order, loop.blocks
        from harness.measure.contention import case_contention

        cfg, case, ab = self.config, g.case, self.config.ab
        judged = judge_ab(blocks, ab.ab_min_effect, ab.ab_confidence)
        r = judged.ratio
        samples_b = [x for b in blocks if b.side == "b" for x in b.samples_ns]
        samples_a = [x for b in blocks if b.side == "a" for x in b.samples_ns]
        stats = latency_stats(samples_b, cfg.measure.noise_cv)
        sha = g.stored.artifact_sha256 if g.stored else None
        definition = (g.stored.model_definition or {}).get("fingerprint") if g.rebuilt and g.stored else None
        what = f"model {case.model} rebuilt from its definition {str(definition)[:12]}" if g.rebuilt else \
            f"artifact {str(sha)[:12]}"
        a_label = f"baseline {self.replay.run_id if self.replay else '?'}: {what}" + \
            (f", {side.stored}" if side.stored and not side.stored.startswith("unknown") else "")
        b_label = "tonight" + (f": {side.tonight}" if side.tonight else "")
        result = AbResult(
            a=a_label, b=b_label, b_case=case, order=order, blocks=blocks, block_time_s=ab.ab_block_time_s,
            inject=ab.ab_inject, verdict=judged.verdict.value, reason=judged.reason,
            ratio=r.ratio if r else None, ci_low=r.low if r else None, ci_high=r.high if r else None,
            confidence=ab.ab_confidence, min_effect=ab.ab_min_effect, pairs_used=judged.pairs_used,
            waited_s=round(loop.waited_s, 3), extra_pairs=loop.extra_pairs)
        regressed = judged.verdict is Verdict.REGRESSED
        side_a = {"case": a_case.id, "runtime": side.runtime, "artifact_sha256": sha,
                  "model_definition": definition, "release": side.stored,
                  "environment": res_a.environment.as_dict() if res_a.environment else None,
                  "latency": latency_stats(samples_a, cfg.measure.noise_cv).as_dict()}
        side_b = {"release": side.tonight, **{k: v for k, v in res_b.details.items() if k != "side"}}
        return CaseResult(
            case, "failed" if regressed else "passed",
            reason=judged.reason if regressed or judged.verdict is Verdict.INCONCLUSIVE else "",
            samples_ns=samples_b, warmup_iters=res_b.warmup_iters, timing_scope=res_b.timing_scope,
            scenario="single-stream" if case.batch == 1 else "offline", latency=stats,
            throughput_sps=throughput_sps(case.batch, stats.p50_ms), setup_s=res_b.setup_s, artifact=res_b.artifact,
            feed_sha256=digest, model_fingerprint=res_b.model_fingerprint, precision_recipe=res_b.precision_recipe,
            ab=result, contention=case_contention([b.contention for b in blocks]), environment=res_b.environment,
            details={"gate": {"mode": "re-measured", "side_a": side_a, "side_b": side_b, "notes": notes}})

    # ------------------------------------------------------------------ the whole matrix
    def rows(self, plans: Sequence[GateCase]) -> Iterator[CaseResult]:
        """Each plan's row as it is recorded in the session (started here if it is not): the A/B row of a
        re-measured case, or tonight's forward row of a case judged on the stored figures (`details.gate` says
        which and why). What a node of `harness gate --ray` runs on its shard (harness.execution.gate_ray)."""
        session = self.session
        if not session.started:
            session.start()
        forward = self.forward_config or fallback_config(self.config, self.baseline_runs[-1].config)
        for g in plans:
            if session.stopping:
                break
            if not g.fallback:
                session.progress.begin(g.case.id)
                got = self.ab_case(g)
                if not isinstance(got, str):
                    yield session.record(got, begun=True)
                    continue
                g.fallback = got
                session.progress.end(f"{g.case.id}: side A not reproduced: {got}; measuring tonight's for the "
                                     "stored figures")
            result = session.execute(g.case, forward)
            result.details["gate"] = {"mode": STORED, "why": g.fallback}
            session._save()
            yield result

    def run(self, plans: list[GateCase]) -> GateOutcome:
        out = GateOutcome()
        session = self.session
        if not session.started:
            session.start()
        session.progress.start("case", len(plans))
        try:
            for _ in self.rows(plans):
                pass
        except KeyboardInterrupt:
            out.interrupted = True
        finally:
            out.workers_started = int(getattr(session.executor, "workers_started", 0))
            session.finish(interrupted=out.interrupted)
        out.run = session.run
        out.exit_status = session.exit_status()
        out.interrupted = out.interrupted or out.exit_status is not None
        if out.interrupted or session.run is None:
            return out
        judge_rows(out, plans, session.run, self.baseline_runs, self.gates)
        return out


def judge_rows(out: GateOutcome, plans: Sequence[GateCase], run: RunResults, baseline_runs: list[RunResults],
               gates: Any) -> None:
    """The gate's verdicts from its rows in `run` (one per plan, measured on this machine or on the nodes of a Ray
    cluster), appended to out.records: a re-measured case's paired verdict, a stored-figure case's verdicts
    against the baseline (out.fallbacks says why it was not re-measured), a case whose Ray node was lost before it
    finished unjudged (never a pass), and a case no node could take unjudged."""
    rows = {c.case.id: c for c in run.cases}
    for g in plans:
        row = rows.get(g.case.id)
        if row is None:
            continue
        gate = row.details.get("gate") if isinstance(row.details.get("gate"), dict) else {}
        if row.details.get("ray_node"):
            out.nodes[g.case.id] = str(row.details["ray_node"])
        lost = _not_run(row)
        if lost:
            out.records.append(VerdictRecord(g.case, "case", Verdict.INCONCLUSIVE, reason=f"{lost[1]}: {row.reason}",
                                             unjudged=lost[0]))
        elif gate.get("mode") == STORED:
            out.fallbacks[g.case.id] = str(gate.get("why") or g.fallback)
        else:
            out.records.append(_ab_record(g, row))
    _stored_records(out, run, baseline_runs, gates)


def _not_run(row: CaseResult) -> tuple[str, str] | None:
    """(cause, what happened) for a row a Ray node never measured: its node lost before the case finished
    (harness.execution.ray_shards.ShardRun), or no node able to take it; None for a row that ran."""
    if row.status == "crashed" and row.phase == "shard":
        return NODE_LOST, "not measured: its Ray node was lost"
    if row.status == "skipped" and (row.details or {}).get("ray_unplaced"):
        return NOT_PLACED, "not measured: no node of the Ray cluster could take it"
    return None


def _ab_record(g: GateCase, row: CaseResult) -> VerdictRecord:
    if row.ab is None:  # side B (tonight's) could not run
        verdict = Verdict.BROKE if row.status in BROKEN else Verdict.NOT_COMPARABLE
        return VerdictRecord(g.case, "case", verdict, reason=f"re-measured A/B: tonight's side {row.status}: "
                             f"{row.reason}", unjudged=NOT_COMPARABLE if verdict is Verdict.NOT_COMPARABLE else "")
    a = (row.details.get("gate", {}).get("side_a", {}).get("latency") or {}).get("p50_ms")
    notes = "; ".join(str(n) for n in row.details.get("gate", {}).get("notes") or ())
    note = f" ({notes})" if notes else ""
    return VerdictRecord(g.case, "latency_median", Verdict(row.ab.verdict), baseline=a,
                         current=row.latency.p50_ms if row.latency else None, ratio=row.ab.ratio, ci_low=row.ab.ci_low,
                         ci_high=row.ab.ci_high, threshold=row.ab.min_effect, unit="ms",
                         reason=f"re-measured A/B tonight{note}: {row.ab.reason}", timing=True,
                         unjudged=ab_cause(row.ab))


def _stored_records(out: GateOutcome, run: RunResults, baseline_runs: list[RunResults], gates: Any) -> None:
    ids = set(out.fallbacks)
    if not ids:
        return
    current = dataclasses.replace(run, complete=True, cases=[c for c in run.cases if c.case.id in ids])
    try:
        cmp = compare_runs(baseline_runs, current, gates, baseline_label="baseline", current_label="tonight")
    except NothingInCommon:  # `run --baseline --ray`: the stored-figure rows are all cases the baseline lacks
        for c in current.cases:
            status = f"{c.status}: {c.reason}" if c.reason else c.status
            out.records.append(VerdictRecord(c.case, "case", Verdict.NEW, reason=(
                f"{STORED} (not re-measured: {out.fallbacks[c.case.id]}): not in the baseline (now {status})")))
        return
    for r in cmp.records:
        if r.case_id in ids:
            why = out.fallbacks[r.case_id]
            cause = r.unjudged or (_STORED_CAUSE.get(r.verdict, "") if r.metric != "drift" and r.verdict in
                                   UNJUDGED else "")
            out.records.append(dataclasses.replace(r, reason=f"{STORED} (not re-measured: {why}): {r.reason}",
                                                   unjudged=cause))


def fallback_config(config: RunConfig, stored: dict[str, Any]) -> RunConfig:
    """How a case judged on the stored figures is measured tonight: a forward case with the baseline's timing
    policy and --repeats (its figures are compared with figures measured that way)."""
    from harness.measure.timer import TimingPolicy

    values: dict[str, Any] = {"workload": "forward"}
    repeats = stored.get("repeats")
    if isinstance(repeats, int) and repeats >= 1:
        values["repeats"] = repeats
    timing = stored.get("timing")
    if isinstance(timing, dict):
        try:
            values["timing"] = TimingPolicy(**timing)
        except TypeError:
            pass  # a policy of another harness version: tonight's default
    return config.replace(**values)


def run_gate(config: RunConfig, baseline_runs: list[RunResults], replay: Replay | None, gates: Any,
             plans: list[GateCase], progress: Any = None) -> GateOutcome:
    """Drive the gate's cases in one session (workload "gate") and judge them; see GateDriver."""
    session = HarnessSession(config.replace(workload="gate"), progress)
    return GateDriver(session, baseline_runs, replay, gates).run(plans)


def _cell(x: float | None) -> str:
    return f"{x:.4f}" if x is not None else ""


@dataclass(frozen=True)
class _SideA:
    """Side A's runtime (pinned to the baseline's release where tonight's differs) and both releases."""

    runtime: str
    dist: str | None
    stored: str | None  # "onnxruntime-gpu 1.30.0", or "unknown: why"
    tonight: str | None
