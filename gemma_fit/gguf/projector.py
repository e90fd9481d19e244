"""The vision projector (mmproj) of a Gemma model without its file: the tensors llama.cpp's clip loads, from
the published vision config (model_db/llamacpp/projectors.yaml, laid out by gguf.projector_towers), the
metadata a zero-weight mmproj GGUF needs so that llama.cpp's mtmd loads it, and clip's compute buffer per image.

Towers: Gemma 3's SigLIP (4B, 12B, 27B), Gemma 3n's MobileNet-V5 (E2B, E4B; the audio tower that shares the file
is not modelled), Gemma 4's ViT (E2B/E4B at 768 wide, 26B-A4B/31B at 1152) and Gemma 4 12B's encoder-free
embedder.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from gemma_fit.base.record import record
from gemma_fit.db.rules import read_packaged_yaml
from gemma_fit.gguf.projector_towers import LAYOUTS
from gemma_fit.gguf.tensors import TensorSpec


@record
class ProjectorPlan:
    tower: str  # projectors.yaml id
    n_embd_text: int  # the text model's width the projection writes into
    tensors: tuple[TensorSpec, ...]
    config: dict[str, Any]

    @property
    def tensor_data_bytes(self) -> int:
        return sum(t.n_bytes for t in self.tensors)

    @property
    def tokens_per_image(self) -> int:
        return int(self.config["tokens_per_image"])


@cache
def projectors() -> dict[str, dict[str, Any]]:
    return dict(read_packaged_yaml("llamacpp/projectors.yaml")["projectors"])


def tower_for(vision_type: str | None, model_id: str | None = None) -> str | None:
    """The projectors.yaml id for a model_db vision tower type (of this model, where a type has several
    sizes), or None when it is not modelled."""
    for pid, p in projectors().items():
        if vision_type in p["towers"] and (model_id is None or "models" not in p or model_id in p["models"]):
            return pid
    return None


def projector_plan(tower: str, n_embd_text: int) -> ProjectorPlan:
    c = projectors()[tower]
    return ProjectorPlan(tower, n_embd_text, tuple(LAYOUTS[str(c["layout"])](c, n_embd_text)), c)


def projector_metadata(plan: ProjectorPlan) -> list[tuple[str, Any]]:
    """(key, value) of the clip metadata llama.cpp's clip_model_loader reads (tools/mtmd/clip-impl.h): the
    tower's own keys, and its shape from the config where they do not say it."""
    c = plan.config
    shape = {"clip.vision.embedding_length": c["hidden_size"],
             "clip.vision.feed_forward_length": c.get("intermediate_size", 0),
             "clip.vision.block_count": c.get("num_hidden_layers", 0),
             "clip.vision.attention.head_count": c.get("num_attention_heads", 0)}
    out: dict[str, Any] = {"general.file_type": 1, "clip.has_vision_encoder": True}  # F16
    out |= {k: int(v) for k, v in shape.items()}
    out |= dict(c["metadata"])
    out["clip.vision.projection_dim"] = plan.n_embd_text
    return [(k, [float(x) for x in v] if isinstance(v, list) else v) for k, v in out.items()]


def image_compute_bytes(config: dict[str, Any], flash_attn: bool, tokens: int | None = None) -> int:
    """clip's compute buffer for one image of `tokens` tokens (default: the most an image takes)."""
    rule = config["compute"]["flash_attn" if flash_attn else "no_flash_attn"]
    patches = int(config["compute"]["patches_per_token"]) * (tokens or int(config["tokens_per_image"]))
    return int(rule.get("constant", 0) + rule.get("linear", 0) * patches + rule.get("quadratic", 0) * patches**2)


def compute_bytes(projector_type: str | None, flash_attn: bool, tokens: int | None = None) -> int:
    """clip's compute buffer for one image of a projector type (a file's, read from its header), where measured;
    0 where not (said by the caller). Where towers of different widths share the type (gemma4v), the larger."""
    entries = [p for p in projectors().values() if p["projector_type"] == projector_type]
    return max((image_compute_bytes(p, flash_attn, tokens) for p in entries), default=0)
