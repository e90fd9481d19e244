"""`gemma-fit buy`: the hardware to buy for a Gemma model, context and speed, cheapest first.

Options: every priced GPU card on its own and two to --max-gpus of a kind, mixed pairs of priced cards on the same
backend, and every priced unified-memory machine (Mac, Strix Halo box, DGX Spark, Jetson kit). Each is checked
by the whole pipeline at the needed context with llama.cpp's automatic placement, keeping the margin free; with
--quant auto, each option takes its best file type (gemma_fit.gguf.quality's ranking, ties to the faster plan).
Plans must keep the whole model in the option's GPU (or unified) memory unless --allow-offload: the host a card
goes in is not known, and offloaded speed is its memory's. An option meets the need when its plan reaches
--min-tps. Ranked by price (lowest first), then speed; a
budget only drops options above it, so raising it never removes one. Pure: no printing, no files.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import date
from itertools import combinations
from pathlib import Path
from typing import Any

from gemma_fit.base.errors import BadInput, GemmaFitError
from gemma_fit.base.ranges import check_optional, check_range
from gemma_fit.base.record import record
from gemma_fit.base.suggest import did_you_mean
from gemma_fit.base.text import has_unsafe, printable
from gemma_fit.base.verdict import Verdict
from gemma_fit.db.catalog import BUILTIN, Catalog
from gemma_fit.engines.decision import best
from gemma_fit.engines.llamacpp_engine import ENGINE as LLAMA_CPP
from gemma_fit.gguf.types import quant_names
from gemma_fit.hardware.catalog import load_gpu_entries, load_gpus
from gemma_fit.hardware.prices import (
    Price,
    current_price,
    is_discontinued,
    price_table,
    prices_as_of,
    used_price,
)
from gemma_fit.hardware.select import select_hardware
from gemma_fit.hardware.spec import GPUSpec, Hardware
from gemma_fit.jobs.needs import SEGMENTS, BuyNeeds, Needs
from gemma_fit.jobs.recommend import KV_CACHE_TYPES, QUANT_LADDER, Candidate, _try
from gemma_fit.memory.settings import RunSettings, validate
from gemma_fit.model.catalog import ResolvedModel

SCHEMA = "gemma-fit.buy/1"
MAX_MODELS = 4  # each option is checked for every model and quant: 4 keep a buy under a minute
MAX_GPUS = 4  # llama.cpp splits a model over at most this many here (more is a server, priced as one)
# --quant auto: each option's best file type from full precision down to Q4_K_M, the usual floor of a purchase
# (below it quality falls faster: Q3_K_M keeps 98.9% of Gemma 3 27B's MMLU, IQ2_M 93.0%).
AUTO_QUANTS = QUANT_LADDER[: QUANT_LADDER.index("Q4_K_M") + 1]


@record
class HardwareOption:
    gpus: tuple[GPUSpec, ...]
    price_usd: float
    prices: tuple[Price, ...]  # one per distinct part
    covers: str  # "cards" (the host not included) or "machine"
    tdp_w: float | None
    machine: str | None = None  # what the price buys, for a unified-memory machine
    used: tuple[Price, ...] = ()  # every part's used price (empty where a part has none), shown beside the price
    discontinued: str | None = None  # the month a part stopped being sold new (the latest of its parts')

    @property
    def key(self) -> str:
        return "+".join(g.id for g in self.gpus)


@record
class BuyOption:
    hardware: HardwareOption
    plan: Candidate | None  # None: nothing fits with the margin

    @property
    def decode(self) -> float:
        return self.plan.decode if self.plan else 0.0


@record
class Purchase:
    needs: BuyNeeds
    models: tuple[str, ...]
    quant: str
    ranked: tuple[BuyOption, ...]
    meets: bool  # False: nothing within the budget reaches min_tps; `ranked` holds the fastest instead
    n_options: int
    n_unpriced: int
    today: str


def check_buy_needs(n: BuyNeeds) -> None:
    check_range("--max-gpus", n.max_gpus)
    check_optional("--budget", n.budget_usd)
    check_range("--min-tps", n.min_tps)
    check_range("--need-ctx", n.n_ctx, "--ctx")
    unknown = [s for s in n.segments if s not in SEGMENTS]
    if unknown:
        raise BadInput(f"--segment {printable(unknown[0], 60)} is not one of {', '.join(SEGMENTS)} or all"
                       f"{did_you_mean(unknown[0], SEGMENTS)}")
    check_range("--top", n.top)


def hardware_options(needs: BuyNeeds, today: date, catalog: Catalog = BUILTIN,
                     prices_file: Path | None = None) -> tuple[list[HardwareOption], int]:
    """Every priced option in the segments asked, under the budget; and how many parts had no price."""
    table = price_table(catalog.hardware_dirs, prices_file)
    gpus = load_gpus(catalog.hardware_dirs)
    entries = load_gpu_entries(catalog.hardware_dirs)
    priced: list[tuple[GPUSpec, Price, str | None]] = []
    unpriced = 0
    for gid, entry in table.items():
        spec = gpus.get(gid)
        price = current_price(entry, today, needs.used)
        if spec is None or entry.segment not in needs.segments or _server_only(entries[gid].form_factor, needs):
            continue
        if price is None:
            unpriced += 1
            continue
        priced.append((spec, price, (entry.machine or spec.name) if spec.unified_memory else None))
    out: list[HardwareOption] = []
    for spec, price, machine in priced:
        power = _power(table, spec)
        counts = [1] if spec.unified_memory else range(1, needs.max_gpus + 1)
        for n in counts:
            out.append(HardwareOption((spec,) * n, price.usd * n, (price,), "machine" if machine else "cards",
                                      power * n if power is not None else None, machine,
                                      *_used_and_ended(table, (spec,) * n, today)))
    if needs.max_gpus >= 2:
        cards = [(s, p) for s, p, m in priced if m is None]
        for (a, pa), (b, pb) in combinations(cards, 2):
            if a.backend == b.backend:
                pw = [_power(table, a), _power(table, b)]
                out.append(HardwareOption((a, b), pa.usd + pb.usd, (pa, pb), "cards",
                                          sum(pw) if None not in pw else None,  # type: ignore[arg-type]
                                          None, *_used_and_ended(table, (a, b), today)))
    if needs.budget_usd is not None:
        out = [o for o in out if o.price_usd <= needs.budget_usd]
    return out, unpriced


def _used_and_ended(table: dict[str, Any], gpus: tuple[GPUSpec, ...], today: date,
                    ) -> tuple[tuple[Price, ...], str | None]:
    """Every part's used price (none unless each part has one) and the latest month a part stopped being sold."""
    used = [used_price(table[g.id]) for g in gpus]
    ended = [table[g.id].discontinued.date[:7] for g in gpus if is_discontinued(table[g.id], today)]
    return (tuple(u for u in used if u is not None) if None not in used else ()), max(ended, default=None)


def _server_only(form_factor: str, needs: BuyNeeds) -> bool:
    """An SXM or OAM module goes only in its maker's server board: offered when datacenters alone are asked."""
    return any(f in form_factor for f in ("SXM", "OAM")) and needs.segments != ("datacenter",)


def _power(table: dict[str, Any], spec: GPUSpec) -> float | None:
    entry = table.get(spec.id)
    if entry is not None and entry.power is not None:
        return float(entry.power.w)
    return float(spec.tdp_w) if spec.tdp_w is not None else None


def _hardware(option: HardwareOption, catalog: Catalog) -> Hardware:
    return select_hardware([g.id for g in option.gpus], None, catalog.hardware_dirs)


def _best_plan(option: HardwareOption, models: Sequence[ResolvedModel], quants: Sequence[str], needs: BuyNeeds,
               base: RunSettings, catalog: Catalog) -> Candidate | None:
    """The option's best plan for the models and quants asked that reaches the speed (else its fastest)."""
    try:
        hw = _hardware(option, catalog)
    except GemmaFitError:
        return None
    rneeds = Needs(n_ctx=needs.n_ctx, vision=needs.vision, margin_bytes=needs.margin_bytes)

    def plan_of(model: ResolvedModel, quant: str) -> Candidate | None:
        """f16 KV cache (what check plans), q8_0 only where that does not fit, as recommend: same plan, cache halved."""
        for kv in KV_CACHE_TYPES:
            c = _try(model, quant, kv, base, hw, rneeds, needs.margin_bytes)
            if c is not None and (needs.allow_offload or c.result.verdict == Verdict.GO):
                return c
        return None

    found = [c for m in models for q in quants if (c := plan_of(m, q)) is not None]
    chosen = best([c.option() for c in found], needs.min_tps, "quality")  # the one decision rule
    return chosen.option.item if chosen is not None else None


def _check_published(models: Sequence[ResolvedModel], quant: str) -> None:
    """A file type none of the models was published in (Gemma 4's QAT mixes for Gemma 3n) is bad input, not
    "nothing fits" after every option failed."""
    from gemma_fit.gguf.tensors import build_plan

    refusals = []
    for m in models:
        try:
            build_plan(m.spec, quant)
        except BadInput as exc:
            refusals.append(exc)
    if refusals and len(refusals) == len(models):
        raise refusals[0]


def buy_quants(quant: str) -> tuple[str, ...]:
    """--quant as buy takes it: auto (each option's best of AUTO_QUANTS), or one file type llama.cpp makes (its
    canonical name). Anything else is bad input before any plan: an unknown type made every plan fail, and the
    answer read "nothing reaches N tok/s"."""
    if has_unsafe(quant):  # 'q4_k_m\n' is not stripped into Q4_K_M: a control character is never part of a name
        raise BadInput(f"--quant '{printable(quant, 60)}' holds a control or bidi character: give a file type "
                       "(see gemma-fit list quants) or auto")
    if quant.strip().lower() == "auto":
        return AUTO_QUANTS
    try:
        return (LLAMA_CPP.canonical_quant(quant),)
    except BadInput:
        hint = did_you_mean(quant, ("auto", *quant_names())) or "; see gemma-fit list quants"
        raise BadInput(f"--quant '{quant.strip()}' is not a file type llama.cpp makes, nor auto{hint}") from None


def buy(models: Sequence[ResolvedModel], quant: str, needs: BuyNeeds, settings: RunSettings | None = None,
        today: date | None = None, catalog: Catalog = BUILTIN, prices_file: Path | None = None,
        ) -> Purchase:
    """The options for `models` (any of them) at `quant` ('auto': each option's best), cheapest first."""
    check_buy_needs(needs)
    if not models:
        raise BadInput("give at least one --model")
    if len(models) > MAX_MODELS:
        raise BadInput(f"buy compares hardware for at most {MAX_MODELS} models at once ({len(models)} given): "
                       "name the ones you would run")
    today = today or prices_as_of(price_table(catalog.hardware_dirs, prices_file))
    base = replace(settings or RunSettings(), n_ctx=needs.n_ctx, n_gpu_layers=None)
    for m in models:
        validate(base, m.spec)
        if m.spec.n_ctx_train < needs.n_ctx:
            raise BadInput(f"{m.spec.id} is trained for {m.spec.n_ctx_train:,} tokens, under the --ctx "
                           f"{needs.n_ctx:,} needed")
    quants = buy_quants(quant)
    if quants is not AUTO_QUANTS:
        _check_published(models, quants[0])
    options, unpriced = hardware_options(needs, today, catalog, prices_file)
    evaluated = [BuyOption(o, _best_plan(o, models, quants, needs, base, catalog)) for o in options]
    fitting = [o for o in evaluated if o.plan is not None]
    meeting = [o for o in fitting if o.decode >= needs.min_tps]
    if meeting:
        ranked = sorted(meeting, key=lambda o: (o.hardware.price_usd, -o.decode, o.hardware.key))
    else:
        ranked = sorted(fitting, key=lambda o: (-o.decode, o.hardware.price_usd, o.hardware.key))
    shown = "auto" if quants is AUTO_QUANTS else quants[0]
    return Purchase(needs, tuple(m.spec.id for m in models), shown, tuple(ranked[: needs.top]), bool(meeting),
                    len(options), unpriced, today.isoformat())


def option_json(o: BuyOption, rank: int) -> dict[str, Any]:
    h, c = o.hardware, o.plan
    price = max(h.prices, key=lambda p: p.date)  # the newest of the parts' prices dates the option
    r = c.result if c else None
    return {
        "rank": rank, "gpus": [g.id for g in h.gpus], "price_usd": round(h.price_usd, 2), "price_date": price.date,
        "price_source": "; ".join(dict.fromkeys(p.source for p in h.prices)),
        "verdict": r.verdict.value if r else Verdict.NO_GO.value, "decode_tokens_per_s": round(o.decode, 1),
        "max_ctx_fit": c.max_ctx if c else 0, "tdp_w": h.tdp_w,
        "price_kind": "+".join(dict.fromkeys(p.kind for p in h.prices)), "price_covers": h.covers,
        "tokens_per_s_per_1000_usd": round(o.decode / h.price_usd * 1000, 2) if h.price_usd else None,
        "model": r.resolved.spec.id if r else None, "quant": r.quant if r else None,
        "kv_cache_type": c.kv_type if c else None, "quality": c.quality.score if c else None,
        "command": r.command if r else None, "names": [g.name for g in h.gpus],
        "machine": h.machine,
        "used_price_usd": round(sum(p.usd for p in h.used), 2) if h.used else None,
        "used_price_date": max((p.date for p in h.used), default=None),
        "discontinued": h.discontinued,  # YYYY-MM no longer sold new (priced at a street or used price), or null
        "n_ctx": r.n_ctx if r else None,
    }


def buy_document(p: Purchase) -> dict[str, Any]:
    n = p.needs
    note = None if p.meets else (f"nothing{' within the budget' if n.budget_usd else ''} reaches {n.min_tps:g} "
                                 "tok/s: these are the fastest options that fit")
    return {
        "schema": SCHEMA, "options": [option_json(o, i) for i, o in enumerate(p.ranked, 1)],
        "models": list(p.models), "quant": p.quant, "meets_min_tps": p.meets, "note": note,
        "needs": {"n_ctx": n.n_ctx, "min_tps": n.min_tps, "budget_usd": n.budget_usd, "max_gpus": n.max_gpus,
                  "segments": list(n.segments), "used": n.used, "vision": n.vision},
        "n_options": p.n_options, "n_unpriced": p.n_unpriced, "prices_as_of": p.today,
        "method": ("every priced card alone and up to --max-gpus of a kind, mixed pairs on one backend, and every "
                   "priced unified-memory machine, checked with llama.cpp's automatic placement at the needed "
                   "context keeping the margin free (KV cache f16 as check plans it, q8_0 where f16 does not fit); "
                   "the plan by the decision rule (docs/decisions.md); ranked by price, then decode speed. Prices: "
                   "hardware_db/prices (dated street price, launch MSRP under 3 years old and while it is sold new, "
                   "used prices beside new and ranked by with --used, a product no longer sold at its street or used"
                   " price; sources in docs/prices.md); a card's price does not include the computer it goes in."),
    }
