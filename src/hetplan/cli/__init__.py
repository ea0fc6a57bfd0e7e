"""hetplan.cli."""
