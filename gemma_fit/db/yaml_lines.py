"""Line numbers for YAML values, and pydantic errors rendered as `file:line: field: what is wrong`."""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

Loc = Sequence[int | str]
_UNION_TAGS = ("slot", "spec", "str", "GPUEntry")  # union members pydantic names in `loc`


def compose(text: str) -> yaml.Node | None:
    """The YAML node tree (with marks), or None when the text does not parse."""
    try:
        # libyaml's loader where installed: the same nodes and marks, some thirty times as fast on a large file
        return yaml.compose(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError:
        return None


def line_of(root: yaml.Node | None, loc: Loc) -> int | None:
    """1-based line of the deepest node that `loc` reaches; parts that match nothing are skipped."""
    if root is None:
        return None
    node, line = root, root.start_mark.line + 1
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode) and key.value == str(part):
                    node, line = value, key.start_mark.line + 1
                    break
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
    return line


def field_path(data: Any, loc: Loc) -> str:
    """A readable field name: list items that have an `id` are named by it (`rtx-4090.memory_bytes`)."""
    parts: list[str] = []
    node = data
    for part in loc:
        if isinstance(part, int) and isinstance(node, list) and 0 <= part < len(node):
            node = node[part]
            item_id = node.get("id") if isinstance(node, dict) else None
            if isinstance(item_id, str) and item_id:
                parts = [item_id]
            else:
                parts.append(f"[{part}]")
            continue
        if isinstance(node, dict) and part in node:
            node = node[part]
            parts.append(str(part))
        elif part in _UNION_TAGS or str(part).startswith("function-") or (part == "id" and not isinstance(node, dict)):
            continue  # a tag pydantic adds for a union member, not a key in the file
        else:
            node = None
            parts.append(str(part))
    text = ".".join(parts).replace(".[", "[")
    return text or "(top level)"


def _known_keys(models: Sequence[type[BaseModel]]) -> list[str]:
    keys: set[str] = set()
    for model in models:
        keys.update(model.model_fields)
    return sorted(keys)


def _fields_holding(key: str, models: Sequence[type[BaseModel]]) -> list[str]:
    """The fields (as `name:`) whose values are entries with that key: where a misplaced key belongs."""
    owners = [m.__name__ for m in models if key in m.model_fields]
    return sorted({f"{name}:" for m in models for name, info in m.model_fields.items()
                   if any(re.search(rf"\b{o}\b", str(info.annotation)) for o in owners)})


def explain(err: dict[str, Any], models: Sequence[type[BaseModel]] = ()) -> str:
    """The pydantic message, with a hint for the usual mistakes (misspelled key, wrong unit)."""
    loc = err.get("loc", ())
    key = str(loc[-1]) if loc else ""
    value = err.get("input")
    if err["type"] == "extra_forbidden":
        if key in _known_keys(models):  # a nested entry's key one level too high (`usd:` beside `id:`)
            under = _fields_holding(key, models)
            places = ", ".join(under[:-1]) + " or " + under[-1] if len(under) > 1 else "".join(under)
            return f"unknown key '{key}' here" + (f": it goes under {places}" if under else "")
        close = difflib.get_close_matches(key, _known_keys(models), n=1)
        return f"unknown key '{key}'" + (f" (did you mean '{close[0]}'?)" if close else "")
    if err["type"] == "missing":
        return f"missing required key '{key}'"
    msg = str(err["msg"])
    if key.endswith("_bytes") and isinstance(value, int | float) and 0 < value < 2**20:
        msg += f" (the unit is bytes; {value} looks like GiB: {value} GiB = {int(value * 2**30)})"
    elif key.endswith("_bytes") and isinstance(value, float):
        msg += " (give an integer number of bytes)"
    return msg


def validation_items(exc: ValidationError, data: Any, root: yaml.Node | None,
                     models: Sequence[type[BaseModel]] = (), prefix: Loc = ()) -> list[tuple[int | None, str, str]]:
    """Every error of `exc` as (line, field, message); `prefix` is where the validated value sits in `data`."""
    items = []
    for err in exc.errors():
        loc = (*prefix, *err["loc"])
        items.append((line_of(root, loc), field_path(data, loc), explain(dict(err), models)))
    return items


def format_validation(path: Path, exc: ValidationError, data: Any, root: yaml.Node | None,
                      models: Sequence[type[BaseModel]] = (), prefix: Loc = ()) -> list[str]:
    """Every error of `exc` as `file:line: field: message`."""
    return [f"{path}:{line}: {name}: {msg}" if line else f"{path}: {name}: {msg}"
            for line, name, msg in validation_items(exc, data, root, models, prefix)]
