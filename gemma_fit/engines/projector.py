"""The vision projector as llama.cpp loads it (--mmproj, --images N), and what an Ollama blob holds beyond the
text weights: both are memory a llama.cpp plan keeps on the main GPU or keeps free."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from gemma_fit.base.errors import BadInput
from gemma_fit.base.ranges import check_optional
from gemma_fit.engines.base import Unmodelled
from gemma_fit.gguf.tensors import TensorPlan
from gemma_fit.memory.settings import RunSettings
from gemma_fit.model.catalog import ResolvedModel
from gemma_fit.model.ollama_tags import OllamaTag

IMAGE_TOKENS_UNKNOWN = 0  # a file's projector: tokens per image not read from it


def projector_bytes(path: Path, flash_attn: bool = True) -> int:
    """What a multimodal projector GGUF (--mmproj) adds on the main GPU: its tensors, from its header, and
    clip's compute buffer for one image where it is measured for the file's projector type."""
    from gemma_fit.gguf.from_file import is_mmproj, mmproj_bytes
    from gemma_fit.gguf.projector import compute_bytes
    from gemma_fit.gguf.reader import read_gguf_header

    header = read_gguf_header(path)
    if not is_mmproj(header):
        raise BadInput(f"{path}: not a multimodal projector (general.architecture is not 'clip')")
    kind = header.metadata.get("clip.projector_type")
    return mmproj_bytes(header) + compute_bytes(kind if isinstance(kind, str) else None, flash_attn)


def vision_type(resolved: ResolvedModel) -> str | None:
    """The model's vision tower type in the database (towers.vision.type), or None."""
    entry = resolved.entry
    return entry.towers.vision.type if entry and entry.towers and entry.towers.vision else None


def with_projector(resolved: ResolvedModel, settings: RunSettings, images: int | None,
                   mmproj: Path | None) -> RunSettings:
    """--images N and --mmproj for llama.cpp: the projector's weights and image-encoder buffer on the main GPU
    (from the file, or without one from the model's vision tower), and the context the images take."""
    check_optional("--images", images)
    flash = settings.flash_attn != "off"
    if mmproj is not None:
        return replace(settings, mmproj_bytes=settings.mmproj_bytes or projector_bytes(mmproj, flash),
                       mmproj_path=str(mmproj), images=images or 0, image_tokens=IMAGE_TOKENS_UNKNOWN)
    if not images:
        return settings
    from gemma_fit.gguf.projector import image_compute_bytes, projector_plan, tower_for

    vision = vision_type(resolved)
    if vision is None:
        raise BadInput(f"--images {images}: {resolved.spec.id} has no vision tower (a text-only model)")
    tower = tower_for(vision, resolved.spec.id)
    if tower is None:
        raise BadInput(f"--images {images}: the {vision} projector of {resolved.spec.id} is not modelled without its "
                       "file yet; give --mmproj FILE (the mmproj GGUF)")
    plan = projector_plan(tower, resolved.spec.n_embd)
    extra = plan.tensor_data_bytes + image_compute_bytes(plan.config, flash)
    return replace(settings, mmproj_bytes=extra, mmproj_path=f"mmproj-{resolved.spec.id}-f16.gguf", images=images,
                   image_tokens=plan.tokens_per_image)


def tag_unmodelled(tag: OllamaTag, resolved: ResolvedModel, plan: TensorPlan, images: int) -> Unmodelled:
    """What an Ollama blob holds beyond the text plan (and the projector --images places): its vision (and
    audio) towers, which Ollama loads with the model. The modelled tower where there is one, else what the
    published blob size leaves beyond the text weights, when that is more than its rounding."""
    from gemma_fit.gguf.layout import estimated_file_bytes
    from gemma_fit.gguf.projector import projector_plan, tower_for

    text = estimated_file_bytes(plan)
    tower = tower_for(vision_type(resolved), resolved.spec.id)
    modelled = projector_plan(tower, resolved.spec.n_embd).tensor_data_bytes if tower else 0
    rest = tag.blob_bytes - text
    rest = max(modelled, rest if rest > tag.rounding_bytes else 0)
    if images:
        rest = max(rest - modelled, 0)  # --images already places the modelled projector
    what = f"{rest / 1e9:.2f} GB more (the towers beside the text weights, which Ollama loads) kept free" if rest else \
        "nothing more to keep free"
    return Unmodelled(rest, f"Ollama tag {tag.tag}: {resolved.spec.name} {tag.quant}, a {tag.shown} blob "
                            f"(text weights {text / 1e9:.2f} GB): {what}")
