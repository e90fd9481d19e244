"""A ModelSpec and a TensorPlan from a real GGUF file's header (`gemma-fit inspect`, `check --gguf`).

The spec reads the hparams the way llama.cpp's loader does (src/llama-model.cpp load_hparams and
src/models/<arch>.cpp load_arch_hparams): per-layer arrays or scalars, llama.cpp's defaults where a
key is optional, and the tensors themselves where they decide the layout (vocabulary size, tied
output, attn_v presence, experts). For a file gemma-fit synthesized, the spec equals the one
model_spec.spec_from_config derives from the same model's config. The plan lists the file's real
tensors with their real types, in file order.
"""

from __future__ import annotations

import builtins
import re
import struct
from collections import Counter
from pathlib import Path
from statistics import NormalDist
from typing import Any

from gemma_fit.base.errors import BadInput
from gemma_fit.base.text import printable
from gemma_fit.gguf.parse import bad_input
from gemma_fit.gguf.reader import GGUFHeader
from gemma_fit.gguf.tensors import TensorPlan, TensorSpec
from gemma_fit.gguf.types import FileType, GGMLType, file_types
from gemma_fit.model.limits import MAX_CTX, MAX_FFN, MAX_HEAD_DIM, MAX_HEADS, MAX_HIDDEN
from gemma_fit.model.spec import GEMMA3N_KV_LAYERS, GEMMA_ARCHS, SWA_PERIOD, LayerSpec, ModelSpec

DENSE_ARCHS = ("llama", "qwen2", "qwen3", "mistral3")
SUPPORTED_ARCHS = GEMMA_ARCHS + DENSE_ARCHS

_GEMMA3N_ALTUP, _GEMMA3N_LAUREL_RANK, _GEMMA3N_EMBD_ALTUP = 4, 64, 256  # llama-hparams.h defaults
_LLAMA_FTYPE_GUESSED = 1024
# llama.cpp's own bounds (src/llama-hparams.h), asserted in llama_model::load_hparams: a file past them
# aborts llama.cpp, and each layer multiplies gemma-fit's work (plans, placements, speed), so they are
# checked before any per-layer work. The deepest real models have 126 (Llama-3.1-405B) to 162 layers.
MAX_LAYERS = 512  # LLAMA_MAX_LAYERS
MAX_EXPERTS = 1024  # LLAMA_MAX_EXPERTS

_INPUT_TENSORS = ("token_embd.weight", "per_layer_token_embd.weight")
_OUTPUT_TENSORS = ("output.weight", "output_norm.weight", "altup_proj.weight", "altup_unembd_proj.weight")
_LAYER0_TENSORS = ("per_layer_model_proj.weight", "per_layer_proj_norm.weight")
_BLK = re.compile(r"^blk\.(\d+)\.")
_SPLIT_SUFFIX = re.compile(r"-\d{5}-of-\d{5}$")


def is_mmproj(h: GGUFHeader) -> bool:
    """A multimodal projector (vision/audio tower) file rather than a language model."""
    return h.metadata.get("general.architecture") == "clip"


def mmproj_bytes(h: GGUFHeader) -> int:
    """Bytes of all tensors of an mmproj file (what llama.cpp loads for the projector)."""
    return h.tensor_data_bytes


def _f32(x: float) -> float:
    """The shortest decimal that reads back as the same float32 (1e-06, not 9.999999974752427e-07)."""
    want = struct.pack("<f", x)
    for digits in range(1, 10):
        y = float(f"{x:.{digits}g}")
        if struct.pack("<f", y) == want:
            return y
    return x


def _show(v: Any) -> str:
    """A metadata value in a message: short, escaped, and cheap even for a 4-million-element array."""
    if isinstance(v, tuple):
        return f"an array of {len(v)} values"
    return printable(repr(v), 60)


class _Keys:
    """Typed access to an architecture's keys, with the file's name in every error."""

    def __init__(self, h: GGUFHeader, arch: str) -> None:
        self.h, self.arch, self.md = h, arch, h.metadata

    def fail(self, what: str) -> BadInput:
        return bad_input(str(self.h.path), what)

    def full(self, key: str) -> str:
        return key.replace("{a}", self.arch)

    def get(self, key: str) -> Any:
        return self.md.get(self.full(key))

    def int(self, key: str, default: int | None = None) -> int:
        v = self.get(key)
        if v is None:
            if default is None:
                raise self.fail(f"missing key {self.full(key)}")
            return default
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise self.fail(f"{self.full(key)} must be a non-negative integer, not {_show(v)}")
        return v

    def float(self, key: str, default: float) -> float:
        v = self.get(key)
        if v is None:
            return default
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v:
            raise self.fail(f"{self.full(key)} must be a number, not {_show(v)}")
        return _f32(float(v)) if self.h.metadata_types.get(self.full(key)) == "FLOAT32" else float(v)

    def per_layer(self, key: str, n: builtins.int, default: builtins.int | None = None) -> list[builtins.int]:
        """llama.cpp's get_key_or_arr: a scalar for every layer, or one value per layer."""
        v = self.get(key)
        if isinstance(v, tuple):
            if len(v) != n:
                raise self.fail(f"{self.full(key)} has {len(v)} values for {n} layers")
            if not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in v):
                raise self.fail(f"{self.full(key)} must hold non-negative integers")
            return list(v)
        return [self.int(key, default)] * n

    def swa_pattern(self, n: builtins.int, period: builtins.int | None) -> list[bool]:
        """llama.cpp's load_swa_pattern: a bool array, else a period (key or arch default)."""
        v = self.get("{a}.attention.sliding_window_pattern")
        if isinstance(v, tuple):
            if len(v) != n:
                raise self.fail(f"{self.full('{a}.attention.sliding_window_pattern')} has {len(v)} values "
                                f"for {n} layers")
            return [bool(x) for x in v]
        if v is not None:
            period = self.int("{a}.attention.sliding_window_pattern")
        if period is None:
            raise self.fail(f"missing key {self.full('{a}.attention.sliding_window_pattern')}")
        return [period == 0 or il % period < period - 1 for il in range(n)]


def _model_id(h: GGUFHeader) -> str:
    stem = h.path.name.removesuffix(".gguf")
    return _SPLIT_SUFFIX.sub("", stem) or stem


def _tensor_shape(h: GGUFHeader, name: str) -> tuple[int, ...] | None:
    t = h.tensor(name)
    return t.shape if t is not None else None


def _n_vocab(h: GGUFHeader, k: _Keys) -> int:
    shape = _tensor_shape(h, "token_embd.weight")
    if shape is not None and len(shape) >= 2:
        return shape[1]
    tokens = h.metadata.get("tokenizer.ggml.tokens")
    if isinstance(tokens, tuple) and tokens:
        return len(tokens)
    return k.int("{a}.vocab_size")


def _gemma_swa(k: _Keys, arch: str, n: int) -> tuple[int, list[bool]]:
    """(n_swa, is_swa per layer) as the arch's load_arch_hparams sets them."""
    if arch == "gemma":
        return 0, [False] * n
    if arch == "gemma2":
        return k.int("{a}.attention.sliding_window", 4096), k.swa_pattern(n, SWA_PERIOD[arch])
    if arch == "gemma3":
        n_swa = k.int("{a}.attention.sliding_window", 0)
        if n_swa == 0:
            return 0, [False] * n
        return n_swa, k.swa_pattern(n, SWA_PERIOD[arch])
    if arch == "gemma3n":
        return k.int("{a}.attention.sliding_window"), k.swa_pattern(n, SWA_PERIOD[arch])
    return k.int("{a}.attention.sliding_window"), k.swa_pattern(n, None)  # gemma4: the array is required


def _has_kv_layers(k: _Keys, arch: str, n: int) -> int:
    if arch == "gemma3n":
        return min(n, GEMMA3N_KV_LAYERS)
    if arch == "gemma4":
        shared = k.int("{a}.attention.shared_kv_layers", 0)
        if shared > n:
            raise k.fail(f"{k.full('{a}.attention.shared_kv_layers')} is {shared} but the model has {n} layers")
        return n - shared
    return n


def _has_v_proj(h: GGUFHeader, n: int, is_swa: list[bool]) -> list[bool]:
    """attn_v present (or a fused attn_qkv). A layer without attn_k either (KV-shared layer whose
    projections were dropped) follows the other layers of its kind."""
    has_k = [h.tensor(f"blk.{il}.attn_k.weight") is not None for il in range(n)]
    has_v = [h.tensor(f"blk.{il}.attn_v.weight") is not None or h.tensor(f"blk.{il}.attn_qkv.weight") is not None
             for il in range(n)]
    for kind in (True, False):
        owners = [has_v[il] for il in range(n) if is_swa[il] == kind and (has_k[il] or has_v[il])]
        default = owners[0] if owners else True
        for il in range(n):
            if is_swa[il] == kind and not has_k[il] and not has_v[il]:
                has_v[il] = default
    return has_v


def _activation_sparsity(k: _Keys) -> tuple[float, ...]:
    scales = k.get("{a}.activation_sparsity_scale")
    if not isinstance(scales, tuple):
        return ()
    # the converter stores the standard normal quantile of each sparsity target (0.95 -> 1.6448536)
    return tuple(round(NormalDist().cdf(_f32(float(s))), 6) if s else 0.0 for s in scales)


def _query_pre_attn_scalar(arch: str, n: int, n_embd: int, n_head: int, head_dim: int) -> float:
    """What llama.cpp scales Q by (1/sqrt of this): gemma2/3 27B use n_embd/n_head, the others head_dim."""
    if arch == "gemma2" and n == 46 or arch == "gemma3" and n == 62:
        return float(n_embd // n_head)
    if arch in ("gemma2", "gemma3"):
        return float(head_dim)
    return 0.0


def _check_tensors(h: GGUFHeader, k: _Keys, n: int) -> None:
    """What llama.cpp's loader refuses in the tensor list: no token embedding, a blk.N tensor past the
    last layer (llama.cpp: "wrong number of tensors"), a layer with no tensors at all (a required
    tensor missing). O(tensors), before any per-layer work."""
    if h.tensor("token_embd.weight") is None:
        raise k.fail("missing tensor 'token_embd.weight'")
    seen = [False] * n
    for t in h.tensors:
        m = _BLK.match(t.name)
        if m is None:
            continue
        il = int(m.group(1))
        if il >= n:
            raise k.fail(f"tensor '{printable(t.name, 80)}' is for layer {il}, but {k.full('{a}.block_count')} "
                         f"is {n}")
        seen[il] = True
    if not all(seen):
        raise k.fail(f"layer {seen.index(False)} has no tensors ({k.full('{a}.block_count')} is {n})")


def _within(k: _Keys, key: str, value: int, high: int, low: int = 1) -> int:
    """A size the plan builds on, within the limits a config.json's sizes have (model.limits): a hostile header's 0
    or 2**32-1 is refused here, not met as a division by zero or a tensor of 2**32 columns later."""
    if not low <= value <= high:
        raise k.fail(f"{k.full(key)} is {value:,} (gemma-fit plans for {low} to {high:,})")
    return value


def spec_from_gguf(h: GGUFHeader) -> ModelSpec:
    """llama.cpp's view of the language model in a GGUF file."""
    arch = h.metadata.get("general.architecture")
    if is_mmproj(h):
        raise bad_input(str(h.path), "is a multimodal projector (mmproj) file, not a language model; "
                        "pass it with --mmproj")
    if not isinstance(arch, str):
        raise bad_input(str(h.path), "missing key general.architecture")
    if arch not in SUPPORTED_ARCHS:
        raise bad_input(str(h.path), f"architecture '{printable(arch, 80)}' is not supported (supported: "
                        f"{', '.join(SUPPORTED_ARCHS)})")
    k = _Keys(h, arch)
    gemma = arch in GEMMA_ARCHS
    n = k.int("{a}.block_count")
    if not 1 <= n <= MAX_LAYERS:
        raise k.fail(f"{k.full('{a}.block_count')} is {n} (llama.cpp loads 1 to {MAX_LAYERS} layers)")
    _check_tensors(h, k, n)
    n_embd = k.int("{a}.embedding_length")
    n_head = k.per_layer("{a}.attention.head_count", n)
    n_head_kv = k.per_layer("{a}.attention.head_count_kv", n) if k.get(
        "{a}.attention.head_count_kv") is not None else list(n_head)  # llama.cpp: defaults to n_head
    n_ff = k.per_layer("{a}.feed_forward_length", n, 0)
    if n_embd == 0 or n_head[0] == 0:
        raise k.fail(f"embedding_length {n_embd} and head_count {n_head[0]} must be positive")
    head_k = k.int("{a}.attention.key_length", n_embd // n_head[0])
    head_k_swa = k.int("{a}.attention.key_length_swa", head_k)
    # llama/qwen2/qwen3/mistral3 have no sliding-window attention in llama.cpp (a sliding_window key is ignored)
    n_swa, is_swa = _gemma_swa(k, arch, n) if gemma else (0, [False] * n)
    for il in range(n):
        if n_head[il] < 1 or not 1 <= n_head_kv[il] <= n_head[il]:
            raise k.fail(f"layer {il} has {n_head[il]} attention heads and {n_head_kv[il]} KV heads")
    if head_k < 1 or head_k_swa < 1:
        raise k.fail(f"head size {head_k} (SWA layers: {head_k_swa}) must be positive")
    _within(k, "{a}.embedding_length", n_embd, MAX_HIDDEN)
    _within(k, "{a}.attention.head_count", max(n_head), MAX_HEADS)
    _within(k, "{a}.attention.key_length", max(head_k, head_k_swa), MAX_HEAD_DIM)
    _within(k, "{a}.feed_forward_length", max(n_ff), MAX_FFN, low=0)
    n_ctx_train = _within(k, "{a}.context_length", k.int("{a}.context_length"), MAX_CTX)
    kv_layers = _has_kv_layers(k, arch, n)
    has_v = _has_v_proj(h, n, is_swa)
    layers = tuple(
        LayerSpec(
            index=il,
            is_swa=is_swa[il],
            n_head=n_head[il],
            n_head_kv=n_head_kv[il],
            head_dim=head_k_swa if is_swa[il] else head_k,
            n_ff=n_ff[il],
            has_kv=il < kv_layers,
            has_v_proj=has_v[il],
            has_experts=h.tensor(f"blk.{il}.ffn_gate_inp.weight") is not None,
        )
        for il in range(n)
    )
    n_expert = k.int("{a}.expert_count", 0)
    n_expert_used = max(k.per_layer("{a}.expert_used_count", n, 0)) if n_expert else 0
    if n_expert > MAX_EXPERTS or n_expert and not 1 <= n_expert_used <= n_expert:
        raise k.fail(f"{n_expert} experts with {n_expert_used} used a token (llama.cpp: at most {MAX_EXPERTS} "
                     "experts, and 1 to all of them used)")
    n_ff_exp = max(k.per_layer("{a}.expert_feed_forward_length", n, 0)) if n_expert else 0
    n_embd_per_layer = 0
    ple_norm = _tensor_shape(h, "per_layer_proj_norm.weight")
    if ple_norm is not None:
        n_embd_per_layer = ple_norm[0]
    elif arch in ("gemma3n", "gemma4"):
        default = _GEMMA3N_EMBD_ALTUP if arch == "gemma3n" else 0
        n_embd_per_layer = k.int("{a}.embedding_length_per_layer_input", default)
    n_altup = laurel_rank = 0
    if arch == "gemma3n":
        n_altup = k.int("{a}.altup.num_inputs", _GEMMA3N_ALTUP)
        laurel = _tensor_shape(h, "blk.0.laurel_l.weight")
        laurel_rank = laurel[1] if laurel is not None and len(laurel) >= 2 else _GEMMA3N_LAUREL_RANK
    rope_theta = k.float("{a}.rope.freq_base", 10000.0)
    # llama.cpp: gemma2 defaults the SWA base to the full one; the rest default to 10000
    rope_theta_swa = k.float("{a}.rope.freq_base_swa", rope_theta if arch == "gemma2" or not gemma else 10000.0)
    # llama-hparams.h defaults (50, 30); gemma3 resets the final one to 0; only gemma2 caps attention logits
    attn_cap = k.float("{a}.attn_logit_softcapping", 50.0) if arch == "gemma2" else 0.0
    final_cap = k.float("{a}.final_logit_softcapping", 30.0) if arch in ("gemma2", "gemma3n", "gemma4") else (
        k.float("{a}.final_logit_softcapping", 0.0) if arch == "gemma3" else 0.0)
    name = h.metadata.get("general.name")
    model_id = _model_id(h)
    return ModelSpec(
        id=model_id,
        name=name if isinstance(name, str) and name else model_id,
        arch=arch,
        n_embd=n_embd,
        n_vocab=_n_vocab(h, k),
        n_ctx_train=n_ctx_train,
        n_swa=n_swa,
        layers=layers,
        n_expert=n_expert,
        n_expert_used=n_expert_used,
        n_ff_exp=n_ff_exp,
        n_embd_per_layer=n_embd_per_layer,
        n_altup=n_altup,
        laurel_rank=laurel_rank,
        rms_norm_eps=k.float("{a}.attention.layer_norm_rms_epsilon", 1e-6 if gemma else 1e-5),
        rope_theta=rope_theta,
        rope_theta_swa=rope_theta_swa,
        attn_logit_softcap=attn_cap,
        final_logit_softcap=final_cap,
        query_pre_attn_scalar=_query_pre_attn_scalar(arch, n, n_embd, n_head[0], head_k),
        tied_embeddings=h.tensor("output.weight") is None,
        activation_sparsity=_activation_sparsity(k) if arch == "gemma3n" else (),
    )


def _placement(name: str, first_full: int) -> tuple[int | None, str]:
    m = _BLK.match(name)
    if m:
        return int(m.group(1)), "layer"
    if name in _INPUT_TENSORS:
        return None, "input"
    if name in _OUTPUT_TENSORS:
        return None, "output"
    if name in _LAYER0_TENSORS:
        return 0, "layer"
    if name.startswith("rope_freqs."):
        return first_full, "layer"  # llama.cpp creates it with the first full-attention layer
    return None, "layer"


def _file_type(h: GGUFHeader) -> FileType:
    by_id = {ft.id: ft for ft in file_types().values() if not (ft.recipe or ft.mix_of)}  # llama-quantize's own names
    ft_id = h.metadata.get("general.file_type")
    if isinstance(ft_id, int) and not isinstance(ft_id, bool):
        ft = by_id.get(ft_id & ~_LLAMA_FTYPE_GUESSED)
        if ft is not None:
            return ft
    # no (known) file type: the most common type among the weight matrices
    weights = [t.ggml_type for t in h.tensors if len(t.shape) >= 2] or [t.ggml_type for t in h.tensors]
    if not weights:
        raise bad_input(str(h.path), "holds no tensors")
    common: GGMLType = Counter(weights).most_common(1)[0][0]
    candidates = [ft for ft in file_types().values() if ft.default_type == common]
    medium = [ft for ft in candidates if ft.name.endswith("_M")]
    if medium or candidates:
        return (medium or candidates)[0]
    return FileType(name=common.name, id=-1, default_type=common)


def plan_from_gguf(h: GGUFHeader, spec: ModelSpec) -> TensorPlan:
    """The file's tensors (real names, shapes, types, file order) placed as llama.cpp places them."""
    full = [layer.index for layer in spec.layers if not layer.is_swa]
    first_full = full[0] if full else 0
    tensors = []
    for t in h.tensors:
        layer, role = _placement(t.name, first_full)
        tensors.append(TensorSpec(t.name, t.shape, t.ggml_type, layer, role))
    return TensorPlan(model=spec, ftype=_file_type(h), tensors=tuple(tensors))


def model_from_gguf(path: str | Path) -> tuple[GGUFHeader, ModelSpec, TensorPlan]:
    """Read a file's header and derive its spec and plan in one call."""
    from gemma_fit.gguf.reader import read_gguf_header

    h = read_gguf_header(path)
    spec = spec_from_gguf(h)
    return h, spec, plan_from_gguf(h, spec)
