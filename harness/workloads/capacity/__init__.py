"""Capacity under an SLO (search.py), the recommender (recommend.py) and a matrix runtime behind the replay
(live.py); driven in-process by `harness recommend`, not a matrix workload (docs/recommend.md)."""
