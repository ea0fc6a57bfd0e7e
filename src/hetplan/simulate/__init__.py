"""Event-driven simulation of schedules: timelines, iteration time, per-device breakdown."""

from hetplan.simulate.engine import compile_schedule, run_times, simulate
from hetplan.simulate.timeline import DeviceTime, Timeline, summarize

__all__ = ["DeviceTime", "Timeline", "compile_schedule", "run_times", "simulate", "summarize"]
