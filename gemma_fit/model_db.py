"""Loading model_db/ and resolving what users type after --model.

`--model` takes a model id (`gemma-2-9b`, `-it` suffix and any case accepted), a short alias
(`9b`, `e4b`: the newest generation with that size), or a Hugging Face `config.json` (or the
folder holding it) of any Gemma-architecture model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from pydantic import ValidationError

from .db_files import packaged_dir, read_yaml
from .errors import BadInput, DatabaseError
from .model_entry import GENERATION_ORDER, HFTextConfig, ModelEntry
from .model_spec import ModelSpec, spec_from_config


def _format_validation(path: Path, exc: ValidationError) -> str:
    err = exc.errors()[0]
    field = ".".join(str(p) for p in err["loc"]) or "(top level)"
    more = f" (+{len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
    return f"{path}: {field}: {err['msg']}{more}"


def load_entry(path: Path) -> ModelEntry:
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise DatabaseError(f"{path}: expected a mapping at the top level")
    try:
        return ModelEntry.model_validate(data)
    except ValidationError as exc:
        raise DatabaseError(_format_validation(path, exc)) from None


@cache
def load_model_db(extra_dirs: tuple[Path, ...] = ()) -> dict[str, ModelEntry]:
    """All entries, keyed by lower-case id; entries in extra dirs override built-in ones."""
    entries: dict[str, ModelEntry] = {}
    for folder in (packaged_dir("model_db"), *extra_dirs):
        if not folder.is_dir():
            raise BadInput(f"model database folder not found: {folder}")
        for path in sorted(folder.glob("*.yaml")):
            entry = load_entry(path)
            entries[entry.id.lower()] = entry
    return entries


@dataclass(frozen=True)
class ResolvedModel:
    spec: ModelSpec
    entry: ModelEntry | None  # None for a user's config.json
    how: str  # how the name was resolved, shown to the user


def _alias_table(entries: dict[str, ModelEntry]) -> dict[str, ModelEntry]:
    """Size aliases ('9b', 'e4b', '26b-a4b', '26b') -> newest generation with that size."""
    table: dict[str, ModelEntry] = {}
    for entry in sorted(entries.values(), key=lambda e: GENERATION_ORDER[e.generation]):
        label = entry.size_label.lower()
        table[label] = entry
        table[label.split("-")[0]] = entry
    return table


def _from_config_file(path: Path) -> ResolvedModel:
    cfg_path = path / "config.json" if path.is_dir() else path
    try:
        raw = json.loads(cfg_path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise BadInput(f"cannot read {cfg_path}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise BadInput(f"{cfg_path}: not valid JSON: {exc.msg} at line {exc.lineno}") from None
    if not isinstance(raw, dict):
        raise BadInput(f"{cfg_path}: expected a JSON object")
    text = dict(raw.get("text_config") or raw)
    text.setdefault("architectures", raw.get("architectures"))
    try:
        config = HFTextConfig.model_validate(text)
    except ValidationError as exc:
        raise BadInput(_format_validation(cfg_path, exc)) from None
    model_id = (path if path.is_dir() else path.parent).name or cfg_path.stem
    spec = spec_from_config(config, model_id=model_id, name=model_id)
    return ResolvedModel(spec=spec, entry=None, how=f"from {cfg_path}")


_SPECS: dict[int, ModelSpec] = {}


def entry_spec(entry: ModelEntry) -> ModelSpec:
    """The entry's ModelSpec, derived once per entry object."""
    key = id(entry)
    if key not in _SPECS:
        _SPECS[key] = spec_from_config(entry.config, model_id=entry.id, name=entry.name)
    return _SPECS[key]


def resolve_model(name: str, extra_dirs: tuple[Path, ...] = ()) -> ResolvedModel:
    raw = name.strip()
    if not raw:
        raise BadInput("--model is empty")
    path = Path(raw)
    if raw.endswith(".json") or path.is_dir() or path.is_file():
        if not path.exists():
            raise BadInput(f"config file not found: {raw}")
        return _from_config_file(path)
    entries = load_model_db(extra_dirs)
    key = raw.lower()
    key = key[:-3] if key.endswith("-it") else key
    key = key.removeprefix("google/")
    if key in entries:
        entry = entries[key]
        return ResolvedModel(entry_spec(entry), entry, f"model {entry.id}")
    aliases = _alias_table(entries)
    if key in aliases:
        entry = aliases[key]
        return ResolvedModel(entry_spec(entry), entry, f"alias '{raw}' -> {entry.id} (newest with that size)")
    known = ", ".join(sorted(e.id for e in entries.values()))
    raise BadInput(f"unknown model '{raw}' (known: {known}; or a path to a config.json)")
