"""hetplan.report."""
