"""Unit conversions. Internally hetplan uses SI: seconds, bytes, FLOP/s, bytes/s, watts."""

KB = 1e3
MB = 1e6
GB = 1e9
GiB = 2.0**30
MiB = 2.0**20
TERA = 1e12
US = 1e-6


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
