"""The tensor plan: every tensor llama.cpp expects in a Gemma GGUF, with name, shape and type.

This one plan is the source of truth for the file size, for placing weights on devices and for the
zero-weight GGUF that `gemma-fit synth` writes (llama.cpp's loader then checks every name and shape).

Shapes are in ggml order: ne0 (the row length) first. Names and shapes follow llama.cpp's loaders
(src/models/gemma*.cpp); the types a BF16 conversion writes follow conversion/base.py.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from functools import cache, cached_property, wraps
from typing import Any, TypeVar

from gemma_fit.base.record import record
from gemma_fit.gguf.quantize import choose_types
from gemma_fit.gguf.types import FileType, GGMLType, file_type, ggml_type
from gemma_fit.model.spec import LayerSpec, ModelSpec


@record
class TensorSpec:
    name: str
    shape: tuple[int, ...]  # ggml order, ne0 first
    type: GGMLType
    layer: int | None  # None for global tensors
    role: str  # "input" (token tables, never offloaded), "output", "layer"

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @cached_property
    def n_bytes(self) -> int:
        return self.type.tensor_bytes(self.shape)


@record
class TensorPlan:
    model: ModelSpec
    ftype: FileType
    tensors: tuple[TensorSpec, ...]

    @cached_property
    def n_params(self) -> int:
        return sum(t.n_elements for t in self.tensors)

    @cached_property
    def tensor_data_bytes(self) -> int:
        return sum(t.n_bytes for t in self.tensors)

    @cached_property
    def _hash(self) -> int:
        return hash((self.model, self.ftype.name))

    def __hash__(self) -> int:  # a plan is fixed by its model and file type; hashed as a cache key
        return self._hash

    @cached_property
    def _type_counts(self) -> dict[str, int]:
        return dict(Counter(t.type.name for t in self.tensors))

    def type_counts(self) -> dict[str, int]:
        return dict(self._type_counts)

    @cached_property
    def _by_name(self) -> dict[str, TensorSpec]:
        return {t.name: t for t in self.tensors}

    def by_name(self) -> dict[str, TensorSpec]:
        return self._by_name


@record
class _Raw:
    name: str
    shape: tuple[int, ...]
    layer: int | None
    role: str


def _layer_order(t: _Raw) -> tuple[int, str]:
    """llama.cpp's weight order (llama_model_loader::weight_name_comparer): the "blk.N." number
    of the name (-1 for global tensors), then the name."""
    parts = t.name.split(".")
    layer = int(parts[1]) if parts[0] == "blk" else -1
    return (layer, t.name)


def _global_tensors(m: ModelSpec) -> list[_Raw]:
    g = [
        _Raw("token_embd.weight", (m.n_embd, m.n_vocab), None, "input"),
        _Raw("output_norm.weight", (m.n_embd,), None, "output"),
    ]
    if not m.tied_embeddings and m.arch in ("gemma3", "gemma3n", "gemma4"):
        g.append(_Raw("output.weight", (m.n_embd, m.n_vocab), None, "output"))
    ple = m.n_embd_per_layer * m.n_layer
    if m.arch == "gemma3n":
        g += [
            _Raw("altup_proj.weight", (m.n_embd, m.n_embd, m.n_altup - 1), None, "output"),
            _Raw("altup_unembd_proj.weight", (m.n_embd, m.n_embd, m.n_altup - 1), None, "output"),
        ]
    if ple:
        g += [
            _Raw("per_layer_token_embd.weight", (ple, m.n_vocab), None, "input"),
            # registered as layer-0 tensors by the loader: they go where layer 0 goes
            _Raw("per_layer_model_proj.weight", (m.n_embd, ple), 0, "layer"),
            _Raw("per_layer_proj_norm.weight", (m.n_embd_per_layer,), 0, "layer"),
        ]
    full = [layer for layer in m.layers if not layer.is_swa]
    if m.arch == "gemma4" and full:
        # proportional RoPE factors, one global tensor shared by every full-attention layer
        g.append(_Raw("rope_freqs.weight", (full[0].head_dim // 2,), full[0].index, "layer"))
    return g


def _attention(m: ModelSpec, lay: LayerSpec) -> list[tuple[str, tuple[int, ...]]]:
    hd, e = lay.head_dim, m.n_embd
    t = [("attn_norm", (e,)), ("attn_q", (e, lay.n_head * hd))]
    # every layer has attn_k (and attn_v unless K=V), Gemma 4's KV-shared layers too: the HF checkpoints
    # keep k_proj/v_proj (and k_norm) on the layers that reuse an earlier layer's cache, the converter
    # writes them and llama.cpp loads them when present
    t.append(("attn_k", (e, lay.n_embd_k_gqa)))
    if lay.has_v_proj:
        t.append(("attn_v", (e, lay.n_embd_v_gqa)))
    t.append(("attn_output", (lay.n_head * hd, e)))
    if m.arch in ("gemma2", "gemma3", "gemma3n", "gemma4"):
        t.append(("post_attention_norm", (e,)))
    if m.arch in ("gemma3", "gemma3n", "gemma4"):
        t.append(("attn_q_norm", (hd,)))
        t.append(("attn_k_norm", (hd,)))
    return t


def _ffn(m: ModelSpec, lay: LayerSpec) -> list[tuple[str, tuple[int, ...]]]:
    e, ff = m.n_embd, lay.n_ff
    t = [("ffn_norm", (e,)), ("ffn_gate", (e, ff)), ("ffn_up", (e, ff)), ("ffn_down", (ff, e))]
    if m.arch != "gemma":
        t.append(("post_ffw_norm", (e,)))
    if lay.has_experts:
        x, fx = m.n_expert, m.n_ff_exp
        t += [
            ("ffn_gate_inp", (e, x)),
            ("ffn_gate_inp.scale", (e,)),
            ("pre_ffw_norm_2", (e,)),
            ("post_ffw_norm_1", (e,)),
            ("post_ffw_norm_2", (e,)),
            ("ffn_gate_up_exps", (e, 2 * fx, x)),
            ("ffn_down_exps", (fx, e, x)),
            ("ffn_down_exps.scale", (x,)),
        ]
    return t


def _per_layer_extras(m: ModelSpec) -> list[tuple[str, tuple[int, ...]]]:
    e, p = m.n_embd, m.n_embd_per_layer
    t: list[tuple[str, tuple[int, ...]]] = []
    if m.arch == "gemma4":
        t.append(("layer_output_scale", (1,)))
    if p:
        t += [("inp_gate", (e, p)), ("proj", (p, e)), ("post_norm", (e,))]
    if m.arch == "gemma3n":
        a, r = m.n_altup, m.laurel_rank
        t += [
            ("altup_correct_coef", (a, a)),
            ("altup_correct_scale", (e,)),
            ("altup_predict_coef", (a, a * a)),
            ("altup_router", (e, a)),
            ("altup_router_norm", (e,)),
            ("laurel_l", (e, r)),
            ("laurel_r", (r, e)),
            ("laurel_post_norm", (e,)),
        ]
    return t


def _full_name(base: str, il: int) -> str:
    # "ffn_gate_inp.scale" keeps its own suffix; every other tensor is a ".weight"
    return f"blk.{il}.{base}" if "." in base else f"blk.{il}.{base}.weight"


@cache
def raw_tensors(m: ModelSpec) -> tuple[_Raw, ...]:
    """Names, shapes and placement roles, in file order (independent of the file type)."""
    out = _global_tensors(m)
    for lay in m.layers:
        parts = _attention(m, lay) + _ffn(m, lay) + _per_layer_extras(m)
        out += [_Raw(_full_name(b, lay.index), s, lay.index, "layer") for b, s in parts]
    return tuple(sorted(out, key=_layer_order))


def converter_type(name: str, shape: tuple[int, ...], base: GGMLType) -> GGMLType:
    """The type convert_hf_to_gguf.py writes for a tensor in a `base` (BF16/F16/F32) conversion."""
    f32 = ggml_type("F32")
    if len(shape) <= 1 or name.endswith("_norm.weight") or not name.endswith(".weight"):
        return f32
    if any(k in name for k in ("ffn_gate_inp.weight", "altup_correct_coef", "altup_predict_coef")):
        return f32
    return base


@cache
def _bf16_sources(model: ModelSpec) -> tuple[tuple[str, tuple[int, ...], GGMLType], ...]:
    """(name, shape, type in a BF16 conversion) for every tensor: what llama-quantize starts from."""
    bf16 = ggml_type("BF16")
    return tuple((r.name, r.shape, converter_type(r.name, r.shape, bf16)) for r in raw_tensors(model))


@cache
def build_plan(model: ModelSpec, quant: str) -> TensorPlan:
    """Every tensor of `model` in a llama-quantize'd file of type `quant`, from a BF16 conversion."""
    ftype = file_type(quant)
    raws = raw_tensors(model)
    types = choose_types(model, list(_bf16_sources(model)), ftype)
    tensors = tuple(
        TensorSpec(r.name, r.shape, t, r.layer, r.role) for r, t in zip(raws, types, strict=True)
    )
    return TensorPlan(model=model, ftype=ftype, tensors=tensors)


_R = TypeVar("_R")


def per_plan(maxsize: int) -> Callable[[Callable[..., _R]], Callable[..., _R]]:
    """Cache a function of (plan, *hashable args) by the plan's identity and the args: plans are built once per
    model and quant and are not hashed by value (thousands of tensors); the entry keeps its plan, so an id reused
    by a later plan is never mistaken for it. The cache is emptied when it holds `maxsize` answers."""

    def wrap(fn: Callable[..., _R]) -> Callable[..., _R]:
        answers: dict[tuple[Any, ...], tuple[TensorPlan, _R]] = {}

        @wraps(fn)
        def cached(plan: TensorPlan, *args: Any) -> _R:
            key = (id(plan), *args)
            hit = answers.get(key)
            if hit is not None and hit[0] is plan:
                return hit[1]
            if len(answers) >= maxsize:
                answers.clear()
            value = fn(plan, *args)
            answers[key] = (plan, value)
            return value

        return cached

    return wrap
