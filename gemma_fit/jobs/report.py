"""`gemma-fit report`: the check over a matrix of hardware x model x quant x context, as one document.

Pure: no printing, no files. Every model, quant and hardware configuration is resolved once and reused
for all its cells; each cell carries the summary figures the table, the HTML page and the JSON show and,
in `check`, the `gemma-fit.check/1` document: the full one up to FULL_CHECK_MAX_CELLS cells, above that a
compact one (schema, "compact": true, the server command and the assumptions; the report then says so in
"check_documents"), so that memory per cell stays small (about 2 KiB) however large the matrix.

Refused up front, as bad input (exit 2): an unknown engine, impossible settings, a matrix of more than
MAX_CELLS cells, and a report whose every cell is an error (no combination could be checked: it has no
answer). A cell that only some models refuse is an "error" cell and the others still count.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from gemma_fit.base.collections_off import collections_paused
from gemma_fit.base.errors import BadInput, GemmaFitError
from gemma_fit.base.text import printable
from gemma_fit.base.verdict import CELL_ERROR, CELL_STATES, cell_rank
from gemma_fit.base.version import LLAMA_CPP_LABEL
from gemma_fit.db.catalog import BUILTIN, Catalog
from gemma_fit.engines import registry
from gemma_fit.engines.base import CheckRequest, Engine
from gemma_fit.engines.llamacpp import run_check
from gemma_fit.gguf.types import CONTRACT_QUANTS, file_type
from gemma_fit.hardware.calibration_store import with_local_calibration
from gemma_fit.hardware.catalog import GPUSpec, load_gpu_entries, load_gpus
from gemma_fit.hardware.flags import MachineFlags, power_modes, with_machine_flags
from gemma_fit.hardware.prices import Price
from gemma_fit.hardware.schema import DESCRIBED_BY_USER
from gemma_fit.hardware.select import select_hardware
from gemma_fit.hardware.spec import Hardware
from gemma_fit.jobs.report_cells import HardwareConfig, Matrix, ProgressFn, matrix_cells
from gemma_fit.memory.settings import RunSettings, validate, validate_shared
from gemma_fit.model.catalog import ResolvedModel, entry_spec, load_model_db, resolve_model
from gemma_fit.model.spec import GENERATION_ORDER
from gemma_fit.present.documents import RANKING_SORT, check_figures

SCHEMA = "gemma-fit.report/1"
WHAT_TO_BUY_MAX_COMBOS = 12  # a ranking of every database GPU per (model, quant, context): only for small reports
FULL_CHECK_MAX_CELLS = 1000  # up to this many cells, each keeps its full check document (about 8 KiB each)
MAX_CELLS = 1_000_000  # about half an hour of checks; more is surely a mistake in --gpu/--model/--quant/--ctx



def gpu_configs(values: Sequence[str], catalog: Catalog = BUILTIN) -> list[list[str]]:
    """Each --gpu value is one hardware config: `a4000`; `rtx-4090+rtx-4090` is one two-GPU machine;
    `a4000,rtx-4090` is two configs; `all` is every GPU in the hardware database, one config each."""
    out: list[list[str]] = []
    for value in values:
        for part in value.split(","):
            part = part.strip()
            if not part:
                continue
            if part.lower() == "all":
                out.extend([gid] for gid in load_gpus(catalog.hardware_dirs))
            else:
                out.append([p.strip() for p in part.split("+")])
    return out


def settings_json(s: RunSettings) -> dict[str, Any]:
    """The settings shared by every cell (the context varies per cell)."""
    return {"n_ubatch": s.n_ubatch, "n_batch": s.n_batch, "n_parallel": s.n_parallel, "flash_attn": s.flash_attn,
            "cache_type_k": s.cache_type_k.lower(), "cache_type_v": s.cache_type_v.lower(),
            "n_gpu_layers": "auto" if s.n_gpu_layers is None else s.n_gpu_layers, "swa_full": s.swa_full,
            "kv_unified": s.kv_unified}


def expand_models(names: Sequence[str], catalog: Catalog = BUILTIN) -> list[ResolvedModel]:
    """Resolve each name once ('all' = every model in the database), first occurrence wins."""
    extra = catalog.model_dirs
    out: dict[str, ResolvedModel] = {}
    for name in names:
        if name.strip().lower() == "all":
            entries = sorted(load_model_db(extra).values(),
                             key=lambda e: (GENERATION_ORDER[e.generation], entry_spec(e).n_embd, e.id))
            for e in entries:
                out.setdefault(e.id, ResolvedModel(entry_spec(e), e.id, e.id, extra))
            continue
        resolved = resolve_model(name, extra)
        out.setdefault(resolved.spec.id, resolved)
    if not out:
        raise BadInput("give at least one --model (an id, an alias such as 9b, or 'all')")
    return list(out.values())


def expand_quants(names: Sequence[str], engine: Engine) -> list[str]:
    if not engine.ranks_plans:  # vLLM / transformers formats (bf16, awq ...): the engine validates them per cell
        return list(dict.fromkeys(n.strip() for n in names)) or [engine.default_quant]
    out: list[str] = []
    for name in names or [engine.default_quant]:
        for q in CONTRACT_QUANTS if name.strip().lower() == "all" else [file_type(name.strip()).name]:
            if q not in out:
                out.append(q)
    return out


def expand_contexts(contexts: Sequence[int]) -> list[int]:
    out: list[int] = []
    for c in contexts or [4096]:
        if c not in out:
            out.append(int(c))
    return out


def hardware_configs(gpus: Sequence[Sequence[str]], hardware_files: Sequence[Path],
                     catalog: Catalog = BUILTIN, machine: MachineFlags | None = None) -> list[HardwareConfig]:
    """One config per GPU list (several ids = one multi-GPU machine) and per machine file."""
    extra = catalog.hardware_dirs
    flags = machine or MachineFlags()
    out: dict[str, HardwareConfig] = {}
    bare: list[tuple[Hardware, str | None]] = []  # each machine, and the name typed for one without GPUs
    for names in gpus:
        names = [p.strip() for n in names for p in n.split("+") if p.strip()]  # 'a+b' is one two-GPU machine
        bare.append((select_hardware(names, None, extra), names[0].lower() if names else None))
    bare.extend((select_hardware([], Path(path), extra), None) for path in hardware_files)
    if not bare:
        raise BadInput("give at least one --gpu (a GPU id, ids joined by '+' for one machine) or --hardware FILE")
    moded = _power_moded([hw for hw, _ in bare], flags, extra)
    for i, (hw0, typed) in enumerate(bare):
        hw = with_local_calibration(_machine(hw0, flags, i in moded, extra))
        key = (f"file:{hw.label}" if hw0.source is not None else
               "+".join(g.id for g in hw.gpus) if hw.gpus else str(typed))
        out.setdefault(key, HardwareConfig(key, hw))
    return list(out.values())


def _power_moded(configs: Sequence[Hardware], flags: MachineFlags, extra: tuple[Path, ...]) -> set[int]:
    """The indices of the configs whose GPUs have --power-mode's mode (a report may mix Jetsons and other machines);
    none having it is bad input, said as for one machine."""
    if flags.power_mode is None:
        return set()
    table = power_modes(extra)
    have = {i for i, hw in enumerate(configs)
            if any(g.id in table and table[g.id].find(flags.power_mode) for g in hw.gpus)}
    if not have:
        with_machine_flags(configs[0], flags, extra)  # raises the one-machine answer's BadInput
    return have


def _machine(hw: Hardware, flags: MachineFlags, has_mode: bool, extra: tuple[Path, ...]) -> Hardware:
    if flags.power_mode is None or has_mode:
        return with_machine_flags(hw, flags, extra)
    out = with_machine_flags(hw, replace(flags, power_mode=None), extra)
    return replace(out, notes=(*out.notes, f"--power-mode {printable(flags.power_mode, 40)}: not a mode of "
                                           f"{hw.label}'s GPUs; their database figures are used"))


def check_settings(settings: RunSettings, models: Sequence[ResolvedModel], ctxs: Sequence[int], engine: Engine,
                   quant: str, hardware: Hardware) -> None:
    """Impossible settings are bad input, for every engine, before any cell: llama.cpp's rules for every
    context (-ngl depends on the model only above the layer count, which llama.cpp clamps), then the
    engine's own numbers."""
    if settings.n_gpu_layers is not None and settings.n_gpu_layers < 0:
        raise BadInput(f"--n-gpu-layers {settings.n_gpu_layers} is impossible: a number of layers from 0 "
                       "(more than a model has means all), or auto")
    if settings.speculative is not None:  # every cell would drop it without a word
        from gemma_fit.engines.speculative import check_ask, check_drafting_engine

        check_drafting_engine(engine.name, settings.speculative)
        check_ask(settings.speculative, models[0].db_dirs)  # --acceptance, --draft-max: each engine's cells take them
    widest = max(models, key=lambda m: m.spec.n_ctx_train).spec  # --ctx 0: the per-sequence check at its widest
    rules = validate if engine.ranks_plans else validate_shared  # llama.cpp's plans (and Ollama's) or another's
    for c in ctxs:
        rules(replace(settings, n_ctx=c, n_gpu_layers=None), widest)
        engine.validate(CheckRequest(models[0], quant, settings.with_ctx(c), hardware))


def check_matrix_size(n_configs: int, n_models: int, n_quants: int, n_ctxs: int) -> int:
    total = n_configs * n_models * n_quants * n_ctxs
    if total > MAX_CELLS:
        raise BadInput(f"the report would have {total:,} cells ({n_configs:,} hardware configs x {n_models:,} "
                       f"models x {n_quants:,} quants x {n_ctxs:,} contexts), more than {MAX_CELLS:,}: narrow "
                       "--gpu, --model, --quant or --ctx")
    return total


def check_some_answer(cells: Sequence[dict[str, Any]]) -> None:
    """A report whose every cell is an error has no answer: bad input, with the (first) reason."""
    if cells and all(c["verdict"] == CELL_ERROR for c in cells):
        reasons = list(dict.fromkeys(c["error"] for c in cells))
        more = f" (and {len(reasons) - 1:,} other reason(s))" if len(reasons) > 1 else ""
        which = "the one cell is an error" if len(cells) == 1 else f"all {len(cells):,} cells are errors"
        raise BadInput(f"no combination could be checked ({which}): {reasons[0]}{more}")


def _gpu_sources(spec: GPUSpec, catalog: Catalog) -> list[str]:
    entry = load_gpu_entries(catalog.hardware_dirs).get(spec.id)
    urls = [spec.source] + (list(entry.sources) if entry is not None and entry.name == spec.name else [])
    return list(dict.fromkeys(u for u in urls if u.startswith(("http://", "https://"))))


def sources(models: Sequence[ResolvedModel], gpus: Sequence[GPUSpec], catalog: Catalog = BUILTIN
            ) -> list[dict[str, Any]]:
    """Where the numbers come from: the database entries' source URLs, and the llama.cpp rules."""
    out: list[dict[str, Any]] = [{
        "what": f"llama.cpp {LLAMA_CPP_LABEL}",
        "detail": "allocation rules (quant mixes, KV cache, compute buffer, layer placement) of the llama.cpp tree "
                  "vendored in llama-cpp-python 0.3.36",
        "urls": ["https://github.com/ggml-org/llama.cpp"],
    }]
    seen: set[str] = set()
    for m in models:
        if m.spec.id in seen:
            continue
        seen.add(m.spec.id)
        e = m.entry
        if e is None:
            out.append({"what": f"model {m.spec.id}", "detail": m.how, "urls": []})
            continue
        urls = list(dict.fromkeys([e.source, *e.corroborating_sources, e.license_url]))
        out.append({"what": f"model {e.id} ({e.name})", "detail": f"{e.verification}; licence {e.license}",
                    "urls": urls})
    for g in gpus:
        if f"gpu:{g.id}:{g.name}" in seen:
            continue
        seen.add(f"gpu:{g.id}:{g.name}")
        out.append({"what": f"GPU {g.id} ({g.name})",
                    "detail": f"{g.usable_memory_bytes:,} bytes usable"
                              + (f", {g.memory_bandwidth_gbps:g} GB/s" if g.memory_bandwidth_gbps else "")
                              + (f" ({DESCRIBED_BY_USER})" if g.source == DESCRIBED_BY_USER else ""),
                    "urls": _gpu_sources(g, catalog)})
    return out


def _prices(catalog: Catalog) -> dict[str, Price]:
    """Each priced GPU's price today (hardware_db/prices), for the ranking's price columns."""
    from gemma_fit.hardware.prices import current_price, price_table, prices_as_of

    table = price_table(catalog.hardware_dirs)
    today = prices_as_of(table)
    return {gid: p for gid, e in table.items() if (p := current_price(e, today)) is not None}


def _price_columns(price: Price | None, decode: float | None, tdp_w: float | None) -> dict[str, Any]:
    per_1000 = round(decode / price.usd * 1000, 2) if price and decode else None
    return {"price_usd": price.usd if price else None, "price_date": price.date if price else None,
            "price_kind": price.kind if price else None, "tokens_per_s_per_1000_usd": per_1000, "tdp_w": tdp_w}


def gpu_ranking(resolved: ResolvedModel, quant: str, settings: RunSettings, catalog: Catalog = BUILTIN,
                gpus: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Every database GPU (or those named) on its own, for one model, quant and settings, with as many layers on
    the GPU as fit (--n-gpu-layers auto); sorted by RANKING_SORT."""
    settings = replace(settings, n_gpu_layers=None)
    table = load_gpus(catalog.hardware_dirs)
    if gpus is None:
        specs = list(table.values())
    else:
        specs = [select_hardware([g], None, catalog.hardware_dirs).gpus[0] for g in gpus]
    rows = []
    prices = _prices(catalog)
    for g in specs:
        hw = Hardware(g.name, (g,), None, None)
        result = run_check(resolved, quant, settings, hw)
        dev = result.detail.estimate.devices[0]
        figures = check_figures(result)
        rows.append({
            "id": g.id, "name": g.name, "vendor": g.vendor, "backend": g.backend,
            "capacity_bytes": dev.capacity_bytes, "memory_bandwidth_gbps": g.memory_bandwidth_gbps,
            "verdict": figures["verdict"], "headroom_bytes": dev.headroom_bytes, "max_ctx_fit": figures["max_ctx_fit"],
            "n_gpu_layers": figures["n_gpu_layers"], "n_layers_total": figures["n_layers_total"],
            "decode_tokens_per_s": figures["decode_tokens_per_s"], "source": g.source,
            **_price_columns(prices.get(g.id), figures["decode_tokens_per_s"], g.tdp_w),
        })

    def key(r: dict[str, Any]) -> tuple[Any, ...]:
        decode = r["decode_tokens_per_s"]
        return (cell_rank(r["verdict"]), -(decode if decode is not None else -1.0),
                -(r["memory_bandwidth_gbps"] or 0.0), -r["headroom_bytes"], r["id"])

    rows.sort(key=key)
    for i, r in enumerate(rows, 1):
        r["rank"] = i
    return rows


def run_report(models: Sequence[str], quants: Sequence[str], gpus: Sequence[Sequence[str]], contexts: Sequence[int],
               settings: RunSettings, hardware_files: Sequence[Path] = (), catalog: Catalog = BUILTIN,
               what_to_buy: bool = False,
               progress: ProgressFn | None = None, engine: str = "llama.cpp",
               machine: MachineFlags | None = None, workers: int | None = None) -> dict[str, Any]:
    """The matrix: one cell per (hardware, model, quant, context), in that nesting order.

    `what_to_buy` adds, for each (model, quant, context) when there are at most WHAT_TO_BUY_MAX_COMBOS of
    them, a ranking of every GPU in the hardware database. `progress(done, total)` is called as cells finish.
    Raises BadInput for an unknown engine, impossible settings, more than MAX_CELLS cells, and when every cell
    is an error; above FULL_CHECK_MAX_CELLS cells, each cell's "check" is compact (see the module doc).
    `workers`: processes for the cells (default: report_cells.workers_for, 1 for a small matrix).
    """
    eng = registry.engine_named(engine)
    resolved = expand_models(models, catalog)
    quant_names = expand_quants(quants, eng)
    ctxs = expand_contexts(contexts)
    configs = hardware_configs(gpus, hardware_files, catalog, machine)
    total = check_matrix_size(len(configs), len(resolved), len(quant_names), len(ctxs))
    check_settings(settings, resolved, ctxs, eng, quant_names[0], configs[0].hardware)
    full = total <= FULL_CHECK_MAX_CELLS
    matrix = Matrix(tuple(configs), tuple(resolved), tuple(quant_names), tuple(ctxs), settings, eng, full)
    cells = matrix_cells(matrix, progress, workers)
    check_some_answer(cells)
    summary = {v: 0 for v in CELL_STATES}
    for cell in cells:
        summary[cell["verdict"]] += 1
    all_gpus = [g for cfg in configs for g in cfg.hardware.gpus]
    report: dict[str, Any] = {
        "schema": SCHEMA,
        "llama_cpp": LLAMA_CPP_LABEL,
        "settings": settings_json(settings),
        "hardware": [{"key": c.key, "name": c.hardware.label, "gpus": [g.id for g in c.hardware.gpus],
                      "capacity_bytes": sum(g.usable_memory_bytes for g in c.hardware.gpus)
                      if c.hardware.gpus else c.hardware.host_capacity_bytes} for c in configs],
        "models": [{"id": m.spec.id, "name": m.spec.name, "resolved": m.how, "arch": m.spec.arch,
                    "n_ctx_train": m.spec.n_ctx_train} for m in resolved],
        "quants": quant_names,
        "contexts": ctxs,
        "summary": summary,
        "cells": cells,
        "sources": sources(resolved, all_gpus, catalog),
    }
    report["engine"] = eng.name
    from gemma_fit.jobs.report_answer import report_answer

    with collections_paused():  # its options are plain records; see base.collections_off
        report["answer"] = report_answer(report, catalog)
    if not full:
        report["check_documents"] = (f"compact: {total:,} cells, more than {FULL_CHECK_MAX_CELLS:,}; each cell's "
                                     "check keeps its schema, server command and assumptions (gemma-fit check "
                                     "--json gives a cell's full document)")
    if what_to_buy and eng.name == registry.DEFAULT_ENGINE:
        combos = [(m, q, c) for m in resolved for q in quant_names for c in ctxs]
        if len(combos) > WHAT_TO_BUY_MAX_COMBOS:
            report["what_to_buy_note"] = (f"what to buy is left out: {len(combos)} model/quant/context combinations "
                                          f"(at most {WHAT_TO_BUY_MAX_COMBOS}); narrow --model, --quant or --ctx")
        else:
            report["what_to_buy_sort"] = RANKING_SORT
            report["what_to_buy"] = [
                {"model": m.spec.id, "quant": q, "ctx": c,
                 "ranking": gpu_ranking(m, q, replace(settings, n_ctx=c), catalog)}
                for m, q, c in combos
            ]
    return report


def check_sources(doc: dict[str, Any], catalog: Catalog = BUILTIN) -> list[dict[str, Any]]:
    """The sources behind a check document: its model's and GPUs' database entries, and llama.cpp."""
    models, gpus = [], []
    try:
        entry = load_model_db(catalog.model_dirs).get(str(doc["model"]["id"]).lower())
        if entry is not None:
            models.append(ResolvedModel(entry_spec(entry), entry.id, doc["model"].get("resolved", ""),
                                        catalog.model_dirs))
        table = load_gpus(catalog.hardware_dirs)
        gpus = [table[g] for g in doc.get("hardware", {}).get("gpus", []) if g in table]
    except GemmaFitError:  # an unreadable extra database: the report still renders, with fewer sources
        pass
    return sources(models, gpus, catalog)
