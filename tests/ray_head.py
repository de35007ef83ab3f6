"""The head node of a test's local Ray cluster: `ray.cluster_utils.Cluster(initialize_head=True,
head_node_args=RAY_HEAD)` (no import of Ray or of a plugin here)."""

# A killed node is seen dead in ~1.5 s, not Ray's ~15 s (a health check every 3 s, dead after 5 failed): a shard
# sent to a node the test killed waits for that. A live node's check still has Ray's 10 s to answer.
RAY_HEAD = {"num_cpus": 1, "_system_config": {"health_check_period_ms": 500, "health_check_failure_threshold": 3}}
