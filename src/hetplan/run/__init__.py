"""Executing plans with torch.distributed and measuring them.

- :mod:`hetplan.run.launch.spawn`: ``launch_local`` (local ranks under torch's elastic agent),
  ``launch_node`` (one node's ranks of a run over several), ``RankContext``, ``RunError``.
- :mod:`hetplan.run.train`: ``run_plan``, ``run_node``, ``measure_plan``, ``Training``.
- :mod:`hetplan.run.measurement.measure`: ``Measurement``, ``RankFigures``, ``save_measurement``.
- :mod:`hetplan.run.launch.commands`: each node's ranks and command for several nodes.
- :mod:`hetplan.run.tune`: measured selection (``hetplan tune``).
- :mod:`hetplan.run.setup.model`: ``ModelSource``, ``ZooSource``, ``MLPSource``.

This module imports no torch (the launcher's agent process imports it before torch).
"""

from hetplan.run.launch.spawn import RankContext, RunError, launch_local

__all__ = ["RankContext", "RunError", "launch_local"]
