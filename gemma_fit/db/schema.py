"""The one base of every database and input-file schema: unknown keys are an error, entries are immutable, values
are not coerced (`true` is not a number, "0.5" not a price), and a name holds no control or bidi character."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

from gemma_fit.base.text import has_unsafe

# Free text that may run over several lines (a YAML block scalar): a page keeps its lines, a terminal escapes them.
PROSE_FIELDS = frozenset({"note", "notes", "quote", "usable_note", "verification", "description"})


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    @model_validator(mode="before")
    @classmethod
    def _plain_names(cls, data: Any) -> Any:
        """A name, id or source with a newline, an escape sequence or a bidi override is a forged line or a disguised
        id wherever it is shown (a page keeps newlines): refused when read, as a machine file's name is."""
        if isinstance(data, dict):
            for key, value in data.items():
                if key in PROSE_FIELDS:
                    continue
                for item in value if isinstance(value, list) else (value,):
                    if isinstance(item, str) and has_unsafe(item):
                        raise ValueError(f"{key}: a control character, line break or bidi mark is not allowed here")
        return data


class StrictInput(Strict):
    """A file the user wrote for one command (machine and cluster files): its names are checked field by field where
    they are read (a bidi mark in a machine's name is shown escaped, a newline in a GPU id refused with its place)."""

    @model_validator(mode="before")
    @classmethod
    def _plain_names(cls, data: Any) -> Any:
        return data
