"""Re-score stored `harness gate-check --ab` rounds (every block's raw samples are in each results.json) with the
current judge: the verdicts per injected level.

    python -m harness_suites.benchmarks.ab_rescore OUT/runs [MORE ...]
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

from harness.gating.ab import judge_ab
from harness.results.schema import AbBlock


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


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
