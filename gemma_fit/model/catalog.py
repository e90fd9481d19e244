"""Loading model_db/ and resolving what users type after --model.

`--model` takes a model id (`gemma-2-9b`, `-it` suffix and any case accepted), a short alias
(`9b`, `e4b`: the newest generation with that size), or a Hugging Face `config.json` (or the
folder holding it) of any Gemma-architecture model. Reading files (and the pydantic schema) lives
in model.files; a built-in database id resolves from a snapshot of model cards (db.snapshot), so a
cold run needs neither YAML nor the schema.
"""

from __future__ import annotations

import re
import stat
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from gemma_fit.base.errors import BadInput
from gemma_fit.base.record import record
from gemma_fit.db.files import packaged_dir, stat_path, yaml_files_under
from gemma_fit.db.files import shown as _shown
from gemma_fit.db.snapshot import snapshot
from gemma_fit.model.ollama_names import NamedModel, tag_parts
from gemma_fit.model.spec import GENERATION_ORDER, ModelSpec, spec_from_config

if TYPE_CHECKING:
    from gemma_fit.model.schema import ModelEntry


@cache
def load_model_db(extra_dirs: tuple[Path, ...] = ()) -> dict[str, ModelEntry]:
    """All entries, keyed by lower-case id; entries in extra dirs override built-in ones."""
    from gemma_fit.model.files import load_entry

    entries: dict[str, ModelEntry] = {}
    for folder in (packaged_dir("model_db"), *extra_dirs):
        if not folder.is_dir():
            raise BadInput(f"model database folder not found: {folder}")
        for path in yaml_files_under(folder, recursive=False):
            entry = load_entry(path)
            entries[entry.id.lower()] = entry
    return entries


@record
class ResolvedModel:
    spec: ModelSpec
    entry_id: str | None  # the model_db entry it came from; None for a user's config.json or a GGUF
    how: str  # how the name was resolved, shown to the user
    db_dirs: tuple[Path, ...] = ()  # the extra model databases the entry may come from
    local_dir: str | None = None  # the folder of a user's config.json, as typed: what vLLM and transformers load

    @property
    def entry(self) -> ModelEntry | None:
        """The full database entry (published figures, towers, sources), read only when asked for."""
        return None if self.entry_id is None else load_model_db(self.db_dirs)[self.entry_id.lower()]


C = TypeVar("C", bound=NamedModel)


def _alias_table(entries: Mapping[str, C]) -> dict[str, C]:
    """Size aliases ('9b', 'e4b', '26b-a4b', '26b') -> newest generation with that size."""
    table: dict[str, C] = {}
    for entry in sorted(entries.values(), key=lambda e: GENERATION_ORDER[e.generation]):
        label = entry.size_label.lower()
        table[label] = entry
        table[label.split("-")[0]] = entry
    return table


_SPECS: dict[int, ModelSpec] = {}


def entry_spec(entry: ModelEntry) -> ModelSpec:
    """The entry's ModelSpec, derived once per entry object."""
    key = id(entry)
    if key not in _SPECS:
        _SPECS[key] = spec_from_config(entry.config, model_id=entry.id, name=entry.name)
    return _SPECS[key]


@record
class ModelCard:
    """What resolving a name and estimating need of one built-in model_db entry."""

    id: str
    name: str
    generation: str
    size_label: str
    spec: ModelSpec


def _build_cards() -> dict[str, ModelCard]:
    return {key: ModelCard(e.id, e.name, e.generation, e.size_label, entry_spec(e))
            for key, e in load_model_db().items()}


def model_cards() -> dict[str, ModelCard]:
    """The built-in entries as cards, keyed by lower-case id (validated once, then a snapshot)."""
    return snapshot("models", dict, _build_cards)


def library_tag(name: str) -> tuple[str, str | None] | None:
    """(model id, quant or None for the tag's default) of an Ollama library tag of a built-in model (gemma3:27b,
    gemma4:31b-it-q8_0); None when `name` is not one."""
    return tag_parts(name, model_cards().values()) if ":" in name else None


def name_key(raw: str) -> str:
    """A typed model name as the database spells ids: lower case, `_` and spaces as `-`, no `google/` or `-it`,
    and the generation split from the family as Hugging Face writes it (gemma3-27b -> gemma-3-27b)."""
    key = re.sub(r"[\s_]+", "-", raw.strip().lower()).removeprefix("google/")
    key = key[:-3] if key.endswith("-it") else key
    return re.sub(r"^gemma(\d)", r"gemma-\1", key)


def _lookup(raw: str, cards: Mapping[str, C]) -> tuple[C, str] | None:
    """The entry (or catalog card) a typed name means, and how it was read; None when unknown."""
    key = name_key(raw)
    if key in cards:  # how it was read: the id, or what was typed and the id it means
        card_id = cards[key].id
        return cards[key], card_id if raw.strip() == card_id else f"'{raw.strip()}' -> {card_id}"
    aliases = _alias_table(cards)
    if key in aliases:
        return aliases[key], f"alias '{raw}' -> {aliases[key].id} (newest with that size)"
    return None


def resolve_model(name: str, extra_dirs: tuple[Path, ...] = ()) -> ResolvedModel:
    raw = name.strip()
    if not raw:
        raise BadInput("--model is empty")
    path = Path(raw)
    st = stat_path(path)  # anything that exists is read as a path (and refused unless a file or a folder)
    if st is not None:
        from gemma_fit.model.files import from_config_file

        spec, how = from_config_file(path, st)
        folder = raw if stat.S_ISDIR(st.st_mode) else str(path.parent)
        return ResolvedModel(spec=spec, entry_id=None, how=how, local_dir=folder)
    if raw.endswith(".json"):
        raise BadInput(f"config file not found: {_shown(raw)}")
    if not extra_dirs:  # the built-in database: its validated snapshot, no schema to import
        hit = _lookup(raw, model_cards())
        if hit is not None:
            card, how = hit
            return ResolvedModel(card.spec, card.id, how)
    entries = load_model_db(extra_dirs)
    found = _lookup(raw, entries)
    if found is not None:
        entry, how = found
        return ResolvedModel(entry_spec(entry), entry.id, how, extra_dirs)
    if not extra_dirs:
        parts = library_tag(raw)
        if parts is not None:
            card = model_cards()[parts[0].lower()]
            return ResolvedModel(card.spec, card.id, f"Ollama tag '{raw}' -> {card.id}")
    from gemma_fit.base.suggest import did_you_mean

    hint = did_you_mean(raw, [e.id for e in entries.values()])
    raise BadInput(f"unknown model '{_shown(raw)}'{hint or ' (gemma-fit list models; or a path to a config.json)'}")
