"""Ollama library tags as files (model_db/llamacpp/ollama_tags.yaml): the model and quant a tag pulls and the
size of its blob, which holds the vision tower beside the text weights."""

from __future__ import annotations

import re
from functools import cache

from gemma_fit.base.record import record
from gemma_fit.db.rules import read_packaged_yaml
from gemma_fit.model.catalog import ResolvedModel
from gemma_fit.model.ollama_names import quant_spelling

_UNITS = {"MB": 10**6, "GB": 10**9}


@record
class OllamaTag:
    tag: str
    model: str  # model_db id
    quant: str  # file type or recipe name
    blob_bytes: int  # as `ollama list` shows it (decimal, rounded)
    shown: str
    source: str

    @property
    def rounding_bytes(self) -> int:
        """Half the last digit `shown` prints ("17 GB": 0.5 GB): how far the true size may be from blob_bytes."""
        m = re.fullmatch(r"~?\s*([\d.]+)\s*(MB|GB)", self.shown.strip())
        if m is None:
            return 0
        decimals = len(m.group(1).partition(".")[2])
        return _UNITS[m.group(2)] // (2 * 10**decimals)


@cache
def ollama_tags() -> dict[str, OllamaTag]:
    out = {}
    for tag, t in read_packaged_yaml("llamacpp/ollama_tags.yaml")["tags"].items():
        entry = OllamaTag(tag, t["model"], t["quant"], int(t["bytes"]), str(t["shown"]), str(t["source"]))
        for name in (tag, *t.get("aliases", [])):
            out[name] = entry
    return out


def ollama_tag(name: str) -> OllamaTag | None:
    """The tag `name` is (gemma3:27b, gemma3, gemma4:latest), or None."""
    key = name.strip().lower()
    return ollama_tags().get(key) or ollama_tags().get(key.removeprefix("library/"))


def quant_tag(model_id: str, generation: str, size_label: str, quant: str) -> str | None:
    """The library tag that pulls `model_id` at `quant`, or None where the library has none."""
    data = read_packaged_yaml("llamacpp/ollama_tags.yaml")["quant_tags"]
    family = data["families"].get(generation)
    if family is None or quant not in family["quants"]:
        return None
    size = data["sizes"].get(model_id, size_label.lower())
    if quant == "Q4_K_M":
        bare = f"{family['name']}:{size.split('-')[0]}"
        if bare in ollama_tags():
            return bare
    return f"{family['name']}:{size}-{family['infix']}-{quant_spelling(quant)}"


def ollama_run(resolved: ResolvedModel, quant: str) -> tuple[str, bool]:
    """The step that gets the model at `quant` into Ollama and runs it: `ollama run TAG` of the library tag that
    is this quant, or the Modelfile import of its GGUF where the library has none (then False)."""
    entry, model_id = resolved.entry, resolved.spec.id
    tag = quant_tag(model_id, entry.generation, entry.size_label, quant) if entry else None
    if tag is not None:
        return f"ollama run {tag}", True
    name = f"{model_id}-{quant}".lower()
    return (f"printf 'FROM ./{model_id}-{quant}.gguf\\n' > Modelfile && ollama create {name} -f Modelfile "
            f"&& ollama run {name}"), False
