"""What the global options (--model-db, --hardware-db) set for the command that runs after them."""

from __future__ import annotations

from pathlib import Path

_extra: dict[str, tuple[Path, ...]] = {"model_db": (), "hardware_db": ()}


def set_extra_dirs(model_db: tuple[Path, ...], hardware_db: tuple[Path, ...]) -> None:
    _extra["model_db"], _extra["hardware_db"] = model_db, hardware_db


def model_dirs() -> tuple[Path, ...]:
    """The extra model database folders (--model-db), in the order given."""
    return _extra["model_db"]


def hardware_dirs() -> tuple[Path, ...]:
    """The extra hardware database folders (--hardware-db), in the order given."""
    return _extra["hardware_db"]
