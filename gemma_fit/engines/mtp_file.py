"""A zero-weight GGUF of a Gemma 4 MTP drafter (llama.cpp arch `gemma4-assistant`), to measure what llama.cpp allocates
for it beside a zero-weight target (tests/test_speculative.py). The tensors are those llama.cpp's loader creates
(src/models/gemma4-assistant.cpp): the tied embedding, the pre/post projections, per layer Q-only attention with its
norms, the GeGLU FFN, its norms and the output scale, one rope_freqs for the full-attention layers; Q8_0 matrices,
F16 projections, F32 vectors, as the published files keep them. The data region is a hole, as `gemma-fit synth`'s.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType, GGUFValueType, GGUFWriter

from gemma_fit.engines.mtp import Drafter
from gemma_fit.gguf.layout import pad, placeholder_token_types, placeholder_tokens

ARCH = "gemma4-assistant"
Q8_0, F16, F32 = GGMLQuantizationType.Q8_0, GGMLQuantizationType.F16, GGMLQuantizationType.F32


def _tensors(d: Drafter) -> list[tuple[str, tuple[int, ...], GGMLQuantizationType]]:
    """(name, ggml shape, type) of every tensor."""
    out = [("token_embd.weight", (d.n_embd, d.n_vocab), Q8_0), ("output_norm.weight", (d.n_embd,), F32),
           ("nextn.pre_projection.weight", (2 * d.backbone, d.n_embd), F16),
           ("nextn.post_projection.weight", (d.n_embd, d.backbone), F16)]
    rope_done = False
    for i, kind in enumerate(d.layer_types):
        head = d.head_dim_full if kind == "full" else d.head_dim_swa
        q = d.n_head * head
        out += [(f"blk.{i}.attn_norm.weight", (d.n_embd,), F32), (f"blk.{i}.attn_q.weight", (d.n_embd, q), Q8_0),
                (f"blk.{i}.attn_output.weight", (q, d.n_embd), Q8_0), (f"blk.{i}.attn_q_norm.weight", (head,), F32),
                (f"blk.{i}.post_attention_norm.weight", (d.n_embd,), F32),
                (f"blk.{i}.layer_output_scale.weight", (1,), F32),
                (f"blk.{i}.ffn_norm.weight", (d.n_embd,), F32),
                (f"blk.{i}.ffn_gate.weight", (d.n_embd, d.n_ff), Q8_0),
                (f"blk.{i}.ffn_up.weight", (d.n_embd, d.n_ff), Q8_0),
                (f"blk.{i}.ffn_down.weight", (d.n_ff, d.n_embd), Q8_0),
                (f"blk.{i}.post_ffw_norm.weight", (d.n_embd,), F32)]
        if kind == "full" and not rope_done:
            out.append(("rope_freqs.weight", (head // 2,), F32))  # one, shared by the full layers
            rope_done = True
    return out


def _nbytes(shape: tuple[int, ...], t: GGMLQuantizationType) -> int:
    n = int(np.prod(shape))
    return n * 34 // 32 if t == Q8_0 else n * (2 if t == F16 else 4)


def _metadata(d: Drafter, n_ctx_train: int, swa: int) -> list[tuple[str, Any, GGUFValueType]]:
    """The keys llama.cpp's loader reads (the head_count_kv array is written beside them: the target's)."""
    a = ARCH
    u32 = GGUFValueType.UINT32
    return [
        (f"{a}.context_length", n_ctx_train, u32), (f"{a}.embedding_length", d.n_embd, u32),
        (f"{a}.embedding_length_out", d.backbone, u32), (f"{a}.block_count", d.n_layer, u32),
        (f"{a}.nextn_predict_layers", d.n_layer, u32), (f"{a}.feed_forward_length", d.n_ff, u32),
        (f"{a}.attention.head_count", d.n_head, u32),
        (f"{a}.attention.key_length", d.head_dim_full, u32), (f"{a}.attention.value_length", d.head_dim_full, u32),
        (f"{a}.attention.key_length_swa", d.head_dim_swa, u32),
        (f"{a}.attention.value_length_swa", d.head_dim_swa, u32),
        (f"{a}.rope.dimension_count", d.head_dim_full, u32), (f"{a}.rope.dimension_count_swa", d.head_dim_swa, u32),
        (f"{a}.attention.layer_norm_rms_epsilon", 1e-6, GGUFValueType.FLOAT32),
        (f"{a}.rope.freq_base", 1_000_000.0, GGUFValueType.FLOAT32),
        (f"{a}.rope.freq_base_swa", 10_000.0, GGUFValueType.FLOAT32),
        (f"{a}.attention.sliding_window", swa, u32),
        (f"{a}.attention.shared_kv_layers", d.n_layer, u32),
    ]


def write_drafter_gguf(d: Drafter, target: Any, out: Path) -> int:
    """Write the zero-weight drafter file for `target` (a ModelSpec: the KV layout its layers share); its size."""
    n_ctx_train, swa = target.n_ctx_train, target.n_swa
    # each drafter layer reads the target's last sliding-window or last full layer: their KV heads are the target's
    last_swa = next(x for x in reversed(target.layers) if x.is_swa)
    last_full = next(x for x in reversed(target.layers) if not x.is_swa)
    kv_heads = [last_full.n_head_kv if k == "full" else last_swa.n_head_kv for k in d.layer_types]
    w = GGUFWriter(out, arch=ARCH)
    w.add_name(d.id)
    w.add_file_type(7)  # MOSTLY_Q8_0
    for key, value, vtype in _metadata(d, n_ctx_train, swa):
        w.add_key_value(key, value, vtype)
    w.add_array(f"{ARCH}.attention.sliding_window_pattern", [k != "full" for k in d.layer_types])
    w.add_array(f"{ARCH}.attention.head_count_kv", kv_heads)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(placeholder_tokens(d.n_vocab))
    w.add_token_scores([0.0] * d.n_vocab)
    w.add_token_types(placeholder_token_types(d.n_vocab))
    w.add_bos_token_id(2)
    w.add_eos_token_id(1)
    w.add_unk_token_id(3)
    w.add_pad_token_id(0)
    tensors = _tensors(d)
    for name, shape, t in tensors:
        w.add_tensor_info(name, tuple(reversed(shape)), np.dtype(np.float32), _nbytes(shape, t), raw_dtype=t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    header = os.path.getsize(out)
    data = sum(pad(_nbytes(s, t)) for _, s, t in tensors)
    size = pad(header) + data
    with open(out, "r+b") as f:
        f.truncate(size)  # the data region as a hole: zeros, no disk space
    return size
