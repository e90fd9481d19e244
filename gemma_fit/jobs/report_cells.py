"""The cells of a report, worked out plan by plan: a model and quant on every context and hardware config in turn,
so that what a plan shares across GPUs (its tensor plan, placement, KV cache, the searches) is computed once and
found in the estimate's caches.

A large matrix is shared out over worker processes, a (model, quant) plan per task: every cell is a pure
function of its inputs, so the document is the same whichever worker made which cell. Workers are forked
(Linux), inheriting the resolved models and hardware instead of receiving them pickled; elsewhere, and for
matrices too small to repay starting processes, the cells are worked out in this process.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

from gemma_fit.base.collections_off import collect_young, collections_paused
from gemma_fit.base.errors import BadInput
from gemma_fit.base.record import record
from gemma_fit.base.verdict import CELL_ERROR
from gemma_fit.engines.base import CheckRequest, CheckResult, Engine
from gemma_fit.hardware.spec import Hardware
from gemma_fit.memory.settings import RunSettings
from gemma_fit.model.catalog import ResolvedModel
from gemma_fit.present.documents import check_document, check_figures, compact_document

PARALLEL_MIN_CELLS = 20_000  # below this a worker's start (a fork, its caches built again) costs what it saves
MAX_WORKERS = 8

ProgressFn = Callable[[int, int], None]
Cell = dict[str, Any]


@record
class HardwareConfig:
    key: str  # what the user typed, normalised: ids joined by '+', or 'file:<machine name>'
    hardware: Hardware


@record
class Matrix:
    """Everything a cell depends on; cells are kept in the report's order: hardware, model, quant, context."""

    configs: tuple[HardwareConfig, ...]
    models: tuple[ResolvedModel, ...]
    quants: tuple[str, ...]
    ctxs: tuple[int, ...]
    settings: RunSettings
    engine: Engine
    full: bool  # each cell keeps its full check document (else a compact one)

    @property
    def total(self) -> int:
        return len(self.configs) * len(self.models) * len(self.quants) * len(self.ctxs)

    @property
    def plans(self) -> list[tuple[int, int]]:
        return [(im, iq) for im in range(len(self.models)) for iq in range(len(self.quants))]

    def index(self, ih: int, im: int, iq: int, ic: int) -> int:
        per_cfg = len(self.models) * len(self.quants) * len(self.ctxs)
        return ih * per_cfg + (im * len(self.quants) + iq) * len(self.ctxs) + ic


def compact_check(result: CheckResult[Any], shared: dict[Any, Any] | None = None) -> dict[str, Any]:
    """What a cell of a large report keeps of its check document; `shared` makes equal assumption lists one
    object (they differ per hardware, not per cell)."""
    out = compact_document(result)
    if "assumptions" in out and shared is not None:
        out["assumptions"] = _shared_list(shared, out["assumptions"])
    return out


def _shared_list(shared: dict[Any, Any], items: list[str]) -> list[str]:
    kept: list[str] = shared.setdefault(("assumptions", *items), items)
    return kept


def cell(cfg: HardwareConfig, model: ResolvedModel, quant: str, ctx: int, settings: RunSettings,
         engine: Engine, full: bool = True, shared: dict[Any, Any] | None = None) -> Cell:
    """One cell: the summary figures and, in "check", the full check document (`full`) or a compact one."""
    base = {"hardware": cfg.key, "model": model.spec.id, "quant": quant, "ctx": ctx}
    try:
        result = engine.estimate(CheckRequest(model, quant, settings.with_ctx(ctx), cfg.hardware, compact=not full))
    except BadInput as exc:  # a setting this model refuses: the other cells still count
        return {**base, "n_ctx": None, "verdict": CELL_ERROR, "error": str(exc), "min_headroom_bytes": None,
                "max_ctx_fit": None, "n_gpu_layers": None, "n_layers_total": None, "decode_tokens_per_s": None,
                "prefill_tokens_per_s": None, "ttft_s": None, "check": None}
    return {**base, **check_figures(result), "check": check_document(result) if full else compact_check(result, shared)}


def plan_cells(m: Matrix, im: int, iq: int, shared: dict[Any, Any]) -> Iterator[tuple[int, Cell]]:
    """The cells of one (model, quant) plan, each with its index in the report. In a compact report two contexts
    that llama.cpp resolves to one n_ctx (0 and the trained context, 8192 and 8000) are one check: the second
    cell is the first's with its own "ctx"."""
    model, quant = m.models[im], m.quants[iq]
    first: dict[int, int] = {}  # resolved n_ctx -> the first context index that asked it
    made: dict[tuple[int, int], Cell] = {}
    for ic, ctx in enumerate(m.ctxs):
        same = ic if m.full else first.setdefault(m.settings.with_ctx(ctx).resolved_ctx(model.spec), ic)
        for ih, cfg in enumerate(m.configs):
            earlier = made.get((same, ih)) if same != ic else None
            if earlier is not None and earlier["verdict"] != CELL_ERROR:
                c = {**earlier, "ctx": ctx}
            else:
                c = cell(cfg, model, quant, ctx, m.settings, m.engine, m.full, shared)
                made[(ic, ih)] = c
            yield m.index(ih, im, iq, ic), c


def workers_for(m: Matrix) -> int:
    """As many workers as this process may use cores (at most MAX_WORKERS and one per plan), for a large matrix
    on Linux; else 1 (this process)."""
    if m.total < PARALLEL_MIN_CELLS or not sys.platform.startswith("linux"):
        return 1
    cores = len(os.sched_getaffinity(0))
    return max(1, min(cores, MAX_WORKERS, len(m.plans)))


def matrix_cells(m: Matrix, progress: ProgressFn | None = None, workers: int | None = None) -> list[Cell]:
    """Every cell of the matrix in the report's order; `progress(done, total)` as they are made."""
    n = workers_for(m) if workers is None else workers
    cells: list[Cell] = [{} for _ in range(m.total)]
    shared: dict[Any, Any] = {}
    step = max(1, m.total // 100)
    made = _serial(m, shared) if n <= 1 else _parallel(m, n, shared)
    with collections_paused():  # the cells hold no cycles: a collection would walk the growing list again and again
        for done, (index, c) in enumerate(made, 1):
            cells[index] = c
            if progress is not None and (done % step == 0 or done == m.total):
                progress(done, m.total)
    return cells


def _serial(m: Matrix, shared: dict[Any, Any]) -> Iterator[tuple[int, Cell]]:
    for im, iq in m.plans:
        yield from plan_cells(m, im, iq, shared)
        collect_young()


_INHERITED: Matrix | None = None  # the matrix a forked worker finds in its copy of this module


def _worker_plan(plan: tuple[int, int]) -> list[tuple[int, Cell]]:
    assert _INHERITED is not None
    with collections_paused():  # a worker's caches grow plan by plan: see base.collections_off
        cells = list(plan_cells(_INHERITED, plan[0], plan[1], {}))
    collect_young()
    return cells


def _parallel(m: Matrix, n: int, shared: dict[Any, Any]) -> Iterator[tuple[int, Cell]]:
    import multiprocessing

    global _INHERITED
    _INHERITED = m
    try:
        with multiprocessing.get_context("fork").Pool(n) as pool:
            # the largest models first, so that the workers finish together
            plans = sorted(m.plans, key=lambda p: -m.models[p[0]].spec.n_embd * m.models[p[0]].spec.n_layer)
            for part in pool.imap_unordered(_worker_plan, plans):
                for index, c in part:
                    if not m.full and c["check"] is not None and "assumptions" in c["check"]:
                        c["check"]["assumptions"] = _shared_list(shared, c["check"]["assumptions"])
                    yield index, c
    finally:
        _INHERITED = None
