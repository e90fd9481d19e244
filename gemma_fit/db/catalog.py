"""The databases an answer reads: the built-in model_db and hardware_db, and the extra folders a user adds
(--model-db, --hardware-db). Made once, from the command line or the API's caller, and passed down: every stage
that reads a database takes the Catalog, never loose folder lists."""

from __future__ import annotations

from pathlib import Path

from gemma_fit.base.record import record


@record
class Catalog:
    model_dirs: tuple[Path, ...] = ()  # extra model databases, later ones replacing earlier entries
    hardware_dirs: tuple[Path, ...] = ()  # extra hardware databases, likewise

    @property
    def builtin_models(self) -> bool:
        """Only the packaged model database: its validated snapshot answers, no schema to import."""
        return not self.model_dirs

    @property
    def builtin_hardware(self) -> bool:
        """Only the packaged hardware database (its snapshot answers)."""
        return not self.hardware_dirs


BUILTIN = Catalog()
