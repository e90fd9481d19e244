"""Run settings, in llama.cpp's spelling and with its defaults, and their validation."""

from __future__ import annotations

from dataclasses import fields, replace
from functools import cached_property
from typing import Literal

from gemma_fit.base.errors import BadInput
from gemma_fit.base.ranges import check_range
from gemma_fit.base.record import record
from gemma_fit.gguf.types import GGMLType, ggml_type
from gemma_fit.model.spec import ModelSpec

FlashAttn = Literal["auto", "on", "off"]
FLASH_ATTN_CHOICES: tuple[FlashAttn, ...] = ("auto", "on", "off")

# -ctk / -ctv values llama.cpp accepts (common/arg.cpp kv_cache_types).
CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
MAX_CTX = 16 * 1024 * 1024  # beyond any Gemma's trained context x 64: certainly a typo


def pad_to(n: int, multiple: int) -> int:
    return (n + multiple - 1) // multiple * multiple


@record
class Speculative:
    """Speculative decoding as asked (--mtp, --draft MODEL[:QUANT], --draft-max, --acceptance) and as resolved by
    engines.speculative: the drafter, its file for the printed command, and the acceptance with its source."""

    method: str  # "mtp" (the model's own Gemma 4 assistant drafter) | "draft" (a smaller model of the family)
    draft_model: str  # model id ("gemma-3-270m", "gemma-4-31B-assistant")
    draft_quant: str
    draft_max: int | None = None  # drafts per step; None: the best for the plan (llama.cpp's default is 3)
    acceptance: float | None = None  # per-draft acceptance; None: the published figure
    acceptance_source: str = ""
    draft_file: str = ""  # the -md file name in the printed command ("": as asked, not resolved yet)
    asked_both: bool = False  # --mtp and --draft together (refused when resolved)

    @property
    def resolved(self) -> bool:
        return bool(self.draft_file)


@record
class RunSettings:
    n_ctx: int = 4096  # 0 = the model's trained context
    n_batch: int = 2048
    n_ubatch: int = 512
    n_parallel: int = 1  # n_seq_max
    kv_unified: bool = False
    flash_attn: FlashAttn = "auto"
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    n_gpu_layers: int | None = None  # None = auto (as many as fit)
    swa_full: bool = False
    kv_offload: bool = True
    n_outputs_max: int = 0  # 0 = n_batch (llama-cli, llama-bench); llama-server uses n_parallel
    mmproj_bytes: int = 0  # a multimodal projector (--mmproj): weights + image-encoder compute, on the main GPU
    mmproj_path: str = ""  # its file, for the printed command
    draft_bytes: int = 0  # a speculative drafter (-md): its weights, KV cache and compute buffer, on the main GPU
    speculative: Speculative | None = None
    images: int = 0  # images per prompt (each takes image_tokens of the context)
    image_tokens: int = 0  # context tokens one image takes (Gemma 3: 256)
    override_tensor: tuple[str, ...] = ()  # -ot values as typed: "PATTERN=BUFFER,PATTERN=BUFFER"
    cpu_moe: bool = False  # --cpu-moe: every layer's routed experts in system memory
    n_cpu_moe: int = 0  # --n-cpu-moe N: the routed experts of layers 0 .. N-1 in system memory
    defaults_from: str = ""  # "llama-server 0c1e570": -c and -np are that engine version's own defaults
    engine_version: str = ""  # the engine version the answer is for, as --engine-version gave it ("": pinned)

    @property
    def has_overrides(self) -> bool:
        return bool(self.override_tensor or self.cpu_moe or self.n_cpu_moe)

    def placement_args(self) -> list[str]:
        """The tensor-placement flags as llama.cpp spells them (--cpu-moe, --n-cpu-moe, -ot)."""
        args = ["--cpu-moe"] if self.cpu_moe else []
        args += ["--n-cpu-moe", str(self.n_cpu_moe)] if self.n_cpu_moe else []
        for value in self.override_tensor:
            args += ["-ot", value]
        return args

    @cached_property
    def _hash(self) -> int:
        return hash(tuple(getattr(self, f) for f in _FIELDS))

    def __hash__(self) -> int:  # a cache key of every estimate: computed once per settings object
        return self._hash

    @cached_property
    def type_k(self) -> GGMLType:
        return ggml_type(self.cache_type_k)

    @cached_property
    def type_v(self) -> GGMLType:
        return ggml_type(self.cache_type_v)

    @property
    def ubatch(self) -> int:
        """llama.cpp clamps n_ubatch to n_batch."""
        return min(self.n_ubatch, self.n_batch)

    @property
    def n_streams(self) -> int:
        return 1 if self.kv_unified else self.n_parallel

    def resolved_ctx(self, model: ModelSpec) -> int:
        """n_ctx as llama.cpp sets it: 0 -> trained context; padded to 256; a multiple of the
        per-stream size when the cache is split into streams (llama_context constructor)."""
        n_ctx = pad_to(self.n_ctx or model.n_ctx_train, 256)
        if self.kv_unified:
            return n_ctx
        return self.ctx_per_stream(model) * self.n_parallel

    def ctx_per_stream(self, model: ModelSpec) -> int:
        n_ctx = pad_to(self.n_ctx or model.n_ctx_train, 256)
        if self.kv_unified:
            return n_ctx
        return pad_to(n_ctx // self.n_parallel, 256)

    def with_ctx(self, n_ctx: int) -> RunSettings:
        """These settings at another context; the same object for the same context (a report asks each
        context on every GPU, and equal objects keep the estimate's caches warm)."""
        return _variant(self, n_ctx)

    @classmethod
    def from_flags(cls, *, n_gpu_layers: str = "auto", flash_attn: str = "auto", **values: object) -> RunSettings:
        """The settings from llama.cpp's flags as typed: -ngl and -fa parsed as llama.cpp parses them, the rest
        by field name (n_ctx, n_batch, override_tensor ...)."""
        for flag, key in (("--cache-type-k", "cache_type_k"), ("--cache-type-v", "cache_type_v")):
            if key in values:
                check_cache_type(flag, str(values[key]))
        return cls(n_gpu_layers=parse_n_gpu_layers(n_gpu_layers), flash_attn=parse_flash_attn(flash_attn),
                   **values)  # type: ignore[arg-type]


_FIELDS = tuple(f.name for f in fields(RunSettings))


def is_llama_cpp(engine: str) -> bool:
    """--engine names that mean llama.cpp itself (the default path, not an engine plan)."""
    return engine.strip().lower() in ("llama.cpp", "llamacpp", "llama-cpp")


def check_cache_type(flag: str, value: str) -> None:
    """A -ctk / -ctv value llama.cpp accepts, else one line naming them, with the closest."""
    if value.lower() not in CACHE_TYPES:
        from gemma_fit.base.suggest import did_you_mean
        from gemma_fit.base.text import printable

        raise BadInput(f"{flag} {printable(value, 40)} is not a llama.cpp cache type ({', '.join(CACHE_TYPES)})"
                       f"{did_you_mean(value.lower(), CACHE_TYPES)}")


def parse_n_gpu_layers(value: str) -> int | None:
    """-ngl as llama.cpp spells it: a number, or auto / all / -1 (as many as fit)."""
    if value.strip().lower() in ("auto", "-1", "all"):
        return None
    try:
        return int(value)
    except ValueError:
        raise BadInput(f"--n-gpu-layers must be a number or 'auto', not '{value}'") from None


def parse_flash_attn(value: str) -> FlashAttn:
    """-fa as llama.cpp spells it: auto, on or off (any case)."""
    for choice in FLASH_ATTN_CHOICES:
        if value.lower() == choice:
            return choice
    from gemma_fit.base.suggest import did_you_mean
    from gemma_fit.base.text import printable

    raise BadInput(f"--flash-attn {printable(value.lower(), 40)} must be auto, on or off"
                   f"{did_you_mean(value.lower(), FLASH_ATTN_CHOICES)}")


MAX_OVERRIDE_LAYERS = 4096  # llama_max_tensor_buft_overrides(): one override per layer


_VARIANTS: dict[tuple[RunSettings, int], RunSettings] = {}
_VALID: dict[tuple[RunSettings, ModelSpec], RunSettings] = {}
_MAX_KEPT = 65536


def _variant(s: RunSettings, n_ctx: int) -> RunSettings:
    key = (s, n_ctx)
    if key not in _VARIANTS:
        if len(_VARIANTS) >= _MAX_KEPT:
            _VARIANTS.clear()
        _VARIANTS[key] = s if s.n_ctx == n_ctx else replace(s, n_ctx=n_ctx)
    return _VARIANTS[key]


def validate(s: RunSettings, model: ModelSpec) -> RunSettings:
    """Reject settings llama.cpp would refuse, with the reason in one line; the settings as llama.cpp reads
    them (cache types in lower case), the same object for the same settings and model."""
    key = (s, model)
    if key not in _VALID:
        if len(_VALID) >= _MAX_KEPT:
            _VALID.clear()
        v = _validate(s, model)
        _VALID[key] = s if v == s else v  # the caller's object when nothing changed: equal settings of every model
        # stay one object, and the caches keyed on them find it by identity instead of comparing ~30 fields
    return _VALID[key]


def validate_shared(s: RunSettings, model: ModelSpec) -> RunSettings:
    """validate's rules for an engine that is not llama.cpp (vLLM, transformers): --parallel is its own number
    there (--max-num-seqs, the batch; base.ranges' --engine-parallel checks it) and --ctx is one request's, not
    split over the sequences as llama-server's -c is, so llama.cpp's 256 sequences do not apply."""
    check_range("--engine-parallel", s.n_parallel, "--parallel")
    return validate(replace(s, n_parallel=1), model)


def _validate(s: RunSettings, model: ModelSpec) -> RunSettings:
    if s.n_ctx < 0 or s.n_ctx > MAX_CTX:
        raise BadInput(f"--ctx {s.n_ctx} is impossible (0 = trained context, at most {MAX_CTX:,})")
    for name, value in (("--batch", s.n_batch), ("--ubatch", s.n_ubatch), ("--parallel", s.n_parallel)):
        if value < 1 or value > MAX_CTX:
            raise BadInput(f"{name} {value} is impossible (must be between 1 and {MAX_CTX:,})")
    if s.n_parallel > 256:
        raise BadInput(f"--parallel {s.n_parallel} is more than llama.cpp's 256 sequences")
    for flag, t in (("--cache-type-k", s.cache_type_k), ("--cache-type-v", s.cache_type_v)):
        check_cache_type(flag, t)
    if s.flash_attn not in ("auto", "on", "off"):
        raise BadInput(f"--flash-attn {s.flash_attn} must be auto, on or off")
    if s.flash_attn == "off" and s.type_v.is_quantized:
        raise BadInput(f"a quantized V cache ({s.cache_type_v}) needs flash attention; use --flash-attn on or auto")
    if s.n_gpu_layers is not None and s.n_gpu_layers < 0:
        raise BadInput(f"--n-gpu-layers {s.n_gpu_layers} is impossible: use 0..{model.n_layer + 1}, more for all "
                       "(llama.cpp clamps -ngl 99), or auto")
    if not 0 <= s.n_cpu_moe <= MAX_OVERRIDE_LAYERS:  # llama.cpp takes any N; past the last layer matches nothing
        raise BadInput(f"--n-cpu-moe {s.n_cpu_moe} is impossible (0 to {MAX_OVERRIDE_LAYERS:,})")
    if (s.cpu_moe or s.n_cpu_moe) and model.n_expert == 0:
        raise BadInput(f"--cpu-moe / --n-cpu-moe move routed experts, and {model.id} has none (a dense model); "
                       "use -ngl to move layers")
    if s.ctx_per_stream(model) < 256:
        raise BadInput("the context per sequence is below llama.cpp's minimum of 256")
    return replace(s, cache_type_k=s.cache_type_k.lower(), cache_type_v=s.cache_type_v.lower())
