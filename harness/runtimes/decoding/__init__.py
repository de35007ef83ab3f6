"""The decoder capability of runtimes: a causal LM stepped with its KV cache (torch eager, ONNX Runtime)."""
