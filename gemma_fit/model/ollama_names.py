"""Ollama library names read back into the model and quant they pull: `gemma3:27b`, `gemma4:31b-it-q4_K_M`,
`gemma3:270m-it-qat`, by the rules model_db/llamacpp/ollama_tags.yaml's `quant_tags` writes them with, so that a tag
gemma-fit prints is a name every command reads."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from gemma_fit.db.rules import read_packaged_yaml


class NamedModel(Protocol):
    """What reading a name needs of a model entry: a ModelEntry or its snapshot's ModelCard (model.catalog)."""

    @property
    def id(self) -> str: ...
    @property
    def generation(self) -> str: ...
    @property
    def size_label(self) -> str: ...


def quant_spelling(quant: str) -> str:
    """How a tag spells a file type: q5_K_M, q8_0, fp16, bf16, qat."""
    if quant == "QAT_Q4_0":
        return "qat"
    if quant in ("F16", "BF16"):
        return "fp16" if quant == "F16" else "bf16"
    return "q" + quant[1:]


def tag_size(card: NamedModel) -> str:
    return str(read_packaged_yaml("llamacpp/ollama_tags.yaml")["quant_tags"]["sizes"].get(card.id,
                                                                                         card.size_label.lower()))


def tag_parts(name: str, cards: Iterable[NamedModel]) -> tuple[str, str | None] | None:
    """(model id, quant or None for the tag's default) of a library tag `family:size[-infix-quant]`; None when
    `name` is not one."""
    family, sep, rest = name.strip().lower().removeprefix("library/").partition(":")
    data = read_packaged_yaml("llamacpp/ollama_tags.yaml")["quant_tags"]["families"]
    gen = next((g for g, f in data.items() if f["name"] == family), None)
    if not sep or gen is None:
        return None
    sized = [(tag_size(c).lower(), c) for c in cards if c.generation == gen]
    for size, card in sorted(sized, key=lambda sc: -len(sc[0])):  # 26b-a4b before 26b
        if rest != size and not rest.startswith(size + "-"):
            continue
        suffix = rest[len(size):].lstrip("-")
        if not suffix:
            return card.id, None
        infix, _, spelled = suffix.partition("-")
        quant = next((q for q in data[gen]["quants"] if quant_spelling(q).lower() == spelled), None)
        return (card.id, quant) if infix == data[gen]["infix"] and quant else None
    return None
