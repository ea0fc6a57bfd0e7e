"""Unit conversions and the formatters every printed figure goes through.

Internally hetplan uses SI: seconds, bytes, FLOP/s, bytes/s, watts. Printed byte counts are
decimal (1 GB = 10^9 bytes, as spec sheets use), never binary GiB.
"""

from __future__ import annotations

import math

KB = 1e3
MB = 1e6
GB = 1e9
GiB = 2.0**30
MiB = 2.0**20
TERA = 1e12
US = 1e-6

BYTES_NOTE = "decimal units, 1 GB = 10^9 bytes"
"""Said once per output that prints byte figures."""


def gbit_per_s(x: float) -> float:
    """Gigabits per second to bytes per second."""
    return x * 1e9 / 8.0


def fmt_bytes(n: float) -> str:
    """Human-readable byte count (decimal units, as spec sheets use)."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n:.0f} B"


def fmt_seconds(s: float) -> str:
    """Human-readable duration."""
    if s >= 1.0:
        return f"{s:.3f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.1f} us"


_LONG_UNITS = (("d", 86400.0, 360000.0), ("h", 3600.0, 3600.0), ("min", 60.0, 60.0))
"""(unit, seconds, from): hours up to 100 h, where days take over ("99.9 h", "4.17 d")."""


def fmt_duration(s: float, *, short: bool = False) -> str:
    """A duration a person reads at a glance: :func:`fmt_seconds` below a minute, else whole
    seconds beside minutes, hours or days with 3 significant digits (``"3479 s (58.0 min)"``);
    ``short`` keeps the human unit alone (``"58.0 min"``) where room is scarce (table cells)."""
    rounded = float(f"{s:.3g}")  # first: 3599.9 s rounds to 3600 s, printed as 1.00 h
    if not math.isfinite(s) or rounded < 60.0:
        return fmt_seconds(s)
    unit, scale = next((u, scale) for u, scale, start in _LONG_UNITS if rounded >= start)
    human = f"{_significant(rounded / scale, 3)} {unit}"
    return human if short else f"{s:.0f} s ({human})"


def plural(n: int, word: str, plural: str | None = None) -> str:
    """``n`` and ``word`` in agreement: ``plural(1, "node")`` -> ``"1 node"``, ``plural(2,
    "node")`` -> ``"2 nodes"``; ``plural`` for irregular words (``"1 device(s)"`` never)."""
    many = plural if plural is not None else word + "s"
    return f"{n} {word if n == 1 else many}"


def fmt_percent(fraction: float, digits: int = 0, *, sign: bool = False) -> str:
    """``fraction`` (0.25 = 25%) as a percentage with ``digits`` decimals; ``sign`` prefixes
    ``+`` to positive values. A value that rounds to zero prints as ``0%`` (never ``-0%``)."""
    if not math.isfinite(fraction):
        return f"{100 * fraction}%"
    text = f"{100 * fraction:.{digits}f}"
    if float(text) == 0.0:
        return f"{0.0:.{digits}f}%"
    return ("+" if sign and fraction > 0 else "") + text + "%"


_ENERGY_UNITS = (("GJ", 1e9), ("MJ", 1e6), ("kJ", 1e3), ("J", 1.0), ("mJ", 1e-3), ("uJ", 1e-6))


def _significant(x: float, digits: int) -> str:
    """``x`` (not zero) with ``digits`` significant digits, fixed-point (trailing zeros kept)."""
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(x))))
    return f"{x:.{decimals}f}"


def fmt_joules(j: float) -> str:
    """Energy with 3 significant digits and a unit that keeps the figure readable:
    ``fmt_joules(1234.5)`` -> ``"1.23 kJ"``, ``fmt_joules(0.004)`` -> ``"4.00 mJ"``."""
    if not math.isfinite(j):
        return f"{j} J"
    rounded = float(f"{j:.3g}")  # first: 999.96 J rounds to 1000 J, printed as 1.00 kJ
    if rounded == 0.0:
        return "0 J"
    for unit, scale in _ENERGY_UNITS:
        if abs(rounded) >= scale:
            return f"{_significant(rounded / scale, 3)} {unit}"
    unit, scale = _ENERGY_UNITS[-1]
    return f"{_significant(rounded / scale, 3)} {unit}"


def fmt_dollars(usd: float) -> str:
    """US dollars: cents from one dollar up (``$1,234.57``), else 3 significant digits
    (``$0.0138``, ``$0.000123``)."""
    if not math.isfinite(usd):
        return f"${usd}"
    rounded = float(f"{usd:.3g}")
    if rounded == 0.0:
        return "$0.00"
    if abs(rounded) >= 1.0:
        return f"${usd:,.2f}"
    return f"${_significant(rounded, 3)}"
