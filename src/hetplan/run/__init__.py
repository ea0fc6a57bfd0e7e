"""Executing plans with torch.distributed and measuring them.

- :mod:`hetplan.run.launch`: ``launch_local`` (local ranks under torch's elastic agent),
  ``RankContext``, ``RunError``.
- :mod:`hetplan.run.train`: ``run_plan``, ``measure_plan``, ``predicted_iteration_s``.
- :mod:`hetplan.run.measure`: ``Measurement``, ``RankFigures``, ``save_measurement``.
- :mod:`hetplan.run.commands`: ``torchrun_commands`` for several nodes.
- :mod:`hetplan.run.model`: ``ModelSource``, ``ZooSource``, ``MLPSource``.

This module imports no torch (the launcher's agent process imports it before torch).
"""

from hetplan.run.launch import RankContext, RunError, launch_local

__all__ = ["RankContext", "RunError", "launch_local"]
