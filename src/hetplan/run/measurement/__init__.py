"""What a run measured, from its ranks' results: step times, traces, energy checked, and what is
written back to the store."""
