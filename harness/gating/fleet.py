"""A fleet judged node against node: each node's figures placed against its peers of the same hardware class
(slow, fast, noisy, wrong results, lost, ok), with the statistical basis of every placement."""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness.results.schema import CaseId, CaseResult, RunResults

# The placements, worst first: a node's placement is the worst of its case-figure placements.
LOST, WRONG, SLOW, FAST, NOISY, NOT_JUDGED, OK = "lost", "wrong results", "slow", "fast", "noisy", "not judged", "ok"
PLACEMENTS = (LOST, WRONG, SLOW, FAST, NOISY, NOT_JUDGED, OK)
QUALIFIED = (OK,)  # only these qualify a node; "not judged" is never a pass

# Per node, the chance that an identical node is flagged slow or fast on any of its case-figures. The critical
# z of each test is this rate split over the node's tests (Bonferroni), read from a simulated identical fleet
# (critical_z). Measured: tests/gating/test_fleet.py and docs/measurements.md (fleet statistics).
DEFAULT_FALSE_FLAG_RATE = 0.005
# A node must also be this far from its peers' median (percent) to be slow or fast: a real effect, not only a
# significant one (a spec's [fleet] within_pct replaces it). 5%: below the 8% a degraded DIMM or a wrong governor
# costs, above the spread of identical nodes' activations on the machines measured (docs/qualification.md).
DEFAULT_WITHIN_PCT = 5.0
# A node is noisy when its robust CV is this many times its peers' median robust CV and over the run's noise limit.
NOISY_RATIO = 2.0
MIN_PEERS = 2  # fewer peers in a hardware class: nothing to place a node against


@dataclass(frozen=True)
class FleetFigure:
    """A figure compared across nodes: read per measurement block from the case's samples."""

    key: str
    label: str
    unit: str
    quantile: float  # of the block's samples (ms)
    min_samples: int  # per block, for the quantile to be quoted (harness.results.stats.quoted's rule)


FIGURES = (FleetFigure("p50_ms", "latency p50", "ms", 0.50, 1),
           FleetFigure("p99_ms", "latency p99", "ms", 0.99, 100))


@dataclass
class NodeRun:
    """What came back from one node: its run (None when nothing did) and why it was lost, if it was."""

    label: str
    run: RunResults | None
    lost: str | None = None  # the reason the node is lost (a dead Ray node, a shard that failed)
    wrong: list[str] = field(default_factory=list)  # golden-output findings (harness.gating.golden)
    machine: dict[str, Any] = field(default_factory=dict)  # the node's machine state at its run's start and end

    @property
    def hardware_class(self) -> str:
        fingerprint = self.run.environment.machine_fingerprint if self.run is not None else None
        return str(fingerprint or "unknown")


def block_values(result: CaseResult, figure: FleetFigure) -> tuple[list[float], bool]:
    """The figure (ms) of each measurement block of the case, in order, and whether any block was contended.
    A failed block or one with too few samples for the quantile gives no value."""
    samples = np.asarray(result.samples_ns, dtype=np.float64) / 1e6
    blocks = result.blocks or []
    sizes = [b.samples for b in blocks] if blocks else [samples.size]
    out, start, contended = [], 0, bool(result.contention and result.contention.contended)
    for i, n in enumerate(sizes):
        part = samples[start:start + n]
        start += n
        if blocks and blocks[i].error:
            continue
        if blocks and blocks[i].contention and blocks[i].contention.contended:
            contended = True
        if part.size >= max(1, figure.min_samples):
            out.append(float(np.quantile(part, figure.quantile)))
    return out, contended


def _statistic(values: np.ndarray) -> np.ndarray:
    """z of node 0 against the others, for simulated or measured log block values of shape (sims, nodes,
    blocks): node value = median of its blocks (mean of 2), deviation from the median of the other nodes' values,
    scaled by the larger of (a) the pooled within-node spread of block values (the median over nodes of their
    block variances, so one noisy node does not hide the others) and (b) the spread between the other nodes
    (1.4826 MAD). Both scales are widened for the error of the peers' median."""
    sims, n, b = values.shape
    node = np.median(values, axis=2) if b >= 3 else values.mean(axis=2)
    within = np.median(values.var(axis=2, ddof=1), axis=1)
    peers = node[:, 1:]
    centre = np.median(peers, axis=1)
    widen = 1.0 + math.pi / (2 * (n - 1))  # var(median of n-1) ~ pi/2 var/(n-1)
    sd = np.sqrt(within / b * widen * (math.pi / 2 if b >= 3 else 1.0))
    between = 1.4826 * np.median(np.abs(peers - centre[:, None]), axis=1) * math.sqrt(widen)
    return (node[:, 0] - centre) / np.maximum(np.maximum(sd, between), 1e-300)


@functools.lru_cache(maxsize=256)
def critical_z(nodes: int, blocks: int, alpha: float, sims: int = 100_000, seed: int = 20261129) -> float:
    """The |z| an identical node exceeds with probability `alpha`, measured on `sims` simulated fleets of `nodes`
    identical nodes with `blocks` measurement blocks each (Gaussian block values, the statistic of _statistic)."""
    rng = np.random.default_rng(seed)
    z = _statistic(rng.standard_normal((sims, nodes, blocks)))
    return float(np.quantile(np.abs(z), 1.0 - alpha))


@dataclass
class NodeFigure:
    """One node's figure of one case, against its peers."""

    node: str
    value: float | None  # the node's figure (median of its blocks), None where not measured
    low: float | None = None  # the node's interval: the range of its block values
    high: float | None = None
    blocks: int = 0
    deviation_pct: float | None = None  # from the median of the other nodes of its class, percent
    z: float | None = None
    placement: str = NOT_JUDGED
    basis: str = ""
    contended: bool = False

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class FleetRow:
    """One case and figure across the nodes of one hardware class."""

    case_id: str
    figure: str
    unit: str
    hardware_class: str
    median: float | None
    band_low: float | None  # the fleet's robust band: median x exp(-+ k * sd)
    band_high: float | None
    k: float | None  # the critical z of this row's tests
    peers: int
    nodes: list[NodeFigure]

    def as_dict(self) -> dict[str, Any]:
        return {**{k: v for k, v in self.__dict__.items() if k != "nodes"},
                "nodes": [n.as_dict() for n in self.nodes]}


@dataclass
class NodePlacement:
    node: str
    hardware_class: str
    placement: str
    reasons: list[str]

    @property
    def qualified(self) -> bool:
        return self.placement in QUALIFIED

    def as_dict(self) -> dict[str, Any]:
        return {"node": self.node, "hardware_class": self.hardware_class, "placement": self.placement,
                "qualified": self.qualified, "reasons": self.reasons}


@dataclass
class FleetJudgement:
    rows: list[FleetRow]
    nodes: dict[str, NodePlacement]
    within_pct: float
    false_flag_rate: float
    method: str

    def as_dict(self) -> dict[str, Any]:
        return {"within_pct": self.within_pct, "false_flag_rate": self.false_flag_rate, "method": self.method,
                "nodes": {k: v.as_dict() for k, v in self.nodes.items()}, "rows": [r.as_dict() for r in self.rows]}


METHOD = ("Per case and figure, each node's value is the median of its measurement blocks; it is compared with the "
          "median of the other nodes of its hardware class (machine fingerprint). The scale is the larger of the "
          "pooled within-node spread of block values and the spread between the other nodes (1.4826 MAD); a node "
          "is slow (fast) when it is beyond the critical z, read from simulated fleets of identical nodes so that "
          "an identical node is flagged on any of its figures with at most the stated rate, and more than "
          "within_pct from the peers' median. A contended figure that reads slow is not judged (contention only "
          "slows). Noisy: robust CV over {ratio:g}x the peers' median and over the run's noise limit.")


def _lost_reason(nr: NodeRun) -> str | None:
    if nr.lost:
        return nr.lost
    if nr.run is None:
        return "nothing came back from the node"
    crashed = [c for c in nr.run.cases if c.status == "crashed" and "lost before" in (c.reason or "")]
    if crashed:
        return crashed[0].reason
    return None


def place_fleet(nodes: Sequence[NodeRun], cases: Sequence[CaseId], *, within_pct: float | None = None,
                false_flag_rate: float = DEFAULT_FALSE_FLAG_RATE,
                figures: Sequence[FleetFigure] = FIGURES) -> FleetJudgement:
    """Place every node against its peers of the same hardware class on every case and figure."""
    within = DEFAULT_WITHIN_PCT if within_pct is None else float(within_pct)
    placements: dict[str, list[tuple[str, str]]] = {n.label: [] for n in nodes}
    lost = {n.label: _lost_reason(n) for n in nodes}
    for n in nodes:
        if lost[n.label]:
            placements[n.label].append((LOST, f"lost: {lost[n.label]}"))
        for finding in n.wrong:
            placements[n.label].append((WRONG, finding))
    classes: dict[str, list[NodeRun]] = {}
    for n in nodes:
        if n.run is not None:
            classes.setdefault(n.hardware_class, []).append(n)
    n_tests = max(1, len(cases) * len(figures))
    alpha = false_flag_rate / n_tests
    rows: list[FleetRow] = []
    for hw, members in sorted(classes.items()):
        for case in cases:
            results = {m.label: next((c for c in m.run.cases if c.case == case), None) for m in members
                       if m.run is not None}
            for fig in figures:
                rows.append(_row(case, fig, hw, results, within, alpha, placements))
            _noisy(case, results, placements)
    for n in nodes:
        if n.run is not None and not lost[n.label] and len(classes.get(n.hardware_class, [])) - 1 < MIN_PEERS:
            placements[n.label].append((NOT_JUDGED, f"{len(classes.get(n.hardware_class, [])) - 1} peer(s) of its "
                                                    f"hardware class {n.hardware_class}: at least {MIN_PEERS} "
                                                    "needed to place it"))
    out = {}
    for n in nodes:
        found = placements[n.label]
        worst = min((p for p, _ in found), key=PLACEMENTS.index, default=OK)
        out[n.label] = NodePlacement(n.label, n.hardware_class, worst, [r for p, r in found if p != OK] or [
            "every figure within its peers' band"])
    return FleetJudgement(rows, out, within, false_flag_rate, METHOD.format(ratio=NOISY_RATIO))


def _row(case: CaseId, fig: FleetFigure, hw: str, results: Mapping[str, CaseResult | None], within: float,
         alpha: float, placements: dict[str, list[tuple[str, str]]]) -> FleetRow:
    per, figs = _node_figures(results, fig)
    blocks = min((len(v) for v, _ in per.values()), default=0)
    row = FleetRow(case.id, fig.key, fig.unit, hw, None, None, None, None, max(0, len(per) - 1), figs)
    if len(per) - 1 < MIN_PEERS or blocks < 2:
        why = (f"{len(per) - 1} peer(s) measured: at least {MIN_PEERS} needed" if len(per) - 1 < MIN_PEERS
               else "fewer than 2 measurement blocks per node: give [measure] repeats >= 2")
        for f in figs:
            if f.value is not None:
                f.basis = f"not judged: {why}"
        return row
    labels = list(per)
    logs = np.array([np.log(per[lb][0][:blocks]) for lb in labels])  # (nodes, blocks), equal block counts
    k = critical_z(len(labels), blocks, alpha)
    row.k = k
    centre_all = float(np.median(np.median(logs, axis=1) if blocks >= 3 else logs.mean(axis=1)))
    row.median = math.exp(centre_all)
    by_label = {f.node: f for f in figs}
    sds = []
    for i, lb in enumerate(labels):
        order = [i, *[j for j in range(len(labels)) if j != i]]
        z = float(_statistic(logs[order][None, :, :])[0])
        node_log = float(np.median(logs[i]) if blocks >= 3 else logs[i].mean())
        peers_log = np.median([np.median(logs[j]) if blocks >= 3 else logs[j].mean() for j in order[1:]])
        dev = 100.0 * (math.exp(node_log - peers_log) - 1.0)
        if z:
            sds.append(abs((node_log - peers_log) / z))
        f = by_label[lb]
        f.z, f.deviation_pct = z, dev
        basis = (f"{dev:+.1f}% from the median of {len(labels) - 1} peers, z {z:+.1f} against the critical "
                 f"{k:.1f} (false-flag rate {alpha:.2g} per test), {blocks} blocks per node; within {within:g}%")
        _place(f, placements[lb], f"{case.id} {fig.label}", basis, within, k)
    if sds:
        sd = float(np.median(sds))
        row.band_low, row.band_high = math.exp(centre_all - k * sd), math.exp(centre_all + k * sd)
    return row


def _node_figures(results: Mapping[str, CaseResult | None], fig: FleetFigure
                  ) -> tuple[dict[str, tuple[list[float], bool]], list[NodeFigure]]:
    """Each node's block values of `fig` and whether contended, for the nodes that measured the case, and every
    node's figure (its median, min and max; why not measured)."""
    per: dict[str, tuple[list[float], bool]] = {}
    figs: list[NodeFigure] = []
    for label, r in results.items():
        vals, contended = block_values(r, fig) if r is not None and r.measured else ([], False)
        if vals:
            per[label] = (vals, contended)
        figs.append(NodeFigure(label, float(np.median(vals)) if vals else None,
                               min(vals) if vals else None, max(vals) if vals else None, len(vals),
                               contended=contended,
                               basis="" if vals else ("not measured: " + (r.status if r is not None else
                                                                          "case not in the node's results"))))
    return per, figs


def _place(f: NodeFigure, found: list[tuple[str, str]], what: str, basis: str, within: float, k: float) -> None:
    """Place a node's figure of `what` (case and figure), its deviation and z set: slow or fast when it is both
    past the band (`within`, percent) and past the critical z `k`, a slow contended one not judged, else OK; a
    placement other than OK is added to the node's `found`."""
    dev, z = f.deviation_pct, f.z
    assert dev is not None and z is not None
    far, beyond = abs(dev) > within, abs(z) > k
    if far and beyond and dev > 0:
        if f.contended:
            f.placement, f.basis = NOT_JUDGED, f"slow but contended: not judged ({basis})"
            found.append((NOT_JUDGED, f"{what}: {f.basis}"))
        else:
            f.placement, f.basis = SLOW, basis
            found.append((SLOW, f"{what}: slow, {basis}"))
    elif far and beyond:
        f.placement, f.basis = FAST, basis
        found.append((FAST, f"{what}: fast (suspicious: check its outputs and audits), {basis}"))
    else:
        f.placement = OK
        f.basis = basis + ("" if not (far or beyond) else
                           ": beyond the critical z but within the band" if beyond else
                           f": {abs(dev):.1f}% but not beyond the peers' spread")


def _noisy(case: CaseId, results: Mapping[str, CaseResult | None],
           placements: dict[str, list[tuple[str, str]]]) -> None:
    rcv = {lb: float(r.latency.rcv) for lb, r in results.items()
           if r is not None and r.latency is not None and r.latency.rcv is not None}
    for lb, v in rcv.items():
        peers = [x for other, x in rcv.items() if other != lb]
        if len(peers) < MIN_PEERS:
            continue
        ref = float(np.median(peers))
        noisy_flag = bool(results[lb].latency.noisy)  # type: ignore[union-attr]
        if noisy_flag and v > NOISY_RATIO * ref:
            placements[lb].append((NOISY, f"{case.id}: noisy, robust CV {v:.3f} is {v / ref:.1f}x its "
                                          f"{len(peers)} peers' median {ref:.3f} and over the noise limit"))


# ------------------------------------------------------------------ the fleet certificate
def fleet_settings(spec_path: Any) -> dict[str, Any]:
    """A spec's [fleet] table: within_pct (a number > 0: percent from the peers' median that makes a node slow
    or fast), false_flag_rate (0 < r < 0.5); SpecError naming the file and the key otherwise."""
    from harness.gating.qualify import SpecError, _toml

    table = _toml(spec_path).get("fleet", {})
    where = f"{spec_path}: [fleet]"
    if not isinstance(table, dict):
        raise SpecError(f"{where} must be a table")
    out: dict[str, Any] = {}
    for key, value in table.items():
        if key not in ("within_pct", "false_flag_rate"):
            raise SpecError(f"{where}: unknown key {key!r} (valid: false_flag_rate, within_pct)")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise SpecError(f"{where}: {key} = {value!r} is not a number")
        if key == "within_pct" and not value > 0:
            raise SpecError(f"{where}: within_pct = {value!r} must be above 0")
        if key == "false_flag_rate" and not 0 < value < 0.5:
            raise SpecError(f"{where}: false_flag_rate = {value!r} must lie between 0 and 0.5")
        out[key] = float(value)
    return out


@dataclass
class FleetCertificate:
    """Every node's own certificate (the spec's limits) and its placement against its peers."""

    spec: Any  # harness.gating.qualify.QualifySpec
    node_certificates: dict[str, Any]  # label -> harness.gating.qualify.Certificate | None (nothing came back)
    judgement: FleetJudgement
    burn_in: dict[str, Any] = field(default_factory=dict)  # label -> the node's burn-in (--burn-in with --ray)

    def node_verdict(self, label: str) -> str:
        """QUALIFIED only when the node's certificate passes and its placement is ok; NOT QUALIFIED when either
        failed (or the node was lost); NOT JUDGED when nothing failed but something was not judged."""
        cert = self.node_certificates.get(label)
        place = self.judgement.nodes[label].placement
        spec_verdict = cert.verdict if cert is not None else "FAIL"
        if place in (LOST, WRONG, SLOW, FAST, NOISY) or spec_verdict == "FAIL":
            return "NOT QUALIFIED"
        if place == NOT_JUDGED or spec_verdict != "PASS":
            return "NOT JUDGED"
        return "QUALIFIED"

    @property
    def verdict(self) -> str:
        verdicts = {self.node_verdict(lb) for lb in self.judgement.nodes}
        if not verdicts or "NOT QUALIFIED" in verdicts:
            return "FAIL"
        return "INCONCLUSIVE" if "NOT JUDGED" in verdicts else "PASS"

    @property
    def exit_code(self) -> int:
        from harness.gating.verdicts import EXIT_CLEAN, EXIT_REGRESSION, EXIT_UNJUDGED

        return {"PASS": EXIT_CLEAN, "INCONCLUSIVE": EXIT_UNJUDGED}.get(self.verdict, EXIT_REGRESSION)

    def as_dict(self) -> dict[str, Any]:
        from harness import __version__

        nodes = {}
        for label, place in self.judgement.nodes.items():
            cert = self.node_certificates.get(label)
            failed = [f"spec: {r.case_id} {r.requirement}: {r.reason}" for r in (cert.requirements if cert else ())
                      if r.status == "FAIL" and r.requirement not in ("golden_outputs",)]  # wrong results: placed
            extra = {}
            if label in self.burn_in:
                b = self.burn_in[label]
                extra["burn_in"] = {"rounds": b.get("rounds"), "trends": [
                    f"{t['case_id']}: {x['text']}" for t in b.get("trends", []) for x in t["trends"] if x["found"]]}
            nodes[label] = {**place.as_dict(), **extra, "verdict": self.node_verdict(label),
                            "spec_verdict": cert.verdict if cert is not None else None,
                            "spec_passed": sum(r.passed for r in cert.requirements) if cert is not None else 0,
                            "spec_total": len(cert.requirements) if cert is not None else 0,
                            "results_sha256": cert.results_sha256 if cert is not None else None}
            nodes[label]["reasons"] = [*nodes[label]["reasons"], *failed]
        return {"certificate": "inference-harness fleet qualification", "verdict": self.verdict,
                "spec": {"name": self.spec.name, "path": str(self.spec.path), "sha256": self.spec.sha256},
                "nodes": nodes, "fleet": self.judgement.as_dict(), "harness_version": __version__}
