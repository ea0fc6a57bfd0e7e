"""hetplan.simulate."""
