"""The KV cache llama.cpp allocates, per layer, exact to the byte.

Rules from llama.cpp src/llama-context.cpp (context padding, streams), src/llama-kv-cache.cpp
(one K and one V tensor per cache-owning layer: row width x cells x streams) and
src/llama-kv-cache-iswa.cpp (the sliding-window cache size).
"""

from __future__ import annotations

from dataclasses import dataclass

from .model_spec import LayerSpec, ModelSpec
from .settings import RunSettings, pad_to


@dataclass(frozen=True)
class KVCacheLayout:
    base_cells: int  # cells per stream of the full-attention (non-SWA) cache
    swa_cells: int  # cells per stream of the sliding-window cache (0 if none)
    n_streams: int
    v_transposed: bool  # V stored transposed: flash attention explicitly off
    layer_bytes: dict[int, int]  # cache-owning layer index -> K + V bytes

    @property
    def total_bytes(self) -> int:
        return sum(self.layer_bytes.values())


def swa_cells(model: ModelSpec, s: RunSettings) -> int:
    """Cells of the SWA cache: the window (per sequence, times sequences when unified) plus one
    ubatch, padded to 256, never more than the full cache; --swa-full makes it full-size."""
    n_ctx_seq = s.ctx_per_stream(model)
    if s.swa_full:
        return n_ctx_seq
    window = model.n_swa * (s.n_parallel if s.kv_unified else 1)
    return pad_to(min(n_ctx_seq, window + s.ubatch), 256)


def _v_width(model: ModelSpec, layer: LayerSpec, v_transposed: bool) -> int:
    # With V transposed (flash attention off) and V widths that differ between layers (Gemma 4),
    # every V row is padded to the widest one (llama-kv-cache.cpp, TAG_V_CACHE_VARIABLE).
    if v_transposed:
        return max(x.n_embd_v_gqa for x in model.layers)
    return layer.n_embd_v_gqa


def kv_cache_layout(model: ModelSpec, s: RunSettings) -> KVCacheLayout:
    base = s.ctx_per_stream(model)
    swa = swa_cells(model, s) if model.has_swa else 0
    streams = s.n_streams
    v_trans = s.flash_attn == "off"
    per_layer = {}
    for layer in model.layers:
        if not layer.has_kv:
            continue  # reuses an earlier layer's cache (Gemma 3n / 4 KV sharing)
        cells = swa if layer.is_swa and model.has_swa else base
        k = s.type_k.row_bytes(layer.n_embd_k_gqa)
        v = s.type_v.row_bytes(_v_width(model, layer, v_trans))
        per_layer[layer.index] = (k + v) * cells * streams
    return KVCacheLayout(base, swa, streams, v_trans, per_layer)
