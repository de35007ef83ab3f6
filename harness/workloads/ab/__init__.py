"""The A/B workload: two sides of one case measured interleaved in the same worker (`harness ab`)."""
