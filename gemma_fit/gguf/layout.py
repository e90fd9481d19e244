"""The GGUF file a plan describes: its metadata keys, header size and total file size.

GGUF v3 layout (ggml/src/gguf.cpp): magic, version, tensor count, KV count, the KV pairs, the tensor
infos, padding to the alignment (32 bytes), then each tensor's data padded to the alignment.
llama-quantize writes the tensors in llama.cpp's weight order, which is the plan's order.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from gemma_fit.base.record import record
from gemma_fit.gguf.tensors import TensorPlan, per_plan
from gemma_fit.gguf.value_types import SCALAR_FORMATS, GGUFValueType
from gemma_fit.model.spec import ModelSpec

GGUF_ALIGNMENT = 32
GGUF_FIXED_HEADER_BYTES = 4 + 4 + 8 + 8  # magic, version, n_tensors, n_kv

# The placeholder tokenizer: control tokens, then the 256 byte tokens llama.cpp's SPM vocab needs
# (it looks up "<0x0A>" for the newline), then unused slots.
_CONTROL_TOKENS = ("<pad>", "<eos>", "<bos>", "<unk>")
TOKEN_TYPE_NORMAL, TOKEN_TYPE_CONTROL, TOKEN_TYPE_UNUSED, TOKEN_TYPE_BYTE = 1, 3, 5, 6


def pad(n: int, align: int = GGUF_ALIGNMENT) -> int:
    return (n + align - 1) // align * align


@record
class KV:
    key: str
    value: Any
    vtype: GGUFValueType
    subtype: GGUFValueType | None = None  # for arrays


def placeholder_tokens(n_vocab: int) -> list[str]:
    tokens = list(_CONTROL_TOKENS) + [f"<0x{b:02X}>" for b in range(256)]
    tokens += [f"<unused{i}>" for i in range(n_vocab - len(tokens))]
    return tokens[:n_vocab]


def placeholder_token_types(n_vocab: int) -> list[int]:
    kinds = [TOKEN_TYPE_CONTROL] * len(_CONTROL_TOKENS) + [TOKEN_TYPE_BYTE] * 256
    kinds += [TOKEN_TYPE_UNUSED] * (n_vocab - len(kinds))
    return kinds[:n_vocab]


def _u32(key: str, v: int) -> KV:
    return KV(key, int(v), GGUFValueType.UINT32)


def _f32(key: str, v: float) -> KV:
    return KV(key, float(v), GGUFValueType.FLOAT32)


def _arr(key: str, values: list[Any], sub: GGUFValueType) -> KV:
    return KV(key, values, GGUFValueType.ARRAY, sub)


def _per_layer_or_scalar(key: str, values: list[int]) -> KV:
    if len(set(values)) == 1:
        return _u32(key, values[0])
    return _arr(key, values, GGUFValueType.INT32)


def _swa_keys(m: ModelSpec, a: str) -> list[KV]:
    if not m.has_swa:
        return []
    kvs = [_u32(f"{a}.attention.sliding_window", m.n_swa)]
    if m.arch in ("gemma3n", "gemma4"):
        kvs.append(_arr(f"{a}.attention.sliding_window_pattern", [x.is_swa for x in m.layers],
                        GGUFValueType.BOOL))
    return kvs


def _gemma4_keys(m: ModelSpec, a: str) -> list[KV]:
    swa = next((x for x in m.layers if x.is_swa), m.layers[0])
    full = next((x for x in m.layers if not x.is_swa), m.layers[-1])
    kvs = [
        _u32(f"{a}.attention.shared_kv_layers", m.n_layer - m.n_layer_kv_from_start),
        _u32(f"{a}.embedding_length_per_layer_input", m.n_embd_per_layer),
        _u32(f"{a}.attention.key_length", full.head_dim),
        _u32(f"{a}.attention.value_length", full.head_dim),
        _u32(f"{a}.attention.key_length_swa", swa.head_dim),
        _u32(f"{a}.attention.value_length_swa", swa.head_dim),
        _u32(f"{a}.rope.dimension_count", full.head_dim),
        _u32(f"{a}.rope.dimension_count_swa", swa.head_dim),
    ]
    if m.n_expert:
        kvs += [
            _u32(f"{a}.expert_count", m.n_expert),
            _u32(f"{a}.expert_used_count", m.n_expert_used),
            _u32(f"{a}.expert_feed_forward_length", m.n_ff_exp),
        ]
    return kvs


def _gemma3n_keys(m: ModelSpec, a: str) -> list[KV]:
    kvs = [
        _u32(f"{a}.altup.active_idx", 0),
        _u32(f"{a}.altup.num_inputs", m.n_altup),
        _u32(f"{a}.embedding_length_per_layer_input", m.n_embd_per_layer),
        _u32(f"{a}.attention.shared_kv_layers", m.n_layer - m.n_layer_kv_from_start),
    ]
    if m.activation_sparsity:
        # the converter stores the normal quantile of each sparsity target (0.95 -> 1.6448536)
        from statistics import NormalDist

        scales = [NormalDist().inv_cdf(s) if s > 0 else 0.0 for s in m.activation_sparsity]
        kvs.append(_arr(f"{a}.activation_sparsity_scale", scales, GGUFValueType.FLOAT32))
    return kvs


def model_metadata(m: ModelSpec, file_type_id: int, name: str) -> list[KV]:
    """The architecture keys the converter writes and llama.cpp's loader reads."""
    a = m.arch
    first = m.layers[0]
    kvs = [
        KV("general.architecture", a, GGUFValueType.STRING),
        KV("general.name", name, GGUFValueType.STRING),
        _u32("general.file_type", file_type_id),
        _u32("general.quantization_version", 2),
        _u32(f"{a}.context_length", m.n_ctx_train),
        _u32(f"{a}.embedding_length", m.n_embd),
        _u32(f"{a}.block_count", m.n_layer),
        _per_layer_or_scalar(f"{a}.feed_forward_length", [x.n_ff for x in m.layers]),
        _u32(f"{a}.attention.head_count", first.n_head),
        _per_layer_or_scalar(f"{a}.attention.head_count_kv", [x.n_head_kv for x in m.layers]),
        _f32(f"{a}.attention.layer_norm_rms_epsilon", m.rms_norm_eps),
    ]
    if a != "gemma4":
        kvs += [_u32(f"{a}.attention.key_length", first.head_dim),
                _u32(f"{a}.attention.value_length", first.head_dim)]
    if a != "gemma":
        kvs.append(_f32(f"{a}.rope.freq_base", m.rope_theta))
    if a in ("gemma3", "gemma3n", "gemma4"):
        kvs.append(_f32(f"{a}.rope.freq_base_swa", m.rope_theta_swa))
    if m.attn_logit_softcap:
        kvs.append(_f32(f"{a}.attn_logit_softcapping", m.attn_logit_softcap))
    if m.final_logit_softcap:
        kvs.append(_f32(f"{a}.final_logit_softcapping", m.final_logit_softcap))
    kvs += _swa_keys(m, a)
    if a == "gemma3n":
        kvs += _gemma3n_keys(m, a)
    if a == "gemma4":
        kvs += _gemma4_keys(m, a)
    return kvs


def tokenizer_metadata(n_vocab: int) -> list[KV]:
    """A placeholder SentencePiece-style vocabulary of the model's exact size."""
    return [
        KV("tokenizer.ggml.model", "llama", GGUFValueType.STRING),
        KV("tokenizer.ggml.pre", "default", GGUFValueType.STRING),
        _arr("tokenizer.ggml.tokens", placeholder_tokens(n_vocab), GGUFValueType.STRING),
        _arr("tokenizer.ggml.scores", [0.0] * n_vocab, GGUFValueType.FLOAT32),
        _arr("tokenizer.ggml.token_type", placeholder_token_types(n_vocab), GGUFValueType.INT32),
        _u32("tokenizer.ggml.bos_token_id", 2),
        _u32("tokenizer.ggml.eos_token_id", 1),
        _u32("tokenizer.ggml.unknown_token_id", 3),
        _u32("tokenizer.ggml.padding_token_id", 0),
        KV("tokenizer.ggml.add_bos_token", True, GGUFValueType.BOOL),
        KV("tokenizer.ggml.add_space_prefix", False, GGUFValueType.BOOL),
    ]


def _string_bytes(s: str) -> int:
    return 8 + len(s.encode("utf-8"))


def kv_bytes(kv: KV) -> int:
    """Bytes of one KV pair in the file: key string, value type, value."""
    n = _string_bytes(kv.key) + 4
    if kv.vtype == GGUFValueType.STRING:
        return n + _string_bytes(kv.value)
    if kv.vtype == GGUFValueType.ARRAY:
        assert kv.subtype is not None
        n += 4 + 8
        if kv.subtype == GGUFValueType.STRING:
            return n + sum(_string_bytes(s) for s in kv.value)
        return n + SCALAR_FORMATS[kv.subtype][1] * len(kv.value)
    return n + SCALAR_FORMATS[kv.vtype][1]


@cache
def tensor_info_bytes(plan: TensorPlan) -> int:
    """name string, n_dims, dims, type, offset for each tensor."""
    return sum(_string_bytes(t.name) + 4 + 8 * len(t.shape) + 4 + 8 for t in plan.tensors)


@cache
def tensor_data_padded_bytes(plan: TensorPlan) -> int:
    return sum(pad(t.n_bytes) for t in plan.tensors)


def header_bytes(kvs: list[KV], plan: TensorPlan) -> int:
    """Everything before the tensor data, padded to the alignment."""
    return pad(GGUF_FIXED_HEADER_BYTES + sum(kv_bytes(kv) for kv in kvs) + tensor_info_bytes(plan))


def synth_metadata(plan: TensorPlan) -> list[KV]:
    m = plan.model
    return model_metadata(m, plan.ftype.id, m.name) + tokenizer_metadata(m.n_vocab)


def synth_file_bytes(plan: TensorPlan) -> int:
    """Exact size of the zero-weight file `gemma-fit synth` writes for this plan."""
    return header_bytes(synth_metadata(plan), plan) + tensor_data_padded_bytes(plan)


_GENERATION_BY_ARCH = {"gemma": "1", "gemma2": "2", "gemma3": "3", "gemma3n": "3n", "gemma4": "4"}


@cache
def _metadata_table() -> dict[str, Any]:
    from gemma_fit.db.rules import read_packaged_yaml

    return read_packaged_yaml("llamacpp/gguf_metadata.yaml")


def real_metadata_bytes(arch: str, n_vocab: int) -> int:
    """Estimated metadata size of a real file (model_db/llamacpp/gguf_metadata.yaml)."""
    data = _metadata_table()
    gen = data["generations"].get(_GENERATION_BY_ARCH.get(arch, ""))
    if gen is None:  # not a Gemma generation (a llama or qwen GGUF): no published figure, size it by the vocabulary
        return n_vocab * int(data["extra_token_bytes"])
    return int(gen["metadata_bytes"]) + max(0, n_vocab - int(gen["n_tokens"])) * int(data["extra_token_bytes"])


@per_plan(256)  # a report asks it for every cell of a plan
def estimated_file_bytes(plan: TensorPlan) -> int:
    """Size of the GGUF llama-quantize writes: exact tensor data and infos, estimated metadata."""
    meta = real_metadata_bytes(plan.model.arch, plan.model.n_vocab)
    return pad(GGUF_FIXED_HEADER_BYTES + meta + tensor_info_bytes(plan)) + tensor_data_padded_bytes(plan)
