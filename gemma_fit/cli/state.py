"""The databases the global options (--model-db, --hardware-db) name, for the command that runs after them."""

from __future__ import annotations

from pathlib import Path

from gemma_fit.api import BUILTIN, Catalog

_catalog: list[Catalog] = [BUILTIN]


def set_extra_dirs(model_db: tuple[Path, ...], hardware_db: tuple[Path, ...]) -> None:
    _catalog[0] = Catalog(model_db, hardware_db)


def catalog() -> Catalog:
    """The built-in databases plus the extra folders given, in the order given."""
    return _catalog[0]
