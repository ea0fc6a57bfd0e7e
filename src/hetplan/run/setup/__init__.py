"""What each rank holds: its ranks' layout, layers (deferred init), tensor-parallel shards,
data, precision, checkpoints."""
