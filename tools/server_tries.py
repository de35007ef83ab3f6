"""Every LoadGen Server test of one or more runs, one line each, with how much of the default bound's allowance the
model used (docs/scenarios.md, "The Server bound"): the data to judge the default bound on.

    python tools/server_tries.py RUN/results.json [RUN2/results.json ...]

Per test: the case, the search's try (a `+` marks a try's longer re-run for early stopping), the target QPS,
LoadGen's verdict, its p99, the bound, the issuing loop's p99 in that bound, and `used`: (p99 - loop p99) /
(bound - loop p99), the share of the model's allowance (5 x its single-stream p99, or 10 x its median call) that
its test took; over 1.00 is over the bound. Last, per run: how many searches had a VALID try.
"""

from __future__ import annotations

import sys

from harness.errors import HarnessError
from harness.results import load_results


def lines(path: str) -> list[str]:
    run = load_results(path)
    out, searches, valid = [], 0, 0
    for case in run.cases:
        server = [r for r in case.scenarios if r.scenario == "server"]
        if not server:
            continue
        searches += 1
        valid += any(r.result == "VALID" for r in server)
        seen: set[int | None] = set()
        for r in server:
            p99, bound, loop = r.latency_ms.get("p99"), r.target_latency_ms, r.loop_p99_ms
            used = ""
            if p99 is not None and bound and bound > (loop or 0.0):
                used = f"used {(p99 - (loop or 0.0)) / (bound - (loop or 0.0)):.2f}"
            step = "-" if r.search_step is None else f"{r.search_step}{'+' if r.search_step in seen else ''}"
            seen.add(r.search_step)
            why = "; ".join(x for x in r.reasons if x.endswith("not satisfied")) or r.error or ""
            out.append(f"{case.case.id} try {step}: {r.target_qps or 0:g} QPS {r.result} p99 {_ms(p99)}, "
                       f"bound {_ms(bound)}, loop p99 {_ms(loop)}, {used or 'used -'}"
                       + (f" ({why})" if why and r.result != "VALID" else ""))
    out.append(f"{path}: {valid} of {searches} Server search(es) VALID")
    return out


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.3g} ms"


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python tools/server_tries.py RUN/results.json [RUN2/results.json ...]", file=sys.stderr)
        return 2
    try:
        for path in argv:
            print("\n".join(lines(path)))
    except (HarnessError, OSError) as exc:
        print(f"server_tries: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
