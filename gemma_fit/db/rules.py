"""The rule tables (model_db/llamacpp, quality and engines/*.yaml), parsed once and served from a snapshot: a cold
run then never loads the YAML parser (its import alone is a tenth of a cold `check`)."""

from __future__ import annotations

from typing import Any

from gemma_fit.db.files import packaged_dir
from gemma_fit.db.snapshot import snapshot

_FOLDERS = ("llamacpp", "quality", "engines")


def _build() -> dict[str, Any]:
    from gemma_fit.db.yaml_files import read_yaml

    root = packaged_dir("model_db")
    return {f"{folder}/{p.name}": read_yaml(p) for folder in _FOLDERS for p in sorted((root / folder).glob("*.yaml"))}


def rule_tables() -> dict[str, Any]:
    """Every rule table by its path under model_db/ ("llamacpp/ftypes.yaml", "quality/quants.yaml"), as parsed."""
    return snapshot("rules", dict, _build)


def read_packaged_yaml(relative: str) -> Any:
    """A built-in rule table by its path under model_db/, as parsed."""
    table = rule_tables().get(relative)
    if table is not None:
        return table
    from gemma_fit.db.yaml_files import read_yaml

    return read_yaml(packaged_dir("model_db") / relative)
