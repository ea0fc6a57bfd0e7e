"""hetplan.run."""
