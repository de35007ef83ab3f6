"""Capacity under an SLO (search.py), the deployment recommender over configurations (recommend.py) and the
binding of a matrix runtime to the traffic replay (live.py). Not a matrix workload: `harness recommend` drives it
in-process (docs/recommend.md)."""
