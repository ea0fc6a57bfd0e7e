"""What a rank reads while it runs: energy counters, the allocator's and the tensor counter's
peak bytes, power points."""
