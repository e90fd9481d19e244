"""The `llama.cpp` engine object of engines.registry: llama-server's plan (engines.llamacpp.run_check) with the
vision projector counted, and, for a single check, the advice and what llama.cpp's own fit would choose."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from gemma_fit.engines.advice import advise
from gemma_fit.engines.base import CheckRequest, CheckResult, engine_options
from gemma_fit.engines.llamacpp import NAME, LlamaCppResult, run_check
from gemma_fit.engines.projector import with_projector
from gemma_fit.gguf.types import file_type
from gemma_fit.memory.llamacpp_fit import llamacpp_fit
from gemma_fit.memory.settings import validate
from gemma_fit.model.catalog import ResolvedModel


@dataclass(frozen=True)
class LlamaCppOptions:
    """llama.cpp takes no options beyond its own flags (RunSettings)."""


class LlamaCppEngine:
    name = NAME
    aliases: tuple[str, ...] = ("llamacpp", "llama-cpp", "llama-server")
    default_quant = "Q4_K_M"
    options = LlamaCppOptions
    ranks_plans = True

    def default_n_ctx(self) -> int:
        return 4096  # llama-server's -c as gemma-fit has answered for it (contract: --ctx default 4096)

    def canonical_quant(self, quant: str) -> str:
        return file_type(quant).name

    def offered_quants(self, resolved: ResolvedModel, ladder: tuple[str, ...]) -> tuple[str, ...]:
        return ladder  # llama-quantize writes every file type

    def loads_vision_tower(self, resolved: ResolvedModel) -> bool:
        return False  # only with --mmproj

    def plan_command(self, r: CheckResult[Any], n_parallel: int) -> str:
        return r.command

    def validate(self, request: CheckRequest) -> None:
        validate(request.settings, request.resolved.spec)

    def estimate(self, request: CheckRequest) -> LlamaCppResult:
        engine_options(LlamaCppOptions, request.options)  # refuses any
        r = request
        settings = with_projector(r.resolved, r.settings, r.workload.images, r.workload.mmproj)
        traffic = r.workload.traffic
        return run_check(r.resolved, self.default_quant if r.quant is None else r.quant, settings, r.hardware,
                         prompt_tokens=r.workload.prompt_tokens, plan=r.plan, gguf_path=r.gguf_path,
                         margin_bytes=r.margin_bytes, unmodelled=r.unmodelled, output_tokens=traffic.output_tokens,
                         request_rate=traffic.rate_per_s, with_serving=r.serving)

    def check(self, request: CheckRequest) -> LlamaCppResult:
        result = self.estimate(request)
        d = result.detail
        hw = request.hardware
        fit = llamacpp_fit(d.plan, d.settings, hw.gpus, hw.host_capacity_bytes)
        return replace(result, detail=replace(d, advice=advise(result), llamacpp_fit=fit))


ENGINE = LlamaCppEngine()
