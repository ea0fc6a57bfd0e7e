"""Charts for reports (matplotlib, Agg backend; no display needed).

- :mod:`hetplan.report.charts`: ``scatter_chart`` (predicted vs measured), ``gantt_chart``
  (simulated and measured timelines side by side), ``pareto_chart`` (time vs energy).
"""
