"""Traffic as input (`--traffic FILE`): shape mixes, arrival processes and recorded traces, turned into a seeded,
replayable schedule of requests (spec.py, trace.py), and the open-loop replay that measures each request's
latency from its intended send time (replay.py). docs/traffic.md."""
