"""hetplan.profile."""
