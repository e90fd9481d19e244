"""The one base of every database and input-file schema: unknown keys are an error, entries are immutable."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class StrictInput(Strict):
    """A file the user wrote (machine and cluster files): no coercion either (`true` is not a number)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
