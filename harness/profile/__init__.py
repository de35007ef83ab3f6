"""Where the time goes and how far from the machine's limit: FLOPs and bytes per node, the machine's ceilings, the roofline."""
