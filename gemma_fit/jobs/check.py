"""`check`: one model, quant, settings and hardware in; every engine's one answer (engines.base.CheckResult) out.
present.documents renders it as the contract's JSON.

The model is an id, an alias, a config.json, an Ollama tag (gemma3:27b: that model at the tag's quant, with the
blob's towers kept free) or a real GGUF (`gguf`). The engine (engines.registry) maps llama.cpp's options onto its
own and takes its own options by name (`options`: vLLM's gpu_memory_utilization, transformers' batch_size ...).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from gemma_fit.base.errors import BadInput
from gemma_fit.db.catalog import BUILTIN, Catalog
from gemma_fit.engines import registry
from gemma_fit.engines.base import CheckRequest, CheckResult, Workload
from gemma_fit.engines.projector import tag_unmodelled
from gemma_fit.gguf.tensors import build_plan
from gemma_fit.hardware.flags import MachineFlags
from gemma_fit.hardware.select import hardware_of
from gemma_fit.hardware.spec import Hardware
from gemma_fit.jobs.engine_version import installed_llama_server
from gemma_fit.jobs.inputs import (
    check_model_source,
    check_workload,
    gguf_model,
    margin_bytes,
    spelled_tag_quant,
    tag_quant,
)
from gemma_fit.memory.settings import RunSettings
from gemma_fit.model.catalog import ResolvedModel, resolve_model
from gemma_fit.model.ollama_tags import ollama_tag


def check(model: str | ResolvedModel | None, hardware: Hardware | str | Sequence[str] | Path, *,
          quant: str | None = None, gguf: Path | None = None, settings: RunSettings | None = None,
          engine: str = registry.DEFAULT_ENGINE, workload: Workload | None = None, backend: str | None = None,
          machine: MachineFlags | None = None, margin_gib: float | None = None,
          options: Mapping[str, Any] | None = None, default_ctx: bool = False, default_parallel: bool = False,
          engine_version: str | None = None, catalog: Catalog = BUILTIN) -> CheckResult[Any]:
    """Will `model` (an id, alias, config.json path or Ollama tag, or a real GGUF as `gguf`) run on `hardware` (a
    GPU id, several, a machine file, or a Hardware) with these settings, and how well. Raises BadInput (a
    GemmaFitError) for input llama.cpp or the engine would refuse. `default_ctx`: the context was not given, so
    the engine's own default stands; with `default_parallel` too (no --parallel), the answer is for what the engine
    does with its own defaults (llama-server: the trained context fitted to memory, 4 slots sharing one KV cache),
    of `engine_version` (None: the llama-server on PATH where there is one, else the version gemma-fit's rules are
    read from)."""
    check_model_source(model, gguf)
    workload = workload or Workload()
    check_workload(workload)
    eng = registry.engine_named(engine)
    hw = hardware_of(hardware, backend, catalog.hardware_dirs, machine)
    # Without settings (or a context), the context is the engine's own default (llama.cpp: 4096).
    settings = settings or RunSettings(n_ctx=eng.default_n_ctx())
    if default_ctx:
        settings = replace(settings, n_ctx=eng.default_n_ctx())
    if engine_version is None and eng.name == registry.DEFAULT_ENGINE:
        engine_version = installed_llama_server()  # the llama-server this machine runs, where there is one
    settings = replace(settings, engine_version=eng.version_label(engine_version))
    tag = ollama_tag(model) if isinstance(model, str) else None
    if tag is not None:
        model, quant = tag.model, tag_quant(tag, quant)
    elif isinstance(model, str):
        quant = spelled_tag_quant(model, quant)
    plan = None
    if gguf is not None:
        if not eng.ranks_plans or eng.name != registry.DEFAULT_ENGINE:
            raise BadInput("--gguf works with --engine llama.cpp (or ollama via --model)")
        resolved, plan = gguf_model(gguf)
    else:
        resolved = model if isinstance(model, ResolvedModel) else resolve_model(model or "", catalog.model_dirs)
    if settings.speculative is not None and not settings.speculative.resolved:
        settings = replace(settings, speculative=_speculative(eng.name, resolved, settings.speculative, catalog))
    unmodelled = None
    if tag is not None and eng.name == registry.DEFAULT_ENGINE:
        q = eng.canonical_quant(eng.default_quant if quant is None else quant)
        unmodelled = tag_unmodelled(tag, resolved, build_plan(resolved.spec, q), workload.images or 0)
    request = CheckRequest(resolved, quant, settings, hw, workload, dict(options or {}), margin_bytes(margin_gib),
                           plan, gguf, unmodelled, parallel_given=not default_parallel)
    if default_ctx and default_parallel:
        request = eng.with_defaults(request)
    return registry.check(eng.name, request)


def _speculative(engine: str, resolved: ResolvedModel, asked: Any, catalog: Catalog) -> Any:
    """--mtp / --draft resolved for the engine that runs them (llama.cpp's -md and --spec-type)."""
    from gemma_fit.engines.speculative import check_drafting_engine, resolve_asked

    check_drafting_engine(engine, asked)
    return resolve_asked(resolved, asked, catalog.model_dirs)
