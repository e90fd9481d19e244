"""What the command-line options become: the defaults the signatures spell, token counts with k/K, and the API's
types (RunSettings, MachineFlags, Workload, Speculative) built from the options' values.

Nothing here imports typer: `check`'s quick path (cli.quick) converts the same words with the same functions
before typer loads, and cli.options declares the options over them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from gemma_fit.api import MachineFlags, RunSettings, Traffic, Workload

DEFAULT = RunSettings()  # llama.cpp's defaults, as RunSettings holds them
CTX, UBATCH, BATCH, PARALLEL = DEFAULT.n_ctx, DEFAULT.n_ubatch, DEFAULT.n_batch, DEFAULT.n_parallel
FLASH_ATTN, CACHE_TYPE_K, CACHE_TYPE_V = DEFAULT.flash_attn, DEFAULT.cache_type_k, DEFAULT.cache_type_v
N_GPU_LAYERS = "auto"
PROMPT_TOKENS = Workload().prompt_tokens

_TOKENS = re.compile(r"^\s*([+-]?\d+)\s*([kK]?)\s*$", re.ASCII)  # ASCII digits: '٨' is not 8 to llama.cpp


def token_count(value: str) -> int:
    """A token count as typed: 4096, or with k/K for x 1024 (8k = 8192), as llama.cpp's docs write them."""
    m = _TOKENS.match(str(value))
    if m is None:
        raise ValueError(f"'{value}' is not a token count (a whole number, or with k: 8k = 8192)")
    return int(m.group(1)) * (1024 if m.group(2) else 1)


_VOLUME = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmMgG]?)\s*$", re.ASCII)
_SCALE = {"": 1, "k": 1_000, "m": 1_000_000, "g": 1_000_000_000}


def volume_count(value: str) -> int:
    """A daily token volume as typed: 20000000, 20M, 2.5M, 500k. Decimal, as hosted APIs price per million tokens
    (a context's k is x1024: token_count)."""
    m = _VOLUME.match(str(value))
    if m is None or len(m.group(1)) > 30:
        raise ValueError(f"'{value[:40]}' is not a token volume (a whole number, or with k or M: 500k, 2.5M)")
    digits, scale = m.group(1), _SCALE[m.group(2).lower()]
    if "." not in digits:
        return int(digits) * scale
    number = float(digits) * scale
    if number != int(number):
        raise ValueError(f"'{value}' is not a whole number of tokens")
    return int(number)


def run_settings(*, ctx: int = CTX, batch: int = BATCH, ubatch: int = UBATCH, parallel: int = PARALLEL,
                 flash_attn: str = FLASH_ATTN, cache_type_k: str = CACHE_TYPE_K, cache_type_v: str = CACHE_TYPE_V,
                 n_gpu_layers: str = N_GPU_LAYERS, swa_full: bool = False, kv_unified: bool = False,
                 n_outputs_max: int = 0, override_tensor: list[str] | None = None, cpu_moe: bool = False,
                 n_cpu_moe: int = 0) -> RunSettings:
    """The llama.cpp options of any command, as RunSettings (-ngl and -fa parsed as llama.cpp parses them)."""
    return RunSettings.from_flags(
        n_ctx=ctx, n_batch=batch, n_ubatch=ubatch, n_parallel=parallel, kv_unified=kv_unified,
        flash_attn=flash_attn, cache_type_k=cache_type_k, cache_type_v=cache_type_v, n_gpu_layers=n_gpu_layers,
        swa_full=swa_full, n_outputs_max=n_outputs_max, override_tensor=tuple(override_tensor or ()),
        cpu_moe=cpu_moe, n_cpu_moe=n_cpu_moe)


def workload(prompt_tokens: int = PROMPT_TOKENS, output_tokens: int | None = None, rate: float | None = None,
             images: int | None = None, mmproj: Path | None = None) -> Workload:
    return Workload(prompt_tokens, Traffic(output_tokens, rate), images, mmproj)


def machine_flags(*, ram: float | None = None, ram_type: str | None = None, ram_channels: int | None = None,
                  cores: int | None = None, threads: int | None = None, disk: str | None = None,
                  reserve: float | None = None, cpu: str | None = None, sockets: int | None = None,
                  numa: str | None = None, power_mode: str | None = None,
                  vulkan_driver: str | None = None) -> MachineFlags:
    return MachineFlags(ram, ram_type, ram_channels, cores, threads, disk, reserve, cpu, sockets, numa, power_mode,
                        vulkan_driver)


def speculative_ask(mtp: bool, draft: str | None, draft_max: int | None, acceptance: float | None) -> Any:
    """--mtp / --draft as the settings carry them until the model is known (engines.speculative resolves them)."""
    from gemma_fit.api import Speculative

    if not (mtp or draft is not None or draft_max is not None or acceptance is not None):
        return None
    name, _, quant = (draft or "").partition(":")
    if draft is not None and not name.strip():  # '' or ':Q4_0' is no drafter (an empty --quant is refused too)
        from gemma_fit.api import BadInput

        raise BadInput("--draft needs a model: MODEL or MODEL:QUANT (gemma-3-270m, gemma-3-1b:Q8_0)")
    return Speculative("mtp" if mtp else "draft", name.strip(), quant.strip(), draft_max, acceptance,
                       asked_both=mtp and draft is not None)
