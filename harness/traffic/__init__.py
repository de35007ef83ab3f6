"""Traffic as input (`--traffic FILE`): shape mixes, arrivals and traces as a seeded schedule, and the open-loop
replay timed from intended send times (docs/traffic.md)."""
