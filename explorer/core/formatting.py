"""Numbers as the app, the reports and the tables write them for people."""

from __future__ import annotations


def pct(value: float | None, digits: int = 1, unit: str = " %") -> str:
    """A fraction as a percentage: `pct(0.8123)` is "81.2 %"; "–" for a value that is missing."""
    return "–" if value is None else f"{100 * value:.{digits}f}{unit}"


def rate(value: float) -> str:
    """A learning rate or a decay as people write it: 5e-4, 0.05, 1e-3."""
    mantissa, exponent = f"{value:e}".split("e")
    return f"{float(mantissa):g}e{int(exponent)}" if value and abs(value) < 0.01 else f"{value:g}"
