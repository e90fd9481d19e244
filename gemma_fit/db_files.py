"""Where the built-in databases live, and reading YAML with clear errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from .errors import DatabaseError

# libyaml's safe loader is ~10x faster than the pure-Python one: it keeps a cold `check` fast.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def packaged_dir(name: str) -> Path:
    """The built-in database folder (`model_db` or `hardware_db`).

    An installed wheel ships it as data under gemma_fit/_data/<name>; a source checkout (and an
    editable install) reads the top-level folder of the repo.
    """
    here = Path(__file__).resolve().parent
    installed = here / "_data" / name
    if installed.is_dir():
        return installed
    return here.parent / name


def read_yaml(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise DatabaseError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        return yaml.load(text, Loader=_LOADER)  # noqa: S506 - a safe loader (libyaml's when present)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise DatabaseError(f"{where}: malformed YAML: {problem}") from None


def read_packaged_yaml(relative: str) -> Any:
    return read_yaml(packaged_dir("model_db") / relative)
