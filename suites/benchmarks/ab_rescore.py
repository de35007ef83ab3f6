"""Re-score kept A/B blocks with the current judge.

    python -m harness_suites.benchmarks.ab_rescore OUT/runs [MORE ...]
        stored `harness gate-check --ab` rounds (every block's raw samples are in each results.json): the verdicts
        per injected level
    python -m harness_suites.benchmarks.ab_rescore --underload OUT [--widen 0,0.02,0.05,0.1]
        the blocks kept by ab_underload (OUT/CONDITION.jsonl): per condition and planted slowdown, today's rule
        (contended pairs left out: unjudged when fewer than half are clean) against the rule that judges large
        effects under load (harness.gating.ab.judge_under_load) at each allowance for contention, on the same
        blocks; and the A/A estimates over all pairs (what contention did to them)
    python -m harness_suites.benchmarks.ab_rescore --underload OUT --threshold 0.05,0.1,0.2 [--widen 0.03]
        the same blocks judged at each threshold (--ab-min-effect; bisect's median gate) with the allowance given
        (the first of --widen, default the adopted UNDER_LOAD_WIDEN), the pass under load on at every threshold:
        how often each planted slowdown is passed (a false pass) and how often A/A is (the pass's power)
"""

from __future__ import annotations

import json
import math
import sys
from collections import Counter
from pathlib import Path

import numpy as np

from harness.gating import ab as ab_module
from harness.gating.ab import _pairs, all_pairs_ratio, judge_ab
from harness.results.schema import AbBlock
from harness.results.stored import BlockContention


def main(folders: list[str]) -> int:
    for folder in folders:
        counts: dict[float, Counter[str]] = {}
        for path in sorted(Path(folder).glob("*/results.json")):
            for case in json.loads(path.read_text())["cases"]:
                ab = case.get("ab")
                if not ab:
                    continue
                blocks = [AbBlock.from_dict(b) for b in ab["blocks"]]
                verdict = judge_ab(blocks, ab["min_effect"], ab["confidence"]).verdict.value
                counts.setdefault(ab["inject"], Counter())[verdict] += 1
        for level in sorted(counts):
            c = counts[level]
            n = sum(c.values())
            alarms = c["regressed"] + c["improved"]
            figure = f"false alarms {alarms}/{n}" if level == 0 else f"power {c['regressed'] / n:.0%}"
            print(f"{folder}: B slowed by {level:.0%}: {n} measurements, {dict(c)}: {figure}")
    return 0


def _blocks(m: dict) -> list[AbBlock]:
    # a block kept as its median: the paired test reads nothing else of a block
    return [AbBlock(b["side"], b["pair"], [max(1, int(round(b["median_ns"])))],
                    BlockContention.from_dict(b["contention"]) if b["contention"] else None, b["activation"])
            for b in m["blocks"]]


def underload(folder: str, widens: list[float], passes: tuple[bool, ...] = (True, False)) -> dict:
    out: dict = {"conditions": []}
    for path in sorted(Path(folder).glob("*.jsonl")):
        name = path.stem
        info = json.loads((path.parent / f"{name}.json").read_text()) if (path.parent / f"{name}.json").exists() \
            else {}
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        cond = {"condition": name, "psi_some_share": info.get("psi_some_share"), "wall_s": info.get("wall_s"),
                "levels": {}}
        for level in sorted({r["level"] for r in rows}):
            ms = [_blocks(r) for r in rows if r["level"] == level]
            contended = [sum(1 for p in _pairs(b)[0].values() if any(x.contention and x.contention.contended
                                                                      for x in p.values())) / max(1, len(_pairs(b)[0]))
                         for b in ms]
            today = Counter(judge_ab(b, under_load=False).verdict.value for b in ms)
            rules = {}
            for w in widens:
                for p in passes:
                    ab_module.PASS_UNDER_LOAD = p
                    rules[f"widen {w:g}{'' if p else ', no pass'}"] = dict(
                        Counter(judge_ab(b, widen=w).verdict.value for b in ms))
            ab_module.PASS_UNDER_LOAD = True
            est = [all_pairs_ratio(_pairs(b)[0], 0.99)[0] for b in ms]
            logs = np.array([math.log(e.ratio) for e in est if e is not None])
            cond["levels"][str(level)] = {
                "rows": len(ms), "contended_pair_share_mean": round(float(np.mean(contended)), 3),
                "rows_mostly_contended": sum(c > 0.5 for c in contended), "today": dict(today), "new": rules,
                "all_pairs_ratio": {"median": round(float(np.exp(np.median(logs))), 4),
                                    "p1": round(float(np.exp(np.quantile(logs, 0.01))), 4),
                                    "p99": round(float(np.exp(np.quantile(logs, 0.99))), 4)} if logs.size else None}
        out["conditions"].append(cond)
    return out


def at_thresholds(folder: str, thresholds: list[float], widen: float) -> dict:
    """Per condition, planted slowdown and threshold t: the verdicts of judge_ab(min_effect=t, widen) with the
    pass under load on at every t (PASS_UNDER_LOAD_MAX lifted), so its false passes are counted where it is off."""
    out: dict = {"widen": widen, "thresholds": thresholds, "conditions": []}
    saved = ab_module.PASS_UNDER_LOAD_MAX
    ab_module.PASS_UNDER_LOAD_MAX = max(thresholds)
    try:
        for path in sorted(Path(folder).glob("*.jsonl")):
            rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            cond: dict = {"condition": path.stem, "levels": {}}
            for level in sorted({r["level"] for r in rows}):
                ms = [_blocks(r) for r in rows if r["level"] == level]
                cond["levels"][str(level)] = {f"{t:g}": dict(Counter(_verdict(judge_ab(b, min_effect=t, widen=widen))
                                                                     for b in ms))
                                              for t in thresholds}
            out["conditions"].append(cond)
    finally:
        ab_module.PASS_UNDER_LOAD_MAX = saved
    return out


def _verdict(v) -> str:
    """The verdict, a pass under load apart from a pass on the clean pairs (over half of them clean)."""
    return "pass under load" if v.verdict.value == "pass" and v.under_load else v.verdict.value


def threshold_table(doc: dict) -> str:
    """at_thresholds as a Markdown table: per condition and planted slowdown, r / i / p / u at each threshold (p:
    passed under load, then in brackets passed on the clean pairs where over half were clean)."""
    ts = [f"{t:g}" for t in doc["thresholds"]]
    lines = ["| condition | B slowed | " + " | ".join(f"t {float(t):.0%}: r / i / p (clean) / u" for t in ts) + " |",
             "| --- " * (2 + len(ts)) + "|"]
    for cond in doc["conditions"]:
        for level, d in cond["levels"].items():
            cells = []
            for t in ts:
                c = d[t]
                u = c.get("inconclusive", 0) + c.get("noise", 0)
                cells.append(f"{c.get('regressed', 0)} / {c.get('improved', 0)} / {c.get('pass under load', 0)} "
                             f"({c.get('pass', 0)}) / {u}")
            lines.append(f"| {cond['condition']} | {float(level):.0%} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def table(doc: dict) -> str:
    """The re-scored verdicts as a Markdown table: per condition and planted slowdown, today's rule and each rule
    measured (r regressed, i improved, p pass, u not judged: inconclusive or noise)."""
    def cell(c: dict) -> str:
        u = c.get("inconclusive", 0) + c.get("noise", 0)
        return f"{c.get('regressed', 0)} r / {c.get('improved', 0)} i / {c.get('pass', 0)} p / {u} u"

    names = None
    lines = []
    for cond in doc["conditions"]:
        for level, d in cond["levels"].items():
            if names is None:
                names = list(d["new"])
                lines += ["| condition (PSI some) | B slowed | rows | contended pairs | all-pairs B/A median [1%, 99%] "
                          "| today | " + " | ".join(names) + " |", "| --- " * (6 + len(names)) + "|"]
            est = d["all_pairs_ratio"] or {}
            psi = cond.get("psi_some_share")
            lines.append(f"| {cond['condition']} ({'?' if psi is None else f'{psi:.0%}'}) | {float(level):.0%} | "
                         f"{d['rows']} | {d['contended_pair_share_mean']:.0%} | {est.get('median')} "
                         f"[{est.get('p1')}, {est.get('p99')}] | {cell(d['today'])} | "
                         + " | ".join(cell(d["new"][n]) for n in names) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    argv = sys.argv[1:]
    if argv and argv[0] == "--underload":
        widens = [0.0, 0.02, 0.05, 0.10]
        if "--widen" in argv:
            widens = [float(x) for x in argv[argv.index("--widen") + 1].split(",")]
        if "--threshold" in argv:
            ts = [float(x) for x in argv[argv.index("--threshold") + 1].split(",")]
            w = widens[0] if "--widen" in argv else ab_module.UNDER_LOAD_WIDEN
            doc = at_thresholds(argv[1], ts, w)
            Path(argv[1], "rescore-thresholds.json").write_text(json.dumps(doc, indent=1))
            print(threshold_table(doc))
            sys.exit(0)
        doc = underload(argv[1], widens)
        Path(argv[1], "rescore.json").write_text(json.dumps(doc, indent=1))
        print(table(doc))
        sys.exit(0)
    sys.exit(main(argv))
