"""The llama.cpp rule tables (model_db/llamacpp/*.yaml), parsed once and served from a snapshot."""

from __future__ import annotations

from typing import Any

from gemma_fit.db.files import packaged_dir
from gemma_fit.db.snapshot import snapshot


def _build() -> dict[str, Any]:
    from gemma_fit.db.yaml_files import read_yaml

    rules = packaged_dir("model_db") / "llamacpp"
    return {f"llamacpp/{p.name}": read_yaml(p) for p in sorted(rules.glob("*.yaml"))}


def rule_tables() -> dict[str, Any]:
    """Every rule table by its path under model_db/ ("llamacpp/ftypes.yaml"), as parsed."""
    return snapshot("rules", dict, _build)


def read_packaged_yaml(relative: str) -> Any:
    """A built-in llama.cpp rule table (model_db/llamacpp/...), as parsed."""
    table = rule_tables().get(relative)
    if table is not None:
        return table
    from gemma_fit.db.yaml_files import read_yaml

    return read_yaml(packaged_dir("model_db") / relative)
