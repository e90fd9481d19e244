"""Where the built-in databases live, and reading YAML with clear errors."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from .errors import DatabaseError

# libyaml's safe loader is ~10x faster than the pure-Python one: it keeps a cold `check` fast.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def packaged_dir(name: str) -> Path:
    """The built-in database folder (`model_db` or `hardware_db`).

    In a source checkout (and an editable install) it is the top-level folder of the repo; a
    regular install ships it as the package data gemma_fit.<name>.
    """
    in_repo = Path(__file__).resolve().parent.parent / name
    if in_repo.is_dir():
        return in_repo
    return Path(str(resources.files(f"gemma_fit.{name}")))


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
