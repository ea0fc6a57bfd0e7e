"""Run a rank's actions of the schedule: compute, point-to-point, collectives, servers, the step
clock."""
