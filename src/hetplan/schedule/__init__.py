"""hetplan.schedule."""
