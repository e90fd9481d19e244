"""Which ggml type llama-quantize gives each tensor under each file type.

Written from the rules in llama.cpp src/llama-quant.cpp (commit 0c1e570, Oct 2026): which tensors
may be quantized at all, the output/embedding rule for tied models, the per-category bumps
(attn_v, ffn_down, attn_output ...), and the fallback when a row length is not a multiple of the
chosen type's block. Counters (the n-th attn_v, the n-th ffn_down) run over tensors in file order,
exactly as llama-quantize walks them. No imatrix, no --pure, no overrides: the defaults people use.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from gemma_fit.base.errors import BadInput
from gemma_fit.gguf.types import FileType, GGMLType, ggml_type
from gemma_fit.model.spec import ModelSpec

_IQ12 = {"IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M", "IQ1_S", "IQ1_M"}
_OUTPUT_Q5K = {"IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ2_S", "IQ2_M", "IQ1_M"}

# Row length not a multiple of the block: the type llama-quantize falls back to (tensor_type_fallback).
_FALLBACK = {
    "IQ1_S": "IQ4_NL", "IQ1_M": "IQ4_NL", "IQ2_XXS": "IQ4_NL", "IQ2_XS": "IQ4_NL", "IQ2_S": "IQ4_NL",
    "IQ3_XXS": "IQ4_NL", "IQ3_S": "IQ4_NL", "IQ4_XS": "IQ4_NL",
    "Q2_K": "Q4_0", "Q3_K": "Q4_0", "TQ1_0": "Q4_0", "TQ2_0": "Q4_0",
    "Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0",
}


@cache
def category(name: str) -> str:
    """llama-quantize's tensor category, by name substring, in its order of tests."""
    if name == "output.weight":
        return "output"
    if name in ("token_embd.weight", "per_layer_token_embd.weight"):
        return "token_embd"
    for key, cat in (
        ("attn_qkv.weight", "attn_qkv"),
        ("attn_kv_b.weight", "attn_kv_b"),
        ("attn_v.weight", "attn_v"),
        ("attn_k.weight", "attn_k"),
        ("attn_q.weight", "attn_q"),
        ("attn_output.weight", "attn_output"),
        ("ffn_up", "ffn_up"),
        ("ffn_gate", "ffn_gate"),
        ("ffn_down", "ffn_down"),
    ):
        if key in name:
            return cat
    return "other"


@cache
def allows_quantization(name: str, shape: tuple[int, ...]) -> bool:
    """Tensors llama-quantize leaves in their source type (tensor_allows_quantization)."""
    if len(shape) < 2 or not name.endswith("weight") or "_norm.weight" in name:
        return False
    kept = ("ffn_gate_inp.weight", "altup", "laurel", "per_layer_model_proj")
    return not any(k in name for k in kept)


def use_more_bits(i: int, n: int) -> bool:
    """About half the layers: the first and last eighth and every third one between."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


@dataclass
class _Counters:
    n_attn_v: int
    n_layer: int
    i_attn_v: int = 0
    i_ffn_down: int = 0
    i_ffn_gate: int = 0
    i_ffn_up: int = 0


def _layer_of(name: str, running: int, n_expert: int) -> int:
    # MoE models take the layer from the name; others use the running count of such tensors
    if n_expert > 1:
        return int(name.split(".")[1])
    return running


def _output_type(ft: FileType, default: GGMLType, ne0: int) -> GGMLType:
    if ft.name == "MXFP4_MOE" or ne0 % default.block:
        return ggml_type("Q8_0")
    if ft.name in _OUTPUT_Q5K:
        return ggml_type("Q5_K")
    if default.name != "Q8_0":
        return ggml_type("Q6_K")
    return default


def _token_embd_untied(ft: FileType, default: GGMLType) -> GGMLType:
    if ft.name in ("IQ2_XXS", "IQ2_XS", "IQ1_S", "IQ1_M"):
        return ggml_type("Q2_K")
    if ft.name in ("IQ2_S", "IQ2_M", "IQ3_XXS"):
        return ggml_type("IQ3_S")
    if ft.name in ("TQ1_0", "TQ2_0"):
        return ggml_type("Q4_K")
    return default


def _iq12_rules(m: ModelSpec, ft: FileType, cat: str, t: GGMLType, c: _Counters) -> GGMLType:
    low = "IQ3_S" if ft.name in ("IQ2_S", "IQ2_M") else "Q2_K"
    if cat in ("attn_v", "attn_qkv", "attn_kv_b"):
        c.i_attn_v += 1
        return ggml_type("Q4_K" if m.gqa_layer0 >= 4 or m.n_expert >= 4 else low)
    if m.n_expert == 8 and cat == "attn_k":
        return ggml_type("Q4_K")
    if cat == "ffn_down":
        out = ggml_type(low) if c.i_ffn_down < c.n_layer // 8 else t
        c.i_ffn_down += 1
        return out
    if cat == "attn_output":
        if m.n_expert == 8:
            return ggml_type("Q5_K")
        if ft.name in ("IQ1_S", "IQ1_M"):
            return ggml_type("IQ2_XXS")
        if ft.name in ("IQ2_S", "IQ2_M"):
            return ggml_type("IQ3_S")
    return t


def _attn_v_rule(m: ModelSpec, ft: FileType, t: GGMLType, c: _Counters) -> GGMLType:
    f, gqa4 = ft.name, m.gqa_layer0 >= 4
    name = t.name
    if f == "Q2_K":
        name = "Q4_K" if gqa4 else "Q3_K"
    elif f == "Q2_K_S" and gqa4:
        name = "Q4_K"
    elif f == "IQ3_XXS":
        name = "Q4_K" if gqa4 else "IQ3_S"  # IQ3_XXS with an imatrix; we assume none
    elif f in ("IQ3_XS", "IQ3_S") and gqa4 or f == "IQ3_M":
        name = "Q4_K"
    elif f == "Q3_K_M":
        name = "Q5_K" if c.i_attn_v < 2 else "Q4_K"
    elif f == "Q3_K_L" or f in ("IQ4_NL", "IQ4_XS") and gqa4:
        name = "Q5_K"
    elif f in ("Q4_K_M", "Q5_K_M") and use_more_bits(c.i_attn_v, c.n_attn_v):
        name = "Q6_K"
    elif f == "Q4_K_S" and c.i_attn_v < 4:
        name = "Q5_K"
    if m.n_expert == 8:
        name = "Q8_0"
    c.i_attn_v += 1
    return ggml_type(name)


def _ffn_down_rule(m: ModelSpec, ft: FileType, t: GGMLType, name: str, c: _Counters) -> GGMLType:
    i = _layer_of(name, c.i_ffn_down, m.n_expert)
    n, f = c.n_layer, ft.name
    c.i_ffn_down += 1
    if f == "Q2_K":
        return ggml_type("Q3_K")
    if f == "Q2_K_S":
        return ggml_type("Q4_K") if i < n // 8 else t
    if f == "IQ3_XXS":
        return ggml_type("Q4_K" if i < n // 8 else "Q3_K")
    if f == "Q3_K_M":
        return ggml_type("Q5_K" if i < n // 16 else "Q4_K")
    if f == "IQ3_M" and (i < n // 8 or m.n_expert == 8 and use_more_bits(i, n)):
        return ggml_type("Q4_K")
    if f == "Q3_K_L":
        return ggml_type("Q5_K")
    if f == "Q4_K_M":
        return ggml_type("Q6_K") if use_more_bits(i, n) else t
    if i < n // 8 and f in ("IQ4_NL", "IQ4_XS"):
        return ggml_type("Q5_K")
    if f == "Q5_K_M" and use_more_bits(i, n):
        return ggml_type("Q6_K")
    if f == "Q4_K_S" and i < n // 8:
        return ggml_type("Q5_K")
    return t


def _attn_output_rule(m: ModelSpec, ft: FileType, t: GGMLType) -> GGMLType:
    f = ft.name
    if m.n_expert == 8:
        low = {"Q2_K", "IQ3_XS", "IQ3_XXS", "Q3_K_S", "Q3_K_M", "IQ4_NL", "Q4_K_S", "Q4_K_M", "IQ3_S",
               "IQ3_M", "IQ4_XS"}
        return ggml_type("Q5_K") if f in low else t
    bump = {"Q2_K": "Q3_K", "IQ3_XXS": "IQ3_S", "Q3_K_M": "Q4_K", "Q3_K_L": "Q5_K", "IQ3_M": "Q4_K"}
    return ggml_type(bump[f]) if f in bump else t


def _gate_up_rule(m: ModelSpec, ft: FileType, t: GGMLType, name: str, i_run: int, n: int) -> GGMLType:
    i = _layer_of(name, i_run, m.n_expert)
    if ft.name == "IQ3_XS" and n // 8 <= i < 7 * n // 8:
        return ggml_type("IQ3_XXS")
    return t


def recipe_type(m: ModelSpec, ft: FileType, name: str) -> GGMLType:
    """A published mix: its token-embedding type for this architecture, the default type elsewhere."""
    from gemma_fit.gguf.types import recipes

    r = recipes()[ft.name]
    if m.arch not in r["token_embd"]:
        raise BadInput(f"{r['name']} ({ft.name}) was not published for {m.arch} models ({m.id}); it exists for "
                       f"{', '.join(sorted(r['token_embd']))}")
    return ggml_type(r["token_embd"][m.arch]) if category(name) == "token_embd" else ft.default_type


def _mix_type(m: ModelSpec, ft: FileType, name: str, ne0: int, tied: bool, c: _Counters) -> GGMLType:
    """llama_tensor_get_type_impl: the mix rule for one quantizable tensor."""
    t = ft.default_type
    cat = category(name)
    if cat == "output" or tied and cat == "token_embd":
        return _output_type(ft, t, ne0)
    if ft.name == "MXFP4_MOE":
        return t  # 3-D experts keep MXFP4; handled by the caller for other tensors
    if cat == "token_embd":
        return _token_embd_untied(ft, t)
    if ft.name in _IQ12:
        return _iq12_rules(m, ft, cat, t, c)
    if cat in ("attn_v", "attn_qkv", "attn_kv_b"):
        return _attn_v_rule(m, ft, t, c)
    if cat == "attn_k":
        if m.n_expert == 8:
            return ggml_type("Q8_0")
        return ggml_type({"IQ3_XS": "IQ3_XXS", "IQ3_XXS": "IQ2_S"}.get(ft.name, t.name))
    if cat == "attn_q":
        return ggml_type({"IQ3_XS": "IQ3_XXS", "IQ3_XXS": "IQ2_S"}.get(ft.name, t.name))
    if cat == "ffn_down":
        return _ffn_down_rule(m, ft, t, name, c)
    if cat == "attn_output":
        return _attn_output_rule(m, ft, t)
    if cat == "ffn_gate":
        out = _gate_up_rule(m, ft, t, name, c.i_ffn_gate, c.n_layer)
        c.i_ffn_gate += 1
        return out
    if cat == "ffn_up":
        out = _gate_up_rule(m, ft, t, name, c.i_ffn_up, c.n_layer)
        c.i_ffn_up += 1
        return out
    return t


def fallback_type(t: GGMLType, ne0: int) -> GGMLType:
    """tensor_type_fallback: a compatible type when the row length does not divide the block."""
    if ne0 % t.block == 0:
        return t
    out = ggml_type(_FALLBACK.get(t.name, t.name))
    if ne0 % out.block:
        out = ggml_type("F16")
    return out


def choose_types(
    model: ModelSpec,
    tensors: list[tuple[str, tuple[int, ...], GGMLType]],
    ftype: FileType,
) -> list[GGMLType]:
    """The type of each (name, shape, source type), in file order, after llama-quantize `ftype`."""
    from gemma_fit.gguf.types import mix_type

    ftype = mix_type(ftype)  # an Unsloth UD-* file: its base type's mix (the UD mix is not published)
    names = [n for n, _, _ in tensors]
    tied = "output.weight" not in names
    counters = _Counters(
        n_attn_v=sum(category(n) in ("attn_v", "attn_qkv", "attn_kv_b") for n in names),
        n_layer=model.n_layer,
    )
    out = []
    default = ftype.default_type
    for name, shape, source in tensors:
        if not allows_quantization(name, shape):
            out.append(source)
            continue
        if not default.is_quantized:
            out.append(default)
            continue
        t = recipe_type(model, ftype, name) if ftype.recipe else _mix_type(model, ftype, name, shape[0], tied,
                                                                            counters)
        if ftype.name == "MXFP4_MOE" and category(name) not in ("output", "token_embd"):
            t = ggml_type("MXFP4" if len(shape) > 2 and shape[2] > 1 else "Q8_0")
        out.append(fallback_type(t, shape[0]))
    return out
