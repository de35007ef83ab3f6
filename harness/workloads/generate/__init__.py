"""The generation workload: greedy decoding with a KV cache, timed per step (TTFT, TPOT, tokens/s)."""
