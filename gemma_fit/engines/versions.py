"""The defaults of an engine release (model_db/engines/versions.yaml): what changed between vLLM and Ollama
releases, for `--engine-version`. The memory and speed rules stay those of the release each engine module reads."""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from gemma_fit.base.errors import BadInput
from gemma_fit.base.text import printable
from gemma_fit.db.rules import read_packaged_yaml


def parse_version(text: str) -> tuple[int, ...] | None:
    """'0.12.6' or 'v0.12.6' (a release's own spelling) as numbers; None for anything else."""
    m = re.fullmatch(r"\s*v?([0-9]{1,4}(?:\.[0-9]{1,4}){1,3})\s*", text)
    return tuple(int(p) for p in m.group(1).split(".")) if m else None


@cache
def _table(engine: str) -> dict[str, Any]:
    data: dict[str, Any] = dict(read_packaged_yaml("engines/versions.yaml")[engine])
    return data


def release_label(engine: str, display: str, version: str | None) -> str:
    """"vLLM 0.20.0": the release an answer is for (None: the modelled one). BadInput for a version that is not a
    release number, or older than the defaults known."""
    t = _table(engine)
    if version is None:
        return f"{display} {t['modelled']}"
    v = parse_version(version)
    oldest = parse_version(t["oldest"])
    if v is None or oldest is None or v < oldest:
        raise BadInput(f"--engine-version '{printable(version, 40)}': give the {display} release number, "
                       f"{t['oldest']} or later (gemma-fit knows its defaults from there; its memory rules are "
                       f"{display} {t['modelled']}'s)")
    return f"{display} {'.'.join(map(str, v))}"


def defaults_of(engine: str, label: str) -> dict[str, Any]:
    """The defaults of the release a label names ("vLLM 0.20.0"; "": the modelled release)."""
    t = _table(engine)
    v = (parse_version(label.split()[-1]) if label.strip() else None) or parse_version(t["modelled"]) or ()
    out = dict(t["initial"])
    for change in t["changes"]:
        since = parse_version(change["since"])
        if since is not None and since <= v:
            out[change["key"]] = change["value"]
    return out


def changed_in(engine: str, key: str) -> str | None:
    """The release from which a default took its present value (the last change of `key`); None if it never
    changed."""
    changes = [c for c in _table(engine)["changes"] if c["key"] == key]
    return str(changes[-1]["since"]) if changes else None
