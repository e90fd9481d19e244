"""`check --html FILE`: the self-contained pre-purchase page of one check. It opens with the answer (the best Gemma
for this hardware, the cheapest hardware for this model) and ranks every database GPU for the model; then the
check itself, with its sources."""

from __future__ import annotations

from typing import Any

from gemma_fit.base.errors import BadInput, GemmaFitError
from gemma_fit.db.catalog import BUILTIN, Catalog
from gemma_fit.engines.base import CheckResult
from gemma_fit.engines.llamacpp import LlamaCppPlan, LlamaCppResult
from gemma_fit.jobs.buy import buy, buy_document
from gemma_fit.jobs.needs import BuyNeeds, Needs
from gemma_fit.jobs.recommend import recommend, recommend_document
from gemma_fit.jobs.report import gpu_ranking, sources
from gemma_fit.present.documents import check_document
from gemma_fit.present.html import render_check_html


def check_page(result: CheckResult[Any], catalog: Catalog = BUILTIN, extra: dict[str, Any] | None = None) -> str:
    """The page's HTML. `extra` adds keys to the check document (inspect's header figures)."""
    doc = {**check_document(result), **(extra or {})}
    srcs = sources([result.resolved], list(result.hardware.gpus), catalog)
    if not isinstance(result.detail, LlamaCppPlan):
        raise BadInput(f"--html pages show llama.cpp plans; for --engine {result.engine} use --json")
    ranking = gpu_ranking(result.resolved, result.quant, result.detail.settings, catalog)
    rec, purchase = _answers(result, catalog)
    return render_check_html(doc, ranking, srcs, rec, purchase)


def _answers(result: LlamaCppResult, catalog: Catalog) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """What a pre-purchase page opens with: the best Gemma for this hardware at this context, and the cheapest
    hardware for this model, quant and context. Either is left out (None) when it cannot be answered."""
    settings = result.detail.settings
    n_ctx = settings.n_ctx or result.resolved.spec.n_ctx_train
    rec = purchase = None
    try:
        rec = recommend_document(recommend(result.hardware, Needs(n_ctx=n_ctx, top=3), settings,
                                           catalog=catalog))
        purchase = buy_document(buy([result.resolved], result.quant, BuyNeeds(n_ctx=n_ctx, top=3), settings,
                                    catalog=catalog))
    except GemmaFitError:
        pass  # the page still has the check; the answer section says nothing it cannot back
    return rec, purchase
