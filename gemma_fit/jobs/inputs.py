"""What a user typed, checked before any estimate: the model's source, the workload, the margin, and a model
named by an Ollama tag or read from a GGUF header."""

from __future__ import annotations

from pathlib import Path

from gemma_fit.base.errors import BadInput
from gemma_fit.base.ranges import check_optional, check_range
from gemma_fit.base.units import GIB
from gemma_fit.engines.base import Workload
from gemma_fit.gguf.tensors import TensorPlan
from gemma_fit.memory.fit import SAFETY_MARGIN_BYTES
from gemma_fit.model.catalog import ResolvedModel
from gemma_fit.model.ollama_tags import OllamaTag


def check_model_source(model: object, gguf: Path | None) -> None:
    """A check needs one model: from the databases (or a config.json), or from a GGUF file."""
    if (model is None) == (gguf is None):
        raise BadInput("give --model ID (with --quant) or --gguf FILE")


def check_workload(w: Workload) -> None:
    """--prompt-tokens, --output-tokens, --rate and --images: one line for impossible values."""
    check_range("--prompt-tokens", w.prompt_tokens)
    check_optional("--output-tokens", w.traffic.output_tokens)
    check_optional("--rate", w.traffic.rate_per_s)
    check_optional("--images", w.images)


def margin_bytes(margin_gib: float | None) -> int:
    """--margin GiB as bytes; llama.cpp's fit target (1 GiB) when not given."""
    if margin_gib is None:
        return SAFETY_MARGIN_BYTES
    check_range("--margin", margin_gib)
    return round(margin_gib * GIB)


def gguf_model(path: Path) -> tuple[ResolvedModel, TensorPlan]:
    """The model and tensor plan a real GGUF file's header describes."""
    from gemma_fit.gguf.from_file import model_from_gguf

    _, spec, plan = model_from_gguf(path)
    return ResolvedModel(spec, None, f"from {path}"), plan


def spelled_tag_quant(model: str, quant: str | None) -> str | None:
    """The quant a library tag spells in its name (gemma4:31b-it-q8_0), checked against --quant as tag_quant does;
    `quant` itself for any other name."""
    from gemma_fit.model.catalog import library_tag

    parts = library_tag(model)
    if parts is None or parts[1] is None:
        return quant
    from gemma_fit.gguf.types import file_type

    if quant is not None and file_type(quant).name != file_type(parts[1]).name:
        raise BadInput(f"the Ollama tag {model.strip()} is {parts[1]}, not {quant}: drop --quant, or name the model "
                       f"({parts[0]}) with --quant {quant}")
    return parts[1]


def tag_quant(tag: OllamaTag, quant: str | None) -> str:
    """The quant an Ollama tag pulls; --quant may only repeat it (another quant is another tag)."""
    from gemma_fit.gguf.types import file_type

    if quant is not None and file_type(quant).name != file_type(tag.quant).name:
        raise BadInput(f"the Ollama tag {tag.tag} is {tag.quant}, not {quant}: drop --quant, or name the model "
                       f"({tag.model}) with --quant {quant}")
    return tag.quant
