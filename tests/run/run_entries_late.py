"""A rank entry whose import never finishes on rank 1: that rank never joins the group."""

from __future__ import annotations

import os
import time
from typing import Any

if os.environ.get("RANK") == "1":
    time.sleep(120)


def joined(ctx: Any, payload: dict[str, Any]) -> int:
    return int(ctx.rank)
