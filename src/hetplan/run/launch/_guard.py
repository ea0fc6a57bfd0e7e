"""Imported first by the ranks' forkserver (its preload): it dies with the agent that started
it, so that no forkserver outlives a killed run (see
:func:`hetplan.run.launch.spawn.die_with_parent`).
Not an API."""

from hetplan.run.launch.spawn import die_with_parent

die_with_parent()
