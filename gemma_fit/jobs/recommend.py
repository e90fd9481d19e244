"""`gemma-fit recommend`: the best Gemma configurations for one machine and one need, ranked.

Every database model x a ladder of file types (and Google's QAT file where published) x KV cache f16 / q8_0
is checked by the whole pipeline at the needed context, with llama.cpp's automatic placement (-ngl auto,
expert offload for MoE models), keeping the margin free on every GPU. Each model keeps its best plan by the one
decision rule (gemma_fit.engines.decision: the speed floor, then plans entirely on the GPU at 4 bits or more,
2- and 3-bit only where no 4-bit file fits, then the preference); a model whose best is beaten on every axis by
another model's best of the same class is left out; the rest are ranked by the rule, each with its reason.
Quality is published data only (gemma_fit.gguf.quality). Pure: no printing, no files.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from gemma_fit.base.errors import BadInput, GemmaFitError
from gemma_fit.base.ranges import check_optional, check_range
from gemma_fit.base.record import record
from gemma_fit.base.suggest import did_you_mean
from gemma_fit.base.text import printable
from gemma_fit.base.verdict import Verdict
from gemma_fit.db.catalog import BUILTIN, Catalog
from gemma_fit.engines import registry
from gemma_fit.engines.decision import Option, Ranked, best, rank, scales
from gemma_fit.engines.llamacpp import LlamaCppResult, run_check
from gemma_fit.engines.projector import with_projector
from gemma_fit.engines.speculative import check_ask, check_drafting_engine, with_model_drafter
from gemma_fit.gguf.quality import RANKING_BENCHMARK, Quality, quality
from gemma_fit.hardware.spec import Hardware
from gemma_fit.jobs.needs import PREFERENCES, Needs
from gemma_fit.memory.settings import RunSettings, validate
from gemma_fit.model.catalog import ResolvedModel, entry_spec, load_model_db
from gemma_fit.model.spec import GENERATION_ORDER

SCHEMA = "gemma-fit.recommend/1"
OLLAMA = "ollama"  # every candidate also shows the Ollama command of its plan
# The file types tried, best first: llama-quantize's common steps from full precision down to 2.7 bits.
QUANT_LADDER = ("BF16", "Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "QAT_Q4_0", "IQ4_XS", "Q3_K_M", "IQ3_XXS", "Q2_K",
                "IQ2_M")
KV_CACHE_TYPES = ("f16", "q8_0")  # q8_0: near-lossless (llama.cpp PR #7412); q4_0 is not recommended unasked


@record
class Candidate:
    result: LlamaCppResult
    quality: Quality
    kv_type: str

    @property
    def decode(self) -> float:
        p = self.result.performance
        return p.decode_tokens_per_s if p else 0.0

    @property
    def max_ctx(self) -> int:
        """The largest context the plan is known to hold: all on the GPU(s) up to max_ctx_fit, and the needed
        one with its layers or experts offloaded."""
        return max(self.result.max_ctx_fit, self.result.n_ctx)

    def axes(self) -> tuple[float, float, float]:
        q = self.quality.score
        return (q if q is not None else -1.0, self.decode, float(self.max_ctx))

    def option(self) -> Option[Candidate]:
        """The candidate as the decision rule sees it."""
        r = self.result
        fit = r.detail.fit
        rooms = [d.headroom_bytes for d in r.detail.estimate.devices]
        return Option(self, r.resolved.spec.id, r.quant, r.detail.plan.ftype.default_type.bits_per_weight,
                      r.verdict.runs_on_gpu and not fit.auto_n_cpu_moe, self.quality, self.decode, self.max_ctx,
                      min(rooms, default=0), "the GPU" if rooms else "system memory")


@record
class Recommendation:
    hardware: Hardware
    needs: Needs
    min_tps: float
    ranked: tuple[Candidate, ...]  # best first, at most needs.top
    reasons: tuple[str, ...]  # the decision rule's reason for each, in the same order
    meets_min_tps: bool  # False: no plan reaches min_tps; `ranked` holds the fastest instead
    n_checked: int
    skipped: tuple[str, ...]  # models left out, with why
    engine: str = "llama.cpp"  # or "ollama": the same llama.cpp plans, run through Ollama
    scales: tuple[str, ...] = ()  # the quality scales the ranking compares (more than one: a mix, stated)


def check_needs(needs: Needs) -> None:
    if needs.prefer not in PREFERENCES:
        raise BadInput(f"--prefer {printable(needs.prefer, 60)} is not one of {', '.join(PREFERENCES)}"
                       f"{did_you_mean(needs.prefer, PREFERENCES)}")
    check_range("--top", needs.top)
    check_range("--need-ctx", needs.n_ctx, "--ctx")
    check_optional("--min-tps", needs.min_tps)


def _models(needs: Needs, catalog: Catalog) -> tuple[list[ResolvedModel], list[str]]:
    entries = sorted(load_model_db(catalog.model_dirs).values(),
                     key=lambda e: (GENERATION_ORDER[e.generation], entry_spec(e).n_embd, e.id))
    out, skipped = [], []
    for e in entries:
        spec = entry_spec(e)
        if needs.vision and not (e.towers and e.towers.vision):
            continue
        if spec.n_ctx_train < needs.n_ctx:
            skipped.append(f"{e.id}: trained for {spec.n_ctx_train:,} tokens, under the {needs.n_ctx:,} needed")
            continue
        out.append(ResolvedModel(spec, e.id, e.id, catalog.model_dirs))
    return out, skipped


def _drafted(models: list[ResolvedModel], base: RunSettings, hw: Hardware, skipped: list[str]) -> list[ResolvedModel]:
    """With --mtp / --draft, the models the drafter asked can draft for; the others are skipped with why (a drafter
    that drafts for none is bad input, not "nothing fits")."""
    if base.speculative is None:
        return models
    out, why = [], []
    for m in models:
        try:
            with_model_drafter(m, base, hw)
        except BadInput as exc:
            why.append(f"{m.spec.id}: {exc}")
            continue
        out.append(m)
    if not out and why:
        # the last is the newest and largest model, the drafter's own family when it has one: the telling reason
        raise BadInput(f"the drafter asked drafts for none of the {len(why)} models; {why[-1].split(': ', 1)[1]}")
    skipped.extend(why)
    return out


def _fits_with_margin(r: LlamaCppResult, margin: int) -> bool:
    est = r.detail.estimate
    return r.verdict in (Verdict.GO, Verdict.OFFLOAD) and all(d.headroom_bytes >= margin for d in est.devices)


def _try(model: ResolvedModel, quant: str, kv: str, base: RunSettings, hw: Hardware, needs: Needs,
         margin: int, tower: bool = False) -> Candidate | None:
    """The plan of one model, quant and KV cache type if it fits with the margin; `tower`: the vision projector
    is loaded (and room for one image kept) even when no image is asked for, as Ollama does."""
    s = replace(base, cache_type_k=kv, cache_type_v=kv)
    try:
        s = with_projector(model, s, 1 if needs.vision or tower else None, None)
        s = with_model_drafter(model, s, hw)  # --mtp / --draft: this model's drafter, or no candidate
        r = run_check(model, quant, s, hw, margin_bytes=margin)
    except GemmaFitError:  # a recipe not published for this model, a tower not modelled: not a candidate
        return None
    if not _fits_with_margin(r, margin + (r.detail.unmodelled.bytes if r.detail.unmodelled else 0)):
        return None
    return Candidate(r, quality(model.spec.id, r.detail.plan.ftype), kv)


def _dominated(o: Option[Candidate], others: Sequence[Option[Candidate]]) -> bool:
    """Beaten on quality, speed and context by a plan of the same class (entirely on the GPU at 4+ bits, or not)."""
    a = o.item.axes()
    return any(x.sound == o.sound and x.item.axes() != a and all(p >= q for p, q in zip(x.item.axes(), a, strict=True))
               for x in others)


def best_per_model(found: Sequence[Candidate], min_tps: float, prefer: str) -> list[Ranked[Candidate]]:
    """Each model once, in its best plan by the rule: the alternatives shown are other models (31B at IQ3_XXS,
    26B-A4B at Q4_K_M, 12B at Q8_0), not the same model at the next quant."""
    by_model: dict[str, list[Option[Candidate]]] = {}
    for c in found:
        by_model.setdefault(c.result.resolved.spec.id, []).append(c.option())
    return [b for plans in by_model.values() if (b := best(plans, min_tps, prefer)) is not None]


def recommend(hw: Hardware, needs: Needs, settings: RunSettings | None = None, engine: str = "llama.cpp",
              catalog: Catalog = BUILTIN) -> Recommendation:
    """The ranked configurations of `hw` for `needs`. Raises BadInput for impossible needs or an engine whose
    plans are not llama.cpp's: Ollama runs llama.cpp's llama-server on the same GGUF files since v0.30.0
    (docs/engines.md), so its plans are these with Ollama's commands."""
    from gemma_fit.memory.fit import SAFETY_MARGIN_BYTES

    check_needs(needs)
    eng = registry.plan_engine(engine, "recommend")
    engine = eng.name
    margin = SAFETY_MARGIN_BYTES if needs.margin_bytes is None else needs.margin_bytes
    base = replace(settings or RunSettings(), n_ctx=needs.n_ctx, n_parallel=needs.n_parallel, n_gpu_layers=None)
    models, skipped = _models(needs, catalog)
    tower = eng.loads_vision_tower
    for m in models[:1]:  # settings llama.cpp refuses for every model are bad input, not "nothing fits"
        validate(base, m.spec)
    check_ask(base.speculative, catalog.model_dirs)
    if base.speculative is not None:  # Ollama drafts with Gemma 4's MTP drafter only
        check_drafting_engine(engine, base.speculative)
    found: list[Candidate] = []
    checked = 0
    models = _drafted(models, base, hw, skipped)
    for m in models:
        for quant in eng.offered_quants(m, QUANT_LADDER):
            for kv in KV_CACHE_TYPES:
                checked += 1
                c = _try(m, quant, kv, base, hw, needs, margin, tower(m))
                if c is not None:
                    found.append(c)
                    break  # q8_0 only where f16 does not fit: the same plan, its cache halved
    min_tps = needs.min_tps
    fast = [c for c in found if c.decode >= min_tps]
    meets = bool(fast)  # plans under the floor are shown only when none reaches it (fastest first, by the rule)
    front = [b.option for b in best_per_model(fast or found, min_tps, needs.prefer)]
    front = [o for o in front if not _dominated(o, front)]
    ranked = rank(front, min_tps, needs.prefer)[: needs.top]
    return Recommendation(hw, needs, min_tps, tuple(r.option.item for r in ranked), tuple(r.why for r in ranked),
                          meets, checked, tuple(skipped), engine, tuple(scales([r.option for r in ranked])))

def why(c: Candidate, rank: int, rec: Recommendation) -> str:
    """Why a candidate ranks where it does: the decision rule's reason, then the figures behind it."""
    r = c.result
    parts = [f"#{rank} by {rec.needs.prefer}: {rec.reasons[rank - 1]}", c.quality.why() if c.quality.score is not None
             else f"no published {RANKING_BENCHMARK}: ranks after the models with one on quality",
             f"decode {c.decode:.1f} tok/s" if r.performance else "no speed model for this hardware",
             f"largest context {c.max_ctx:,}", r.reasons[0]]
    if c.kv_type != "f16":
        parts.append(f"KV cache {c.kv_type} (the f16 cache does not fit with the margin)")
    return "; ".join(parts)


def candidate_json(c: Candidate, rank: int, rec: Recommendation) -> dict[str, Any]:
    r, p = c.result, c.result.performance
    d = r.detail
    est = d.estimate
    return {
        "rank": rank, "model": r.resolved.spec.id, "quant": r.quant, "n_ctx": r.n_ctx,
        "verdict": r.verdict.value, "decode_tokens_per_s": round(c.decode, 1) if p else None,
        "quality": c.quality.score, "why": why(c, rank, rec),
        "command": registry.plan_engine(rec.engine, "recommend").plan_command(r, rec.needs.n_parallel),
        "kv_cache_type": c.kv_type, "max_ctx_fit": c.max_ctx, "n_gpu_layers": d.fit.n_gpu_layers,
        "n_cpu_moe": d.fit.auto_n_cpu_moe, "prefill_tokens_per_s": round(p.prefill_tokens_per_s, 1) if p else None,
        "file_size_bytes": d.file_size_bytes,
        "min_headroom_bytes": min((d.headroom_bytes for d in est.devices), default=None),
        "quality_detail": {"benchmark": c.quality.benchmark.name if c.quality.benchmark else None,
                           "benchmark_value": c.quality.benchmark.value if c.quality.benchmark else None,
                           "benchmark_source": c.quality.benchmark.source if c.quality.benchmark else None,
                           "retention": round(c.quality.retention, 4), "retention_how": c.quality.retention_how},
        "llama_server_command": r.command,
        "ollama_command": _ollama_command(r, rec.needs.n_parallel),
    }


def _ollama_command(r: LlamaCppResult, n_parallel: int) -> str | None:
    """The plan through Ollama; None where Ollama cannot run it as counted (a drafter other than Gemma 4's MTP one)."""
    draft = r.detail.settings.speculative
    if draft is not None and draft.method != "mtp":
        return None
    return registry.plan_engine(OLLAMA, "recommend").plan_command(r, n_parallel)


def scales_note(names: Sequence[str]) -> str | None:
    """What a ranking that mixes quality scales says about it (None for one scale)."""
    if len(names) < 2:
        return None
    return (f"quality mixes {len(names)} scales ({'; '.join(names)}): close, but not one benchmark setup "
            "(model_db/quality/benchmarks.yaml says why)")


def recommend_document(rec: Recommendation) -> dict[str, Any]:
    n = rec.needs
    note = None if rec.meets_min_tps else (
        f"no configuration reaches {rec.min_tps:g} tok/s on this hardware: these are the fastest that fit")
    return {
        "schema": SCHEMA, "hardware": rec.hardware.label, "engine": rec.engine,
        "candidates": [candidate_json(c, i, rec) for i, c in enumerate(rec.ranked, 1)],
        "needs": {"n_ctx": n.n_ctx, "min_tps": rec.min_tps, "vision": n.vision, "n_parallel": n.n_parallel,
                  "prefer": n.prefer, "top": n.top},
        "quality_scales": list(rec.scales), "quality_note": scales_note(rec.scales),
        "meets_min_tps": rec.meets_min_tps, "note": note, "n_checked": rec.n_checked, "skipped": list(rec.skipped),
        "method": ("every database model x file types BF16 to IQ2_M (and Google's QAT Q4_0) x KV cache f16/q8_0, "
                   "checked with llama.cpp's automatic placement at the needed context, keeping the margin free; "
                   "ranked by one rule (docs/decisions.md): plans that reach the speed floor first, then plans "
                   "entirely on the GPU at 4 bits or more, 2- and 3-bit files only where no 4-bit file of the model "
                   "fits, then the preference, quality scores within 0.4 points being a tie that goes to the "
                   "faster plan; plans beaten on quality, speed and context by another are dropped. "
                   "quality = the model's "
                   "published MMLU-Pro (model card) x what its quant keeps of the full model's score (Unsloth's "
                   "5-shot MMLU of Gemma 3 27B per quant; llama.cpp's KLD scoreboard between measured types). "
                   "Smaller models lose more at the same bits than the 27B these were measured on."),
    }
