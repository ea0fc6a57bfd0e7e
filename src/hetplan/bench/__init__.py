"""The validation suite: predicted against measured iteration times, selection accuracy and
plan quality on the local machine (``hetplan bench``).

- :mod:`hetplan.bench.suite`: the models, clusters and strategies of the quick and full suites.
- :mod:`hetplan.bench.runner`: ``run_suite`` profiles, predicts, plans and measures.
- :mod:`hetplan.bench.rounds`: every plan of a cluster measured in interleaved rounds.
- :mod:`hetplan.bench.stats`: ``summarize`` (median/p90 time and memory error, selection
  accuracy, speedups).
- :mod:`hetplan.bench.report`: ``write_report`` (``report.md``, ``report.html``, figures).

The package itself imports nothing: ``hetplan bench --help`` must not load numpy or torch.

"""
