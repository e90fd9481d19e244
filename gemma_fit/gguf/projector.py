"""The vision projector (mmproj) of a Gemma model without its file: the tensors llama.cpp's clip loads,
from the published vision config (model_db/llamacpp/projectors.yaml), and the metadata a zero-weight
mmproj GGUF needs so that llama.cpp's mtmd loads it.

Gemma 3's SigLIP tower (4B, 12B, 27B): patch embedding (14 x 14 x 3 -> 1152) and 4,096 position
embeddings, 27 pre-norm blocks (q, k, v, out with biases; two layer norms; GELU FFN 1152 -> 4304 -> 1152),
a post layer norm, and the projection into the text model's width with its soft-embedding norm
(tools/mtmd/clip.cpp, PROJECTOR_TYPE_GEMMA3). Gemma 3n's MobileNet-V5 and Gemma 4's towers are not
modelled yet: for them --mmproj FILE reads the real file.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from gemma_fit.db.rules import read_packaged_yaml
from gemma_fit.gguf.tensors import TensorSpec
from gemma_fit.gguf.types import ggml_type


@dataclass(frozen=True)
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


def tower_for(vision_type: str | None) -> str | None:
    """The projectors.yaml id for a model_db vision tower type, or None when it is not modelled."""
    return next((pid for pid, p in projectors().items() if vision_type in p["towers"]), None)


def _t(name: str, shape: tuple[int, ...], kind: str) -> TensorSpec:
    return TensorSpec(name, shape, ggml_type(kind), None, "projector")


def projector_plan(tower: str, n_embd_text: int) -> ProjectorPlan:
    c = projectors()[tower]
    e, f, p = int(c["hidden_size"]), int(c["intermediate_size"]), int(c["patch_size"])
    n_pos = (int(c["image_size"]) // p) ** 2
    out = [_t("v.patch_embd.weight", (p, p, 3, e), "F32"), _t("v.patch_embd.bias", (e,), "F32"),
           _t("v.position_embd.weight", (e, n_pos), "F32")]
    for il in range(int(c["num_hidden_layers"])):
        for w in ("attn_q", "attn_k", "attn_v", "attn_out"):
            out += [_t(f"v.blk.{il}.{w}.weight", (e, e), "F16"), _t(f"v.blk.{il}.{w}.bias", (e,), "F32")]
        for n in ("ln1", "ln2"):
            out += [_t(f"v.blk.{il}.{n}.weight", (e,), "F32"), _t(f"v.blk.{il}.{n}.bias", (e,), "F32")]
        out += [_t(f"v.blk.{il}.ffn_up.weight", (e, f), "F16"), _t(f"v.blk.{il}.ffn_up.bias", (f,), "F32"),
                _t(f"v.blk.{il}.ffn_down.weight", (f, e), "F16"), _t(f"v.blk.{il}.ffn_down.bias", (e,), "F32")]
    out += [_t("v.post_ln.weight", (e,), "F32"), _t("v.post_ln.bias", (e,), "F32"),
            _t("mm.input_projection.weight", (n_embd_text, e), "F16"), _t("mm.soft_emb_norm.weight", (e,), "F32")]
    return ProjectorPlan(tower, n_embd_text, tuple(out), c)


def projector_metadata(plan: ProjectorPlan) -> list[tuple[str, Any]]:
    """(key, value) of the clip metadata llama.cpp's clip_model_loader reads (tools/mtmd/clip-impl.h)."""
    c = plan.config
    return [
        ("general.file_type", 1),  # F16
        ("clip.has_vision_encoder", True),
        ("clip.projector_type", str(c["projector_type"])),
        ("clip.use_gelu", True),
        ("clip.vision.embedding_length", int(c["hidden_size"])),
        ("clip.vision.feed_forward_length", int(c["intermediate_size"])),
        ("clip.vision.block_count", int(c["num_hidden_layers"])),
        ("clip.vision.projection_dim", plan.n_embd_text),
        ("clip.vision.attention.head_count", int(c["num_attention_heads"])),
        ("clip.vision.attention.layer_norm_epsilon", float(c["layer_norm_eps"])),
        ("clip.vision.image_size", int(c["image_size"])),
        ("clip.vision.patch_size", int(c["patch_size"])),
        ("clip.vision.image_mean", [float(x) for x in c["image_mean"]]),
        ("clip.vision.image_std", [float(x) for x in c["image_std"]]),
    ]


def compute_bytes(projector_type: str | None, flash_attn: bool) -> int:
    """clip's compute buffer for one image of a projector type, where measured; 0 where not (said by the caller)."""
    for p in projectors().values():
        if p["projector_type"] == projector_type and "compute_bytes" in p:
            return int(p["compute_bytes"]["flash_attn" if flash_attn else "no_flash_attn"])
    return 0
