"""The `llama.cpp` engine object of engines.registry: llama-server's plan (engines.llamacpp.run_check) with the
vision projector counted, and, for a single check, the advice and what llama.cpp's own fit would choose."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gemma_fit.base.record import record
from gemma_fit.base.verdict import Verdict
from gemma_fit.engines.advice import advise, drafter_move
from gemma_fit.engines.base import CheckRequest, CheckResult, engine_options
from gemma_fit.engines.hf_weights import gguf_type_name
from gemma_fit.engines.llamacpp import NAME, LlamaCppResult, run_check
from gemma_fit.engines.llamacpp_defaults import defaults_note, server_defaults, with_server_defaults
from gemma_fit.engines.projector import with_projector
from gemma_fit.engines.speculative import resolve_asked, with_drafter
from gemma_fit.gguf.tensors import build_plan
from gemma_fit.memory.llamacpp_fit import llamacpp_fit
from gemma_fit.memory.settings import RunSettings, validate
from gemma_fit.model.catalog import ResolvedModel


@record
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

    def version_label(self, version: str | None) -> str:
        return server_defaults(version)[0].replace("llama-server", NAME)

    def with_defaults(self, request: CheckRequest) -> CheckRequest:
        """llama-server with neither -c nor -np (engines.llamacpp_defaults)."""
        r = request
        plan = r.plan or build_plan(r.resolved.spec, self.canonical_quant(r.quant or self.default_quant))
        return replace(r, settings=with_server_defaults(plan, r.settings, r.hardware, _version(r.settings)))

    def canonical_quant(self, quant: str) -> str:
        return gguf_type_name(quant, self.name)

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
        spec = settings.speculative
        if spec is not None and not spec.resolved:  # as asked (report, recommend, serve-plan): this model's drafter
            spec = resolve_asked(r.resolved, spec, r.resolved.db_dirs)
        settings = with_drafter(settings, spec, r.hardware, r.resolved.db_dirs, r.resolved.spec)
        traffic = r.workload.traffic
        result = run_check(r.resolved, self.default_quant if r.quant is None else r.quant, settings, r.hardware,
                           prompt_tokens=r.workload.prompt_tokens, plan=r.plan, gguf_path=r.gguf_path,
                           margin_bytes=r.margin_bytes, unmodelled=r.unmodelled,
                           output_tokens=traffic.output_tokens, request_rate=traffic.rate_per_s,
                           with_serving=not r.compact, explain=not r.compact)
        if not settings.defaults_from:
            return result
        note = defaults_note(settings, _version(settings))
        return replace(result, reasons=(*result.reasons[:1], note, *result.reasons[1:]))

    def check(self, request: CheckRequest) -> LlamaCppResult:
        result = self.estimate(request)
        d = result.detail
        hw = request.hardware
        fit = llamacpp_fit(d.plan, d.settings, hw.gpus, hw.host_capacity_bytes)
        advice = advise(result)
        drafter = drafter_move(result)
        if drafter is not None and result.verdict != Verdict.GO:
            advice = (*advice, drafter)
        elif drafter is not None and result.performance is not None:  # nothing needs changing: a note, not advice
            note = f"faster: add --mtp, {drafter.change}"
            result = replace(result, performance=replace(result.performance,
                                                          notes=(*result.performance.notes, note)))
        return replace(result, detail=replace(d, advice=advice, llamacpp_fit=fit))


def _version(s: RunSettings) -> str | None:
    """The llama.cpp version of settings.engine_version ("llama.cpp b6890": b6890); None for the pinned tree."""
    return s.engine_version.split()[-1] if s.engine_version else None


ENGINE = LlamaCppEngine()
