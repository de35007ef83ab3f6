"""The A/B workload: two sides of one case activated in the same worker and measured interleaved (`harness ab`)."""
