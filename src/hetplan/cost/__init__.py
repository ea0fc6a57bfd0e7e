"""Cost models: pure functions of numbers returning seconds, bytes and watts."""
