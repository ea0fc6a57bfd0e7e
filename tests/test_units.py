"""The printed-figure formatters: expected strings worked out by hand."""

from __future__ import annotations

import pytest

from hetplan.units import (
    fmt_bytes,
    fmt_dollars,
    fmt_duration,
    fmt_joules,
    fmt_percent,
    plural,
)


@pytest.mark.parametrize(
    ("n", "word", "many", "expected"),
    [
        (0, "node", None, "0 nodes"),
        (1, "node", None, "1 node"),
        (2, "node", None, "2 nodes"),
        (1, "stage", None, "1 stage"),
        (16, "layer", None, "16 layers"),
        (1, "batch", "batches", "1 batch"),
        (3, "batch", "batches", "3 batches"),
        (-1, "step", None, "-1 steps"),
    ],
)
def test_plural(n: int, word: str, many: str | None, expected: str) -> None:
    assert plural(n, word, many) == expected


@pytest.mark.parametrize(
    ("fraction", "digits", "sign", "expected"),
    [
        (0.25, 0, False, "25%"),
        (0.996, 0, False, "100%"),  # 99.6 rounds up
        (0.994, 1, False, "99.4%"),
        (-0.3, 0, False, "-30%"),
        (-0.004, 0, False, "0%"),  # -0.4% rounds to zero: no "-0%"
        (-0.0004, 1, False, "0.0%"),  # -0.04% rounds to zero: no "-0.0%"
        (-0.0, 0, False, "0%"),
        (0.0, 0, True, "0%"),  # zero has no sign
        (-0.004, 0, True, "0%"),
        (-0.004, 1, True, "-0.4%"),
        (0.004, 1, True, "+0.4%"),
        (0.12, 0, True, "+12%"),
        (-0.12, 0, True, "-12%"),
    ],
)
def test_fmt_percent_never_prints_negative_zero(
    fraction: float, digits: int, sign: bool, expected: str
) -> None:
    assert fmt_percent(fraction, digits, sign=sign) == expected


@pytest.mark.parametrize(
    ("joules", "expected"),
    [
        (0.0, "0 J"),
        (-0.0, "0 J"),
        (0.004, "4.00 mJ"),
        (0.0155, "15.5 mJ"),
        (1.0, "1.00 J"),
        (4.1449, "4.14 J"),
        (12.345, "12.3 J"),  # 3 significant digits
        (253.4, "253 J"),
        (999.96, "1.00 kJ"),  # rounds to 1000 J: the next unit up
        (1234.5, "1.23 kJ"),
        (5.3e6, "5.30 MJ"),
        (2.5e9, "2.50 GJ"),
        (3e-6, "3.00 uJ"),
    ],
)
def test_fmt_joules(joules: float, expected: str) -> None:
    assert fmt_joules(joules) == expected


@pytest.mark.parametrize(
    ("usd", "expected"),
    [
        (0.0, "$0.00"),
        (0.000123, "$0.000123"),
        (0.0138, "$0.0138"),
        (0.5, "$0.500"),
        (0.9996, "$1.00"),
        (1234.567, "$1,234.57"),
    ],
)
def test_fmt_dollars(usd: float, expected: str) -> None:
    assert fmt_dollars(usd) == expected


def test_fmt_bytes_is_decimal() -> None:
    assert fmt_bytes(80 * 2**30) == "85.90 GB"  # an "80 GB" HBM card: 80 GiB
    assert fmt_bytes(1e9) == "1.00 GB"
    assert fmt_bytes(999) == "999 B"


@pytest.mark.parametrize(
    ("seconds", "expected", "short"),
    [
        (0.69512, "695.12 ms", "695.12 ms"),  # below a minute: as fmt_seconds prints it
        (59.9, "59.900 s", "59.900 s"),
        (60.0, "60 s (1.00 min)", "1.00 min"),
        (3479.077, "3479 s (58.0 min)", "58.0 min"),
        (3599.9, "3600 s (1.00 h)", "1.00 h"),  # rounds to an hour: the next unit up
        (5373.858, "5374 s (1.49 h)", "1.49 h"),
        (359_000.0, "359000 s (99.7 h)", "99.7 h"),
        (360_000.0, "360000 s (4.17 d)", "4.17 d"),
    ],
)
def test_fmt_duration(seconds: float, expected: str, short: str) -> None:
    assert fmt_duration(seconds) == expected
    assert fmt_duration(seconds, short=True) == short
