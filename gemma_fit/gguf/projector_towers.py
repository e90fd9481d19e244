"""The tensors of each vision tower's mmproj, from its projectors.yaml entry: names and ggml shapes as
llama.cpp's clip loads them (tools/mtmd/clip.cpp), types as convert_hf_to_gguf.py writes an F16 file
(conversion/base.py: 1-D tensors and position embeddings F32, other matrices and conv weights F16)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gemma_fit.gguf.tensors import TensorSpec
from gemma_fit.gguf.types import ggml_type

Config = dict[str, Any]


def _t(name: str, shape: tuple[int, ...], kind: str) -> TensorSpec:
    return TensorSpec(name, shape, ggml_type(kind), None, "projector")


def siglip(c: Config, n_text: int) -> list[TensorSpec]:
    """Gemma 3: patch embedding and position embeddings, pre-norm blocks with biases, GELU FFN, the projection
    and its soft-embedding norm (PROJECTOR_TYPE_GEMMA3)."""
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
    return out + [_t("v.post_ln.weight", (e,), "F32"), _t("v.post_ln.bias", (e,), "F32"),
                  _t("mm.input_projection.weight", (n_text, e), "F16"), _t("mm.soft_emb_norm.weight", (e,), "F32")]


_GEMMA4_MATRICES = ("attn_q", "attn_k", "attn_v", "attn_out", "ffn_gate", "ffn_up", "ffn_down")


def gemma4v(c: Config, n_text: int) -> list[TensorSpec]:
    """Gemma 4's ViT (PROJECTOR_TYPE_GEMMA4V): no biases; q/k norms, four norms per block, gated FFN; on E2B/E4B
    each matrix carries its clipping bounds, on 26B/31B the output is standardised."""
    e, f, p = int(c["hidden_size"]), int(c["intermediate_size"]), int(c["patch_size"])
    d = int(c["head_dim"])
    out = [_t("v.patch_embd.weight", (p, p, 3, e), "F16"),
           _t("v.position_embd.weight", (e, int(c["position_embeddings"]), 2), "F32")]
    shapes = {"attn_out": (e, e), "ffn_gate": (e, f), "ffn_up": (e, f), "ffn_down": (f, e)}
    for il in range(int(c["num_hidden_layers"])):
        b = f"v.blk.{il}."
        out += [_t(f"{b}{m}.weight", shapes.get(m, (e, e)), "F16") for m in _GEMMA4_MATRICES]
        out += [_t(f"{b}attn_q_norm.weight", (d,), "F32"), _t(f"{b}attn_k_norm.weight", (d,), "F32")]
        out += [_t(f"{b}{n}.weight", (e,), "F32") for n in ("ln1", "ln2", "attn_post_norm", "ffn_post_norm")]
        if c["clipped_linears"]:
            out += [_t(f"{b}{m}.{s}", (1,), "F32") for m in _GEMMA4_MATRICES
                    for s in ("input_min", "input_max", "output_min", "output_max")]
    if c["standardize"]:
        out += [_t("v.std_bias", (e,), "F32"), _t("v.std_scale", (e,), "F32")]
    return out + [_t("mm.input_projection.weight", (e, n_text), "F16")]


def gemma4uv(c: Config, n_text: int) -> list[TensorSpec]:
    """Gemma 4 12B's encoder-free embedder (PROJECTOR_TYPE_GEMMA4UV): normed 48 x 48 patches, one linear map."""
    e, k = int(c["hidden_size"]), int(c["model_patch_size"]) ** 2 * 3
    return [_t("v.patch_norm.1.weight", (k,), "F32"), _t("v.patch_norm.1.bias", (k,), "F32"),
            _t("v.patch_embd.weight", (k, e), "F16"), _t("v.patch_embd.bias", (e,), "F32"),
            _t("v.patch_norm.2.weight", (e,), "F32"), _t("v.patch_norm.2.bias", (e,), "F32"),
            _t("v.position_embd.weight", (e, int(c["position_embeddings"]), 2), "F32"),
            _t("v.patch_norm.3.weight", (e,), "F32"), _t("v.patch_norm.3.bias", (e,), "F32"),
            _t("mm.input_projection.weight", (e, n_text), "F16")]


def _divisible(v: float, divisor: int = 8) -> int:
    """timm's make_divisible: channel counts rounded to 8, never more than 10% down."""
    out = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return out + divisor if out < 0.9 * v else out


def _conv(name: str, k: int, cin: int, cout: int) -> TensorSpec:
    return _t(name, (k, k, cin, cout), "F16")  # PyTorch [out, in/groups, kh, kw] in ggml order


def _norm(name: str, ch: int) -> TensorSpec:
    return _t(name, (ch,), "F32")


def _gamma(name: str, ch: int) -> TensorSpec:
    return _t(name, (1, 1, ch, 1), "F32")  # the shape clip's ggml_mul needs (a 1-D gamma aborts it)


def _block(p: str, blk: list[Any], cin: int) -> list[TensorSpec]:
    kind = blk[0]
    if kind == "er":
        _, k, e, c = blk
        mid = _divisible(cin * e)
        return [_conv(p + "conv_exp.weight", k, cin, mid), _norm(p + "bn1.weight", mid),
                _conv(p + "conv_pwl.weight", 1, mid, c), _norm(p + "bn2.weight", c)]
    if kind == "uir":
        _, a, k, e, c = blk
        mid = _divisible(cin * e)
        out = [_conv(p + "dw_start.conv.weight", a, 1, cin), _norm(p + "dw_start.bn.weight", cin)] if a else []
        out += [_conv(p + "pw_exp.conv.weight", 1, cin, mid), _norm(p + "pw_exp.bn.weight", mid)]
        if k:
            out += [_conv(p + "dw_mid.conv.weight", k, 1, mid), _norm(p + "dw_mid.bn.weight", mid)]
        return out + [_conv(p + "pw_proj.conv.weight", 1, mid, c), _norm(p + "pw_proj.bn.weight", c),
                      _gamma(p + "layer_scale.gamma", c)]
    _, h, d, kv, k, c = blk  # mqa
    out = [_norm(p + "norm.weight", cin), _conv(p + "attn.query.proj.weight", 1, cin, h * d)]
    for name in ("key", "value"):
        if kv > 1:
            out += [_conv(p + f"attn.{name}.down_conv.weight", k, 1, cin), _norm(p + f"attn.{name}.norm.weight", cin)]
        out.append(_conv(p + f"attn.{name}.proj.weight", 1, cin, d))
    return out + [_conv(p + "attn.output.proj.weight", 1, h * d, c), _gamma(p + "layer_scale.gamma", c)]


def _expand(stage: list[list[Any]]) -> list[list[Any]]:
    out: list[list[Any]] = []
    for count, blk in stage:
        group = blk if isinstance(blk[0], list) else [blk]
        out += [b for _ in range(int(count)) for b in group]
    return out


def mobilenet_v5(c: Config, n_text: int) -> list[TensorSpec]:
    """Gemma 3n's MobileNet-V5 (PROJECTOR_TYPE_GEMMA3NV): stem, four stages of blocks, the multi-scale fusion
    adapter over the last two stages, and the multimodal embedder."""
    stem, e = int(c["stem_channels"]), int(c["hidden_size"])
    out = [_t("v.conv_stem.conv.weight", (3, 3, 3, stem), "F32"), _t("v.conv_stem.conv.bias", (1, 1, stem, 1), "F32"),
           _norm("v.conv_stem.bn.weight", stem)]
    cin, ends = stem, []
    for s, stage in enumerate(c["stages"]):
        for i, blk in enumerate(_expand(stage)):
            out += _block(f"v.blk.{s}.{i}.", blk, cin)
            cin = int(blk[-1])
        ends.append(cin)
    fused = sum(ends[s] for s in c["msfa_stages"])
    mid = _divisible(fused * float(c["msfa_expansion"]))
    out += [_conv("v.msfa.ffn.pw_exp.conv.weight", 1, fused, mid), _norm("v.msfa.ffn.pw_exp.bn.weight", mid),
            _conv("v.msfa.ffn.pw_proj.conv.weight", 1, mid, e), _norm("v.msfa.ffn.pw_proj.bn.weight", e),
            _norm("v.msfa.norm.weight", e)]
    return out + [_t("mm.embedding.weight", (e, int(c["vocab_size"])), "F16"), _norm("mm.hard_emb_norm.weight", e),
                  _t("mm.input_projection.weight", (e, n_text), "F16"), _norm("mm.soft_emb_norm.weight", e)]


LAYOUTS: dict[str, Callable[[Config, int], list[TensorSpec]]] = {
    "siglip": siglip, "gemma4v": gemma4v, "gemma4uv": gemma4uv, "mobilenet_v5": mobilenet_v5,
}
