"""The generation workload: greedy decoding with a KV cache, timed per step (TTFT, TPOT, tokens/s), and
greedy-token conformance against the PyTorch FP32 reference."""
