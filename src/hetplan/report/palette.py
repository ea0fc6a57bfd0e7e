"""Colours of the action kinds, one palette for the Gantt charts (plotly) and the other
charts (matplotlib), so that a kind looks the same everywhere (seaborn's "deep" palette)."""

KIND_COLORS = {
    "fwd": "#4c72b0",
    "bwd": "#dd8452",
    "optimizer": "#55a868",
    "send": "#8172b3",
    "recv": "#937860",
    "allreduce": "#c44e52",
    "tie": "#da8bc3",
    "ps_push": "#da8bc3",
    "ps_pull": "#64b5cd",
}
