"""Where the suite ran: CPU, cores, torch, and how loaded the machine was."""

from __future__ import annotations

import os
import platform
from pathlib import Path

import torch


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_info(when: str) -> dict[str, str]:
    """CPU model, core count, torch version and the 1/5/15-minute load average ``when``."""
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return {
        "cpu": _cpu_name(),
        "cores": str(os.cpu_count()),
        "torch": torch.__version__,
        "python": platform.python_version(),
        f"load_{when}": load,
    }
