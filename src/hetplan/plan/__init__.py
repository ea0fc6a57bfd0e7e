"""Plans: the plan data type, and the search for the best plan."""

from hetplan.plan.types import ModelRef, PipelinePlan, Plan, StagePlan

__all__ = ["ModelRef", "PipelinePlan", "Plan", "StagePlan"]
