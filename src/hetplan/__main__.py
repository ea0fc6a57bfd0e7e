"""``python -m hetplan``: the same as the ``hetplan`` command."""

from hetplan.cli.main import main

main()
