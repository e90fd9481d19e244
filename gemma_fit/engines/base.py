"""What every engine shares: the Engine protocol, what a check asks of an engine (`CheckRequest`), the one answer
every engine gives (`CheckResult`), and the settings and per-device memory of the engines beyond llama.cpp.

An engine is one object (`engines.registry.ENGINES` lists them): its name and aliases, its default quant, its own
options (a frozen dataclass whose fields are the options it takes), its defaults, its estimate and its printed
command. `CheckResult.detail` holds what is the engine's own (llama.cpp's plan, or an engine's accounting);
everything a renderer or a ranking needs is on the result itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field, fields, replace
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from gemma_fit.base.errors import BadInput
from gemma_fit.base.ranges import check_optional, check_range
from gemma_fit.base.record import record
from gemma_fit.base.units import GIB
from gemma_fit.base.verdict import Verdict
from gemma_fit.gguf.tensors import TensorPlan
from gemma_fit.hardware.spec import Hardware
from gemma_fit.memory.fit import SAFETY_MARGIN_BYTES
from gemma_fit.memory.settings import RunSettings
from gemma_fit.model.catalog import ResolvedModel
from gemma_fit.speed.predict import Performance
from gemma_fit.speed.traffic import Traffic


@record
class Workload:
    """What the user will run on a plan: the prompt, images per prompt, the traffic."""

    prompt_tokens: int = 512
    traffic: Traffic = field(default_factory=Traffic)
    images: int | None = None  # images per prompt; None: not asked
    mmproj: Path | None = None  # a multimodal projector GGUF loaded beside the model (llama.cpp --mmproj)


@record
class Unmodelled:
    """Bytes a published file holds beyond what its tensor plan places (an Ollama blob's towers), kept free."""

    bytes: int
    note: str


@record
class CheckRequest:
    """One model, quant, settings and hardware, as every engine is asked them."""

    resolved: ResolvedModel
    quant: str | None  # None: the engine's default
    settings: RunSettings  # llama.cpp's options; each engine maps them onto its own
    hardware: Hardware
    workload: Workload = field(default_factory=Workload)
    options: Mapping[str, Any] = field(default_factory=dict)  # the engine's own options by field name; unset: absent
    margin_bytes: int = SAFETY_MARGIN_BYTES  # kept free on each GPU (--margin)
    plan: TensorPlan | None = None  # the tensors of a real GGUF header, instead of the database's
    gguf_path: Path | None = None  # that file as the user gave it, for the printed command
    unmodelled: Unmodelled | None = None
    # the answer a compact report cell shows: neither the serving answer at the -np slots (a tenth of the work) nor
    # the reasons, so nor the suggestion of what would fit instead among them (a sixth); verdict and figures the same
    compact: bool = False
    parallel_given: bool = False  # --parallel typed: vLLM then takes 1 as --max-num-seqs 1, not as "its default"


D = TypeVar("D")


@record
class CheckResult(Generic[D]):
    """Every engine's answer: will it run, why, how far the context goes, how fast, and the command.
    `detail` is the engine's own: llama.cpp's plan (engines.llamacpp.LlamaCppPlan) or an engine's
    accounting (EnginePlan)."""

    engine: str
    resolved: ResolvedModel
    quant: str  # as the engine names it (Q4_K_M, bf16)
    hardware: Hardware
    verdict: Verdict
    reasons: tuple[str, ...]
    max_ctx_fit: int
    n_ctx: int  # the context the answer is for (llama.cpp: all slots; the others: per sequence)
    command: str
    performance: Performance | None  # None: no speed model for this hardware
    detail: D


class Engine(Protocol):
    """An inference engine gemma-fit plans for. A new engine is one module defining one of these and one line in
    engines.registry."""

    @property
    def name(self) -> str:
        """As --engine spells it."""
        ...

    @property
    def aliases(self) -> tuple[str, ...]: ...

    @property
    def default_quant(self) -> str: ...

    @property
    def options(self) -> type:
        """Its own options: a frozen dataclass whose fields are the option names it takes."""
        ...

    @property
    def ranks_plans(self) -> bool:
        """recommend and buy can rank its plans (they are llama.cpp's)."""
        ...

    def default_n_ctx(self) -> int:
        """The context when the user gives none: a number, or 0 for the engine's own default."""
        ...

    def version_label(self, version: str | None) -> str:
        """The engine version an answer is for ("vLLM 0.33.0"): `version` as --engine-version gave it, or the one
        gemma-fit's rules are read from; BadInput for a version it has no rules for."""
        ...

    def with_defaults(self, request: CheckRequest) -> CheckRequest:
        """The request as the engine (the version in settings.engine_version) runs it with neither a context nor a
        number of parallel requests given: its own defaults, named in settings.defaults_from."""
        ...

    def canonical_quant(self, quant: str) -> str:
        """The engine's name for a quant; BadInput for one it does not load."""
        ...

    def validate(self, request: CheckRequest) -> None:
        """Refuse impossible numbers (BadInput, one line) before any estimate."""
        ...

    def estimate(self, request: CheckRequest) -> CheckResult[Any]:
        """The plan and its answer (what a matrix of checks needs)."""
        ...

    def check(self, request: CheckRequest) -> CheckResult[Any]:
        """The complete answer of one check: the estimate and whatever the engine adds (advice)."""
        ...


class PlanEngine(Engine, Protocol):
    """An engine whose plans are llama.cpp's (`ranks_plans`): recommend and buy rank them, and it says how they
    run through it."""

    def offered_quants(self, resolved: ResolvedModel, ladder: tuple[str, ...]) -> tuple[str, ...]:
        """The file types of `ladder` it can load for this model."""
        ...

    def loads_vision_tower(self, resolved: ResolvedModel) -> bool:
        """Whether it loads the model's vision projector even when no image is asked for."""
        ...

    def plan_command(self, r: CheckResult[Any], n_parallel: int) -> str:
        """The command that runs a llama.cpp plan through this engine."""
        ...


Opts = TypeVar("Opts")


def option_names(kind: type) -> frozenset[str]:
    """The options an engine takes: the fields of its options dataclass."""
    return frozenset(f.name for f in fields(kind))


def engine_options(kind: type[Opts], given: Mapping[str, Any]) -> Opts:
    """The engine's own options from the ones given (None: unset); engines.registry has already refused the
    options of other engines, with whose they are."""
    set_ = {k: v for k, v in given.items() if v is not None}
    unknown = sorted(k for k in set_ if k not in option_names(kind))
    if unknown:
        raise BadInput(f"unknown engine option(s): {', '.join(unknown)}")
    return replace(kind(), **set_) if set_ else kind()  # type: ignore[type-var]


def hf_kv_dtype(cache_type_k: str) -> str:
    """--cache-type-k as vLLM and transformers name a KV cache type: f16/bf16 -> auto, q8_* -> fp8."""
    t = cache_type_k.lower()
    if t in ("f16", "bf16"):
        return "auto"
    return "fp8" if t.startswith("q8") else t


@record
class EngineSettings(Generic[Opts]):
    """Settings of one engine run beyond llama.cpp: what every engine takes, and `options`, its own."""

    engine: str
    quant: str  # HF weight format (vLLM, transformers) or a llama.cpp file type (Ollama)
    options: Opts
    max_model_len: int = 0  # vLLM --max-model-len / Ollama num_ctx / transformers prompt+new tokens; 0 = default
    max_num_seqs: int | None = None  # vLLM --max-num-seqs, OLLAMA_NUM_PARALLEL; None = the engine's default
    kv_cache_dtype: str = "auto"  # vLLM auto|fp8 ; transformers auto ; Ollama f16|q8_0|q4_0
    prompt_tokens: int = 512
    images_per_prompt: int = 0  # multimodal: images per request (0 = text only)
    mmproj: bool = False  # load the vision/audio towers
    flash_attention: bool | None = None  # Ollama OLLAMA_FLASH_ATTENTION (None = its default)
    output_tokens: int | None = None  # per request (serving): None = decode throughput only
    request_rate: float | None = None  # requests per second (serving): None = closed loop at --parallel
    defaults_from: str = ""  # the engine version whose own defaults stand for the context and the parallel requests
    engine_version: str = ""  # the engine version the answer is for ("vLLM 0.33.0")
    speculative: Any = None  # memory.settings.Speculative resolved (--mtp): vLLM's --speculative-config


def engine_settings(engine: str, quant: str, settings: RunSettings, workload: Workload, options: Opts,
                    flash_attn_used: bool = False, **common: Any) -> EngineSettings[Opts]:
    """The settings every engine beyond llama.cpp shares, from llama.cpp's options and the workload; llama.cpp's
    placement and kernel options, which none of them takes (-fa but where `flash_attn_used`: Ollama's), refused."""
    refuse_llamacpp_only(replace(settings, flash_attn="auto") if flash_attn_used else settings,
                         {"vllm": "vLLM", "ollama": "Ollama"}.get(engine, engine))
    return EngineSettings(engine=engine, quant=quant, options=options, max_model_len=settings.n_ctx,
                          mmproj=workload.mmproj is not None, images_per_prompt=workload.images or 0,
                          prompt_tokens=workload.prompt_tokens, output_tokens=workload.traffic.output_tokens,
                          request_rate=workload.traffic.rate_per_s, defaults_from=settings.defaults_from,
                          speculative=settings.speculative,
                          engine_version=settings.engine_version, **common)


@record
class EngineDevice:
    """Memory of one device as the engine sees it. `kv_cache_bytes` for vLLM is the pool it allocates."""

    id: str
    name: str
    weights_bytes: int
    kv_cache_bytes: int
    activation_bytes: int  # peak activations / compute buffer
    cuda_graph_bytes: int
    overhead_bytes: int  # CUDA context, allocator, non-torch memory, engine reserves
    capacity_bytes: int
    draft_bytes: int = 0  # a speculative drafter's weights and buffers (--mtp)

    @property
    def total_bytes(self) -> int:
        return (self.weights_bytes + self.kv_cache_bytes + self.activation_bytes + self.cuda_graph_bytes
                + self.overhead_bytes + self.draft_bytes)

    @property
    def headroom_bytes(self) -> int:
        return self.capacity_bytes - self.total_bytes


@record
class EnginePlan:
    """An engine's own accounting of a check (Ollama, vLLM, transformers): `CheckResult.detail`."""

    settings: EngineSettings[Any]
    devices: tuple[EngineDevice, ...]
    n_params: int
    weights_total_bytes: int
    host: dict[str, Any] | None = None
    extras: dict[str, Any] = field(default_factory=dict)
    sources: tuple[str, ...] = ()
    settings_terms: dict[str, Any] = field(default_factory=dict)  # its settings in llama.cpp's names (n_batch ...)

    @property
    def n_parallel(self) -> int:
        x = self.extras
        return int(x.get("max_num_seqs") or x.get("OLLAMA_NUM_PARALLEL") or x.get("batch_size") or 1)


def fits_verdict(devices: tuple[EngineDevice, ...], tight_margin: int = GIB) -> Verdict:
    if any(d.headroom_bytes < 0 for d in devices):
        return Verdict.NO_GO
    if any(d.headroom_bytes < tight_margin for d in devices):
        return Verdict.TIGHT
    return Verdict.GO


def validate_numbers(s: EngineSettings[Any]) -> None:
    """The numbers every engine takes, before any engine rule: one line naming the option (--ctx is
    max_model_len / num_ctx, --parallel max_num_seqs / OLLAMA_NUM_PARALLEL), then the engine's own."""
    check_range("--ctx", s.max_model_len)
    check_optional("--engine-parallel", s.max_num_seqs, "--parallel")
    check_range("--prompt-tokens", s.prompt_tokens)
    check_range("--images", s.images_per_prompt)
    for f in fields(s.options):
        flag = _OPTION_RANGES.get(f.name)
        if flag is not None:
            check_optional(flag, getattr(s.options, f.name))


# An engine option's field -> its entry in base.ranges (the flag a user types).
_OPTION_RANGES = {"gpu_memory_utilization": "--gpu-memory-utilization",
                  "max_num_batched_tokens": "--max-num-batched-tokens",
                  "tensor_parallel_size": "--tensor-parallel-size", "block_size": "--block-size",
                  "batch_size": "--batch-size", "max_new_tokens": "--max-new-tokens",
                  "gpu_overhead_bytes": "--gpu-overhead"}


def pinned_version(engine: str, modelled: str, version: str | None) -> str:
    """version_label for an engine whose rules are read from one release (`modelled`, e.g. "vLLM 0.33.0")."""
    if version is None or version.strip().lstrip("v") == modelled.split()[-1].lstrip("v"):
        return modelled
    from gemma_fit.base.text import printable

    raise BadInput(f"--engine-version '{printable(version, 40)}': gemma-fit's {engine} rules (memory, defaults) are "
                   f"read from {modelled}; give that version or leave --engine-version out")


def refuse_llamacpp_only(s: RunSettings, engine: str) -> None:
    """A llama.cpp placement or kernel option given to an engine that has none (vLLM, transformers, Ollama) is bad
    input: the answer would drop it without a word, and the printed command would not carry it."""
    default = RunSettings()
    given = [flag for flag, asked in (
        ("-ot", bool(s.override_tensor)), ("--cpu-moe", s.cpu_moe), ("--n-cpu-moe", bool(s.n_cpu_moe)),
        ("-ngl", s.n_gpu_layers is not None), ("--swa-full", s.swa_full), ("-ub", s.n_ubatch != default.n_ubatch),
        ("-fa", s.flash_attn != default.flash_attn),
        ("-ctv", s.cache_type_v.lower() != s.cache_type_k.lower())) if asked]  # one KV type: --cache-type-k's
    if given:
        raise BadInput(f"{', '.join(given)}: llama.cpp's option{'s' if len(given) > 1 else ''}, which {engine} has no "
                       f"use for (gemma-fit check --help lists {engine}'s own)")
