"""Charts and pages for reports.

- :mod:`hetplan.report.charts`: ``scatter_chart`` (predicted vs measured) and ``pareto_chart``
  (time vs energy) as PNG (matplotlib, Agg backend; no display needed).
- :mod:`hetplan.report.gantt`: the one Gantt chart of traces (plotly): the plan page's
  simulated iteration, and the simulated against the executed step of ``train`` and ``bench``.
- :mod:`hetplan.report.plan_page`: the plan page (plotly, one self-contained HTML file).
"""
