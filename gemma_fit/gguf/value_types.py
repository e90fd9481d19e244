"""The value types of GGUF metadata: one definition for the reader (parse) and the file sizing (layout)."""

from __future__ import annotations

from enum import IntEnum


class GGUFValueType(IntEnum):
    """Value types of GGUF metadata (the GGUF v3 spec; the same numbers as gguf.GGUFValueType).
    Own copy so that sizing or reading a file does not import the gguf package and numpy."""

    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


# The fixed-size types: struct format (little-endian, without the "<") and size in bytes.
SCALAR_FORMATS: dict[int, tuple[str, int]] = {
    GGUFValueType.UINT8: ("B", 1), GGUFValueType.INT8: ("b", 1),
    GGUFValueType.UINT16: ("H", 2), GGUFValueType.INT16: ("h", 2),
    GGUFValueType.UINT32: ("I", 4), GGUFValueType.INT32: ("i", 4), GGUFValueType.FLOAT32: ("f", 4),
    GGUFValueType.BOOL: ("B", 1),
    GGUFValueType.UINT64: ("Q", 8), GGUFValueType.INT64: ("q", 8), GGUFValueType.FLOAT64: ("d", 8),
}

_KNOWN = frozenset(GGUFValueType)


def type_name(vtype: int) -> str:
    """The spec's name of a value type ("UINT32"); the number itself for an id the spec does not have."""
    return GGUFValueType(vtype).name if vtype in _KNOWN else str(vtype)
