"""The compute buffer llama.cpp reserves: the graph allocator's peak, by phases.

The structure (which tensors are alive together) follows llama.cpp's graph builders; the
coefficients live in model_db/llamacpp/compute_buffer.yaml, fitted to exact allocations
measured from llama.cpp itself (benchmarks/fit_compute.py prints the error distribution).
"""

from __future__ import annotations

from functools import cache

from gemma_fit.base.record import record
from gemma_fit.db.rules import read_packaged_yaml
from gemma_fit.memory.kv_cache import KVCacheLayout
from gemma_fit.memory.settings import RunSettings
from gemma_fit.model.spec import ModelSpec

F32 = 4


@record
class Coefficients:
    e_ffn: float
    q_ffn: float
    q_attn: float
    ffn_const: float
    e_out: float
    moe: float
    altup: float
    masks_live_at_output: bool


@cache
def coefficients(arch: str) -> Coefficients:
    data = read_packaged_yaml("llamacpp/compute_buffer.yaml")
    merged = {**data["defaults"], **(data["arch"].get(arch) or {})}
    return Coefficients(**merged)


@record
class ComputePhases:
    """Bytes of each phase; the buffer is the largest."""

    masks: int
    per_layer_inputs: int
    ffn: int
    attention: int
    output: int
    # CUDA/ROCm only: f16 copies of a quantized (or bf16) K/V cache that the flash-attention prompt
    # kernels (tile / MMA) need, reserved inside the FA node's allocation (ggml-cuda/fattn.cu,
    # ggml_cuda_flash_attn_ext_get_alloc_size), for the largest layer at full cache length.
    fa_f16_copies: int = 0
    fa_attention: int = 0  # the attention phase with flash attention, around those copies

    def device_layers(self, backend: str) -> int:
        """The layers phase on a GPU of this backend (the CUDA FA copies can make attention the peak)."""
        if backend in ("cuda", "rocm") and self.fa_f16_copies:
            attention = max(self.attention, self.fa_attention + self.fa_f16_copies)
            return self.masks + self.per_layer_inputs + max(self.ffn, attention)
        return self.layers

    @property
    def layers(self) -> int:
        return self.masks + self.per_layer_inputs + max(self.ffn, self.attention)

    @property
    def total(self) -> int:
        return max(self.layers, self.output)


def n_outputs(s: RunSettings, n_tokens: int) -> int:
    """Logit rows reserved: min(n_ubatch, n_outputs_max), n_outputs_max 0 meaning n_batch."""
    return min(n_tokens, s.n_outputs_max or s.n_batch)


def flash_attention_on(s: RunSettings) -> bool:
    """'auto' resolves to on where the backend supports the head sizes (CPU, CUDA, Metal do for
    every Gemma head size); a quantized V cache forces it on."""
    return s.flash_attn != "off"


def compute_phases(model: ModelSpec, s: RunSettings, kv: KVCacheLayout) -> ComputePhases:
    c = coefficients(model.arch)
    n_tokens = min(s.resolved_ctx(model), s.ubatch)
    fa = flash_attention_on(s)
    e = model.n_embd
    q = max(layer.n_head * layer.head_dim for layer in model.layers)
    ff = max(layer.n_ff for layer in model.layers)
    swa_types = {layer.is_swa and model.has_swa for layer in model.layers if layer.has_kv}
    cells = {True: kv.swa_cells, False: kv.base_cells}
    mask_bytes = (2 if fa else F32) * n_tokens * sum(cells[t] for t in swa_types)
    ple = model.n_embd_per_layer * model.n_layer * n_tokens * F32
    ffn = 3 * ff + c.e_ffn * e + c.q_ffn * q + c.ffn_const + c.moe * model.n_ff_exp * model.n_expert_used + c.altup * e
    attention = 0.0
    if not fa:
        n_kv = max(layer.n_head * cells[layer.is_swa and model.has_swa] for layer in model.layers)
        attention = n_kv + 3 * e + c.q_attn * q + c.altup * e
    output = model.n_vocab * n_outputs(s, n_tokens) * F32 + c.e_out * e * n_tokens * F32
    if c.masks_live_at_output:
        output += mask_bytes + ple
    return ComputePhases(
        masks=mask_bytes,
        per_layer_inputs=ple,
        ffn=int(ffn * n_tokens * F32),
        attention=int(attention * n_tokens * F32),
        output=int(output),
        fa_f16_copies=fa_f16_copy_bytes(model, s, kv) if fa else 0,
        fa_attention=int((3 * e + 2 * q) * n_tokens * F32),
    )


def fa_f16_copy_bytes(model: ModelSpec, s: RunSettings, kv: KVCacheLayout) -> int:
    """Bytes of the f16 K and V copies for the largest cache-owning layer (0 for an f16 cache)."""
    k_copy = s.type_k.name != "F16"
    v_copy = s.type_v.name != "F16"
    if not (k_copy or v_copy):
        return 0
    best = 0
    for layer in model.layers:
        if not layer.has_kv:
            continue
        cells = (kv.swa_cells if layer.is_swa and model.has_swa else kv.base_cells) * kv.n_streams
        per_tensor = cells * layer.n_embd_k_gqa * 2
        best = max(best, per_tensor * (int(k_copy) + int(v_copy)))
    return best
