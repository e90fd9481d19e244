"""The KV cache llama.cpp allocates, per layer, exact to the byte.

Rules from llama.cpp src/llama-context.cpp (context padding, streams), src/llama-kv-cache.cpp
(one K and one V tensor per cache-owning layer: row width x cells x streams) and
src/llama-kv-cache-iswa.cpp (the sliding-window cache size).
"""

from __future__ import annotations

from functools import cache

from gemma_fit.base.record import record
from gemma_fit.gguf.types import ggml_type
from gemma_fit.memory.settings import RunSettings, pad_to
from gemma_fit.model.spec import LayerSpec, ModelSpec


@record
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
        return model.max_n_embd_v_gqa
    return layer.n_embd_v_gqa


@cache
def _cell_bytes(model: ModelSpec, type_k: str, type_v: str, v_trans: bool) -> tuple[tuple[int, bool, int], ...]:
    """(layer, in the SWA cache, K+V bytes per cell) for every cache-owning layer."""
    tk, tv = ggml_type(type_k), ggml_type(type_v)
    out = []
    for layer in model.layers:
        if not layer.has_kv:
            continue  # reuses an earlier layer's cache (Gemma 3n / 4 KV sharing)
        k = tk.row_bytes(layer.n_embd_k_gqa)
        v = tv.row_bytes(_v_width(model, layer, v_trans))
        out.append((layer.index, layer.is_swa and model.has_swa, k + v))
    return tuple(out)


def kv_cache_layout(model: ModelSpec, s: RunSettings) -> KVCacheLayout:
    base = s.ctx_per_stream(model)
    swa = swa_cells(model, s) if model.has_swa else 0
    streams = s.n_streams
    v_trans = s.flash_attn == "off"
    per_layer = {
        il: per_cell * (swa if in_swa else base) * streams
        for il, in_swa, per_cell in _cell_bytes(model, s.cache_type_k, s.cache_type_v, v_trans)
    }
    return KVCacheLayout(base, swa, streams, v_trans, per_layer)
