"""What `gemma-fit db validate` reports and the state its checks share: a problem found (`file:line:
field: what is wrong`), the report of a run, one read YAML document, and the ids and names seen so far
(for the checks across files).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from gemma_fit.base.record import record
from gemma_fit.db.yaml_lines import Loc, line_of, validation_items


@record
class Problem:
    file: Path
    line: int | None
    field: str
    message: str

    def __str__(self) -> str:
        """One line, inert: a key or path from the file may hold terminal sequences or bidi marks."""
        from gemma_fit.base.text import printable

        where = f"{self.file}:{self.line}" if self.line else str(self.file)
        return printable(f"{where}: {self.field}: {self.message}", 2000)


@dataclass
class Doc:
    path: Path
    data: Any
    root: yaml.Node | None

    def line(self, loc: Loc) -> int | None:
        return line_of(self.root, loc)


@dataclass
class Report:
    problems: list[Problem] = field(default_factory=list)
    files: int = 0
    counts: dict[str, int] = field(default_factory=dict)

    def add(self, doc: Doc, loc: Loc, name: str, message: str) -> None:
        self.problems.append(Problem(doc.path, doc.line(loc), name, message))

    def summary(self) -> str:
        parts = ", ".join(f"{n} {kind}" for kind, n in sorted(self.counts.items()))
        return f"{self.files} files ({parts or 'no entries'})"


@dataclass
class Seen:
    """Where each id / GPU name was first seen, for the cross-file checks."""

    ids: dict[tuple[str, str], tuple[Path, int | None]] = field(default_factory=dict)
    names: dict[str, tuple[str, Path, int | None]] = field(default_factory=dict)
    device_names: list[tuple[str, str, Doc, Loc]] = field(default_factory=list)
    # (file, line, field, id, kind): an id another database must hold (a rental's GPU, an API's model)
    refs: list[tuple[Path, int | None, str, str, str]] = field(default_factory=list)


def validate_with(doc: Doc, report: Report, model: Any, value: Any, prefix: Loc,
                  models: Sequence[type[BaseModel]]) -> Any:
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        for line, name, msg in validation_items(exc, doc.data, doc.root, models, prefix):
            report.problems.append(Problem(doc.path, line, name, msg))
        return None


def check_unique(doc: Doc, report: Report, seen: Seen, kind: str, entry_id: str, loc: Loc, name: str) -> None:
    key = (kind, entry_id.lower())
    line = doc.line((*loc, "id"))
    if key in seen.ids:
        first, first_line = seen.ids[key]
        report.add(doc, (*loc, "id"), name, f"duplicate id '{entry_id}' (also at {first}:{first_line})")
    else:
        seen.ids[key] = (doc.path, line)
