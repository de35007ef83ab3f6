"""Replay a traffic once, open loop, against one configuration (or against nothing) and print its latency and
send-time error figures (docs/traffic.md).

    python tools/replay_once.py --traffic specs/traffic/fixed-1000.toml                     # no server: the timer
    python tools/replay_once.py --traffic T.toml --model bert-mini --runtime ort-cpu [--batcher max=8,wait=2]
        [--rate R] [--requests N] [--threads N]

Without --model each call returns at once, so the figures are the replay's own: its send-time error at the
traffic's rate is the timer's and the scheduler's lateness on this machine.
"""

from __future__ import annotations

import argparse
import json
import sys

from harness.errors import UsageError
from harness.traffic.replay import RealClock, latency_figures, replay
from harness.traffic.spec import load_traffic


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--traffic", required=True)
    p.add_argument("--model")
    p.add_argument("--runtime", default="ort-cpu")
    p.add_argument("--precision", default="fp32")
    p.add_argument("--variant", default="base")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batcher", default="none")
    p.add_argument("--rate", type=float, default=None)
    p.add_argument("--requests", type=int, default=None)
    args = p.parse_args(argv)
    try:
        traffic = load_traffic(args.traffic)
        n = args.requests or traffic.requests
        rate = args.rate or traffic.natural_rate
        if args.model is None:
            run = replay(traffic.schedule(rate=rate, requests=n), lambda rs: None, RealClock())
            where = "no server (the replay's own timing)"
        else:
            from harness.artifacts.cache import default_cache_dir
            from harness.model import get_model
            from harness.plugins import load_plugins
            from harness.workloads.capacity.live import live_candidates

            load_plugins()
            cands, close = live_candidates(get_model(args.model), traffic, [args.runtime], [args.precision],
                                           [args.variant], [args.threads], [args.batcher], default_cache_dir())
            try:
                if cands[0].error:
                    raise UsageError(cands[0].error)
                run = cands[0].probe(rate, n, traffic.seed)
            finally:
                close()
            where = cands[0].name
    except UsageError as exc:
        print(f"replay_once: error: {exc}", file=sys.stderr)
        return 2
    figs = latency_figures(run, skip=0.1)
    print(json.dumps({"against": where, "traffic": traffic.describe(), "rate": rate, "requests": run.requests,
                      "completed_per_s": round(run.throughput, 1), "waited_for": len(run.send_errors()),
                      "latency_ms": {k: v for k, v in figs.items() if not k.startswith("send")},
                      "send_error_ms": {k[11:]: v for k, v in figs.items() if k.startswith("send")}}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
