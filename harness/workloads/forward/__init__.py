"""The forward-pass matrix workload: one forward pass per timed call; LoadGen scenarios and end-to-end steps are its parts."""
