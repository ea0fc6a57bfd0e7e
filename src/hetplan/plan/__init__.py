"""Plans: the search for the best plan (the plan data type is :mod:`hetplan.planspec`)."""

from hetplan.planspec.plan import ModelRef, PipelinePlan, Plan, StagePlan

__all__ = ["ModelRef", "PipelinePlan", "Plan", "StagePlan"]
