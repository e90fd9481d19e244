"""transformers' defaults for the keys a Hugging Face config.json leaves out, per Gemma config class.

Plain data and one function: no pydantic (the schema, model/hf_config.py, checks the filled config).
"""

from __future__ import annotations

from typing import Any

from gemma_fit.model.limits import MAX_LAYERS

# --- transformers' defaults for keys a config.json leaves out ----------------------------------
# A Hugging Face config.json lists only the keys that differ from its config class's defaults (the
# published Gemma 3 4B text_config has six keys); transformers, and llama.cpp's converter (which reads
# the config through transformers), fill the rest from the class named by `model_type`. These are
# those defaults, for the keys HFTextConfig reads, transcribed from transformers' sources:
_TRANSFORMERS = "https://github.com/huggingface/transformers/blob/"
HF_DEFAULTS_SOURCES = {
    "gemma": _TRANSFORMERS + "008e574391258935f3ecc3035c882e73bbcac419/src/transformers/models/gemma/"
    "configuration_gemma.py",
    "gemma2": _TRANSFORMERS + "008e574391258935f3ecc3035c882e73bbcac419/src/transformers/models/gemma2/"
    "configuration_gemma2.py",
    "gemma3_text": _TRANSFORMERS + "008f5c8c29be84d4721dc6d1e0fcd72300580be4/src/transformers/models/gemma3/"
    "configuration_gemma3.py",
    "gemma3n_text": _TRANSFORMERS + "018548097621d331be9d60ab6cafdd71cfa67a43/src/transformers/models/gemma3n/"
    "configuration_gemma3n.py",
    "gemma4_text": _TRANSFORMERS + "008e574391258935f3ecc3035c882e73bbcac419/src/transformers/models/gemma4/"
    "configuration_gemma4.py",
    "gemma4_unified_text": _TRANSFORMERS + "aa291ac486da4f6cc50fc72aea9014bd54a45a4f/src/transformers/models/"
    "gemma4_unified/configuration_gemma4_unified.py",
}
HF_CLASS_NAMES = {"gemma": "GemmaConfig", "gemma2": "Gemma2Config", "gemma3_text": "Gemma3TextConfig",
                  "gemma3n_text": "Gemma3nTextConfig", "gemma4_text": "Gemma4TextConfig",
                  "gemma4_unified_text": "Gemma4UnifiedTextConfig"}
_GEMMA4_ROPE = {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1e6}}
HF_DEFAULTS: dict[str, dict[str, Any]] = {
    # GemmaConfig (Gemma 1; the 7B). rope_theta: the base class's RoPE default (explicit 10000.0 in
    # releases before rope_parameters).
    "gemma": dict(vocab_size=256000, hidden_size=3072, intermediate_size=24576, num_hidden_layers=28,
                  num_attention_heads=16, num_key_value_heads=16, head_dim=256, max_position_embeddings=8192,
                  rms_norm_eps=1e-6, tie_word_embeddings=True, rope_theta=10000.0),
    # Gemma2Config (the 2B); layer_types default: alternating, as llama.cpp's gemma2 fallback.
    "gemma2": dict(vocab_size=256000, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
                   num_attention_heads=8, num_key_value_heads=4, head_dim=256, max_position_embeddings=8192,
                   rms_norm_eps=1e-6, tie_word_embeddings=True, rope_theta=10000.0, query_pre_attn_scalar=256,
                   sliding_window=4096, final_logit_softcapping=30.0, attn_logit_softcapping=50.0),
    # Gemma3TextConfig; sliding_window_pattern 6 (5 local : 1 global), as llama.cpp's gemma3 fallback.
    "gemma3_text": dict(vocab_size=262208, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
                        num_attention_heads=8, num_key_value_heads=4, head_dim=256, max_position_embeddings=131072,
                        rms_norm_eps=1e-6, tie_word_embeddings=True, rope_theta=1e6, rope_local_base_freq=10000.0,
                        query_pre_attn_scalar=256, sliding_window=4096, final_logit_softcapping=None,
                        attn_logit_softcapping=None),
    # Gemma3nTextConfig (the E4B); rope thetas from its default_theta {global: 1e6, local: 1e4};
    # activation_sparsity_pattern is derived (fill_hf_defaults); layer_types default 4 local : 1 global,
    # as llama.cpp's gemma3n fallback.
    "gemma3n_text": dict(vocab_size=262400, vocab_size_per_layer_input=262144, hidden_size=2048,
                         hidden_size_per_layer_input=256, intermediate_size=16384, num_hidden_layers=35,
                         num_attention_heads=8, num_key_value_heads=2, head_dim=256, max_position_embeddings=32768,
                         rms_norm_eps=1e-6, tie_word_embeddings=True, sliding_window=512,
                         final_logit_softcapping=30.0, altup_active_idx=0, altup_num_inputs=4,
                         num_kv_shared_layers=15, laurel_rank=64, rope_theta=1e6, rope_local_base_freq=10000.0),
    # Gemma4TextConfig; global_head_dim 512 and num_global_key_value_heads None are popped from its
    # kwargs with those defaults; layer_types is derived (fill_hf_defaults).
    "gemma4_text": dict(vocab_size=262144, hidden_size=2304, intermediate_size=9216, num_hidden_layers=30,
                        num_attention_heads=8, num_key_value_heads=4, head_dim=256, max_position_embeddings=131072,
                        rms_norm_eps=1e-6, tie_word_embeddings=True, sliding_window=512, final_logit_softcapping=None,
                        vocab_size_per_layer_input=262144, hidden_size_per_layer_input=256, attention_k_eq_v=False,
                        num_kv_shared_layers=0, enable_moe_block=False, use_double_wide_mlp=False, num_experts=None,
                        top_k_experts=None, moe_intermediate_size=None, global_head_dim=512,
                        num_global_key_value_heads=None, rope_parameters=_GEMMA4_ROPE),
    # Gemma4UnifiedTextConfig (the 12B): no per-layer embeddings, no MoE.
    "gemma4_unified_text": dict(vocab_size=262144, hidden_size=2304, intermediate_size=9216, num_hidden_layers=30,
                                num_attention_heads=8, num_key_value_heads=4, head_dim=256,
                                max_position_embeddings=131072, rms_norm_eps=1e-6, tie_word_embeddings=True,
                                sliding_window=1024, final_logit_softcapping=None, num_global_key_value_heads=None,
                                global_head_dim=512, attention_k_eq_v=False, num_kv_shared_layers=0,
                                use_double_wide_mlp=False, rope_parameters=_GEMMA4_ROPE),
}
# A composite (multimodal) config's model_type -> the model_type of its text_config class.
TEXT_MODEL_TYPE = {"gemma": "gemma", "gemma2": "gemma2", "gemma3": "gemma3_text", "gemma3_text": "gemma3_text",
                   "gemma3n": "gemma3n_text", "gemma3n_text": "gemma3n_text", "gemma4": "gemma4_text",
                   "gemma4_text": "gemma4_text", "gemma4_unified": "gemma4_unified_text",
                   "gemma4_unified_text": "gemma4_unified_text"}
GEMMA4_SLIDING_WINDOW_PATTERN = 6  # Gemma4(Unified)TextConfig: layer_types default 5 local : 1 global


def _derived_defaults(text_type: str, n: int) -> dict[str, Any]:
    """Defaults transformers computes from num_hidden_layers (in the classes' __post_init__)."""
    if text_type in ("gemma4_text", "gemma4_unified_text"):
        period = GEMMA4_SLIDING_WINDOW_PATTERN
        types = ["sliding_attention" if (i + 1) % period else "full_attention" for i in range(n)]
        types[-1] = "full_attention"  # "Last layer must use full_attention": transformers forces it
        return {"layer_types": types}
    if text_type == "gemma3n_text":
        sparse = 10 if n > 10 else 0  # the first 10 layers sparse (0.95), the rest dense
        return {"activation_sparsity_pattern": [0.95] * sparse + [0.0] * (n - sparse)}
    return {}


def fill_hf_defaults(text: dict[str, Any]) -> tuple[dict[str, Any], str | None, list[str]]:
    """`text` with the keys it leaves out taken from its transformers class's defaults.

    Returns (filled config, class name or None when model_type names no known class, keys filled).
    Derived defaults are computed only for a layer count within the limits (checked again later).
    """
    text_type = text.get("model_type")
    if not isinstance(text_type, str) or text_type not in HF_DEFAULTS:
        return text, None, []
    out = dict(text)
    filled = [k for k in HF_DEFAULTS[text_type] if k not in out]
    for key in filled:
        value = HF_DEFAULTS[text_type][key]
        out[key] = {k: dict(v) for k, v in value.items()} if key == "rope_parameters" else value
    n = out.get("num_hidden_layers")
    if isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= MAX_LAYERS:
        for key, value in _derived_defaults(text_type, n).items():
            if key not in out:
                out[key] = value
                filled.append(key)
    return out, HF_CLASS_NAMES[text_type], filled

