"""gemma-fit's limits on a config's sizes, and the reason each limit gives when it refuses one.

Sizes are at least 1 and at most a limit far above any published model, so a typo or a hostile file
is refused before any work is done (a 100,000-layer config would otherwise cost minutes and gigabytes
in the tensor plan). Plain numbers: the schema (model/hf_config.py) turns them into field types.
"""

from __future__ import annotations

# --- limits -----------------------------------------------------------------------------------
# Upper limits for a config's sizes: each is several times the largest published LLM, so no real
# model is refused, and each bounds the work (tensors, layers) and the integers the estimates use.
# Largest published figures for reference: layers 126 (Llama 3.1 405B), 128 (several 1T-class MoE
# models); hidden width 16384 (Llama 3.1 405B), 18432 (PaLM 540B), 25600 (a few research models);
# FFN width 53248 (Llama 3.1 405B), 73728 (PaLM); vocabulary 262400 (Gemma 3n), 256000 (Gemma,
# BLOOM 250880); attention heads 128; head size 512 (Gemma 4 global layers); context 10,485,760
# (Llama 4 Scout, 10M); experts 384 (Kimi K2), 512 (Qwen3-Next).
MAX_LAYERS = 1024
MAX_HIDDEN = 65536
MAX_FFN = 2**20
MAX_HEADS = 1024
MAX_HEAD_DIM = 4096
MAX_VOCAB = 2**21
MAX_CTX = 2**24
MAX_EXPERTS = 4096
MAX_ALTUP = 64  # Gemma 3n: 4 AltUp streams
MAX_ROPE_THETA = 1e12  # published: 1e4 .. 1e8
MAX_SCALAR = 1e6  # soft-capping (30, 50) and query_pre_attn_scalar (144 .. 256)

LIMIT_NOTES: dict[str, str] = {
    "num_hidden_layers": f"{MAX_LAYERS} layers is gemma-fit's limit; published LLMs have at most about 128",
    "hidden_size": f"{MAX_HIDDEN} is gemma-fit's limit; published LLMs are at most about 25,600 wide",
    "intermediate_size": f"{MAX_FFN} is gemma-fit's limit; published FFNs are at most about 73,728 wide",
    "moe_intermediate_size": f"{MAX_FFN} is gemma-fit's limit",
    "num_attention_heads": f"{MAX_HEADS} heads is gemma-fit's limit; published LLMs have at most 128",
    "num_key_value_heads": f"{MAX_HEADS} heads is gemma-fit's limit",
    "num_global_key_value_heads": f"{MAX_HEADS} heads is gemma-fit's limit",
    "head_dim": f"{MAX_HEAD_DIM} is gemma-fit's limit; published head sizes are at most 512",
    "global_head_dim": f"{MAX_HEAD_DIM} is gemma-fit's limit; published head sizes are at most 512",
    "vocab_size": f"{MAX_VOCAB} tokens is gemma-fit's limit; published vocabularies are at most about 262,400",
    "vocab_size_per_layer_input": f"{MAX_VOCAB} tokens is gemma-fit's limit",
    "max_position_embeddings": f"{MAX_CTX} tokens is gemma-fit's limit; the longest published context is 10M",
    "sliding_window": f"{MAX_CTX} tokens is gemma-fit's limit",
    "num_experts": f"{MAX_EXPERTS} experts is gemma-fit's limit; published MoE models have at most 512",
    "hidden_size_per_layer_input": f"{MAX_HIDDEN} is gemma-fit's limit",
    "laurel_rank": f"{MAX_HIDDEN} is gemma-fit's limit",
    "altup_num_inputs": f"{MAX_ALTUP} is gemma-fit's limit; Gemma 3n uses 4",
}
