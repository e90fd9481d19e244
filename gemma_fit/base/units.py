"""Unit formatting for output. Inside, sizes are integer bytes; labels say which unit is shown."""

from __future__ import annotations

MIB = 1024**2
GIB = 1024**3


def fmt_bytes(n: int) -> str:
    """Binary units, labelled: 1536 MiB -> '1.50 GiB'."""
    if abs(n) >= GIB:
        return f"{n / GIB:.2f} GiB"
    if abs(n) >= MIB:
        return f"{n / MIB:.1f} MiB"
    return f"{n / 1024:.1f} KiB"
