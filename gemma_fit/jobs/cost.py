"""`gemma-fit cost`: what a Gemma model costs all in at a daily volume: buying the hardware (its price spread over
AMORTISATION_MONTHS plus the electricity it draws), renting the same GPUs by the hour, or a hosted API by the token.

Throughput is the check's: the aggregate tokens/s of the plan at the requested concurrency (llama.cpp on the
hardware given). A volume past what one machine generates in a day needs several; each option is priced for the
machines it needs. Energy is drawn at the board's published power (a whole machine's where the price database has
it) while generating, an upper bound (decode rarely reaches it), and none while idle. A rented machine is paid by
the hour for the hours the volume needs (whole hours, at least one a day) or --hours-per-day. An API is priced per
generated token, its input tokens counted at the workload's prompt-to-output ratio. Every price carries its date and
source (hardware_db/prices/: gpus.yaml, machines.yaml, rent.yaml, api.yaml, electricity.yaml).
"""

from __future__ import annotations

import math
from dataclasses import field
from pathlib import Path
from typing import Any

from gemma_fit.base.errors import BadInput
from gemma_fit.base.ranges import MAX_TOKENS, check_range
from gemma_fit.base.record import record
from gemma_fit.db.catalog import BUILTIN, Catalog
from gemma_fit.hardware.catalog import load_hardware_db
from gemma_fit.hardware.prices import current_price, price_table, prices_as_of
from gemma_fit.hardware.spec import Hardware

SCHEMA = "gemma-fit.cost/1"
AMORTISATION_MONTHS = 36  # a purchase spread over three years, a common depreciation period for computer hardware
DAYS_PER_MONTH = 365.25 / 12
MAX_TOKENS_PER_DAY = 10**13
VOLUMES = tuple(round(10 ** (e / 4)) for e in range(12, 45))  # 1,000 to 10^11 tokens a day, four steps a decade


@record
class Source:
    what: str
    date: str
    url: str


@record
class CostOption:
    """One way to get the volume: its cost per day at a volume (a function of it), and what it is made of."""

    kind: str  # buy | rent | api
    label: str
    fixed_usd_per_day: float  # buy: the purchase spread over AMORTISATION_MONTHS
    usd_per_token: float  # energy (buy) or the API's blended price; rent: 0 (paid by the hour)
    hourly_usd: float | None  # rent: all instances the volume needs, per hour
    tokens_per_hour: float | None  # rent and buy: what one machine (or instance set) generates in an hour
    upfront_usd: float | None
    energy_wh_per_token: float | None
    sources: tuple[Source, ...]
    hours_per_day: float | None = None  # rent: as given (--hours-per-day), else what the volume needs
    notes: tuple[str, ...] = ()

    def units(self, tokens_per_day: float) -> int:
        """Machines (or instance sets) the volume needs: one generates tokens_per_hour x 24 a day, a rented one
        x the hours it is paid for (--hours-per-day)."""
        if not self.tokens_per_hour:
            return 1
        hours = self.hours_per_day if self.kind == "rent" and self.hours_per_day else 24.0
        return max(1, math.ceil(tokens_per_day / (self.tokens_per_hour * hours)))

    def usd_per_day(self, tokens_per_day: float) -> float:
        n = self.units(tokens_per_day)
        if self.kind == "rent":
            hours = self.hours_per_day or min(24.0, max(1.0, math.ceil(tokens_per_day / n / self.tokens_per_hour)
                                                       if self.tokens_per_hour else 24.0))
            return n * (self.hourly_usd or 0.0) * hours
        return n * self.fixed_usd_per_day + tokens_per_day * self.usd_per_token


@record
class CostResult:
    model: str
    quant: str
    hardware: str
    tokens_per_day: int
    throughput_tokens_per_s: float
    options: tuple[CostOption, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)


def check_volume(tokens_per_day: int | None, users: int | None, tokens_per_request: int | None,
                 requests_per_user: float) -> int:
    """--tokens-per-day N, or --users N --tokens-per-request N (each user's requests a day: --requests-per-user)."""
    if (tokens_per_day is None) == (users is None):
        raise BadInput("give --tokens-per-day N, or --users N with --tokens-per-request N")
    if tokens_per_day is not None:
        check_range("--tokens-per-day", tokens_per_day)
        return tokens_per_day
    if tokens_per_request is None:
        raise BadInput("--users needs --tokens-per-request N (tokens generated per request)")
    check_range("--users", users)
    check_range("--tokens-per-request", tokens_per_request)
    check_range("--requests-per-user", requests_per_user)
    volume = round((users or 0) * tokens_per_request * requests_per_user)
    if not 1 <= volume <= MAX_TOKENS_PER_DAY:
        raise BadInput(f"{volume:,} tokens a day is out of range (1 to {MAX_TOKENS_PER_DAY:,})")
    return volume


def kwh_price(given: float | None, catalog: Catalog) -> tuple[float, Source]:
    if given is not None:
        check_range("--kwh-price", given)
        return given, Source("electricity (--kwh-price)", "given", "")
    table = load_hardware_db(catalog.hardware_dirs).electricity
    marked = [e for e in table.values() if e.default]
    default = marked[-1] if marked else None  # an extra folder's (read after the built-in one) is the user's own
    if default is None:
        raise BadInput("no default electricity price in hardware_db/prices/electricity.yaml; give --kwh-price USD")
    p = default.per_kwh
    return p.usd, Source(f"electricity, {default.region}", p.date, p.source)


def buy_option(hw: Hardware, tps: float, kwh: tuple[float, Source], catalog: Catalog,
               prices_file: Path | None) -> CostOption | None:
    """Buying these GPUs (or the unified machine): the purchase over AMORTISATION_MONTHS, energy per token."""
    table = price_table(catalog.hardware_dirs, prices_file)
    today = prices_as_of(table)
    total, power, sources = 0.0, 0.0, []
    for g in hw.gpus:
        entry = table.get(g.id)
        price = current_price(entry, today) if entry is not None else None
        if price is None:
            return None
        total += price.usd
        sources.append(Source(f"{g.name} ({price.kind})", price.date, price.source))
        w = entry.power.w if entry is not None and entry.power is not None else g.tdp_w
        if w is None:
            return None
        power += float(w)
    usd_kwh, kwh_source = kwh
    wh_per_token = power / (tps * 3600.0)
    return CostOption("buy", f"buy {hw.label}", total / (AMORTISATION_MONTHS * DAYS_PER_MONTH),
                      wh_per_token / 1000.0 * usd_kwh, None, tps * 3600.0, total, wh_per_token,
                      (*sources, kwh_source),
                      notes=(f"{power:g} W drawn while generating (the boards' rated power: an upper bound)",
                             f"the purchase spread over {AMORTISATION_MONTHS} months"))


def rent_options(hw: Hardware, tps: float, hours_per_day: float | None, catalog: Catalog) -> list[CostOption]:
    """Every provider renting these GPUs on demand: enough instances for the GPUs, by the hour."""
    ids = {g.id for g in hw.gpus}
    if len(ids) != 1:
        return []  # mixed GPUs: no provider rents the same set
    (gpu,) = ids
    out = []
    for r in load_hardware_db(catalog.hardware_dirs).rent.values():
        if r.gpu != gpu:
            continue
        instances = math.ceil(len(hw.gpus) / r.gpus)
        hourly = instances * r.per_hour.usd
        what = r.product if instances == 1 else f"{instances} x {r.product}"
        paid = (f"paid for {hours_per_day:g} hours a day" if hours_per_day else
                "paid only for the whole hours a day the volume needs (--hours-per-day 24 for an always-on server)")
        out.append(CostOption("rent", f"rent {what} ({r.provider})", 0.0, 0.0, hourly,
                              tps * 3600.0, None, None,
                              (Source(f"{r.provider} {r.product}, on demand", r.per_hour.date, r.per_hour.source),),
                              hours_per_day, notes=(paid,)))
    return out


def api_options(model_id: str, prompt_per_output: float, catalog: Catalog) -> list[CostOption]:
    out = []
    for a in load_hardware_db(catalog.hardware_dirs).api.values():
        if a.model.lower() != model_id.lower():
            continue
        per_token = (a.output_per_mtok.usd + prompt_per_output * a.input_per_mtok.usd) / 1e6
        out.append(CostOption("api", f"API: {a.provider}", 0.0, per_token, None, None, None, None,
                              (Source(f"{a.provider} output", a.output_per_mtok.date, a.output_per_mtok.source),
                               Source(f"{a.provider} input", a.input_per_mtok.date, a.input_per_mtok.source)),
                              notes=(f"input counted at {prompt_per_output:g} prompt tokens per generated token",)))
    return out


def cheapest_at(options: tuple[CostOption, ...], volume: float) -> CostOption:
    return min(options, key=lambda o: o.usd_per_day(volume))


def changes(options: tuple[CostOption, ...]) -> list[dict[str, Any]]:
    """The volumes (tokens a day, on a grid of four steps a decade) where the cheapest option changes."""
    out: list[dict[str, Any]] = []
    last = None
    for v in VOLUMES:
        best = cheapest_at(options, v)
        if best.label != last:
            out.append({"from_tokens_per_day": v, "cheapest": best.label})
            last = best.label
    return out


def breakeven_months(buy: CostOption, other: CostOption, volume: float) -> float | None:
    """Months until the purchase has cost less than the alternative at this volume (energy included)."""
    if buy.upfront_usd is None:
        return None
    n = buy.units(volume)
    saving = other.usd_per_day(volume) - volume * buy.usd_per_token
    if saving <= 0:
        return None
    return round(n * buy.upfront_usd / saving / DAYS_PER_MONTH, 1)


def cost_document(r: CostResult, kwh_used: float) -> dict[str, Any]:
    """gemma-fit.cost/1, cheapest first."""
    v = r.tokens_per_day
    ranked = sorted(r.options, key=lambda o: o.usd_per_day(v))
    rivals = [o for o in r.options if o.kind != "buy"]

    def row(o: CostOption) -> dict[str, Any]:
        n = o.units(v)
        # buying pays off against the cheapest alternative first: the break-even that matters is against it
        against = min(rivals, key=lambda x: x.usd_per_day(v)) if o.kind == "buy" and rivals else None
        be = breakeven_months(o, against, v) if against is not None else None
        return {"kind": o.kind, "label": o.label, "usd_per_mtok": round(o.usd_per_day(v) / v * 1e6, 4),
                "usd_per_day": round(o.usd_per_day(v), 2), "machines": n,
                "energy_wh_per_mtok": round(o.energy_wh_per_token * 1e6, 1) if o.energy_wh_per_token else None,
                "upfront_usd": round(n * o.upfront_usd, 2) if o.upfront_usd is not None else None,
                "hourly_usd": round(n * o.hourly_usd, 4) if o.hourly_usd is not None else None,
                "breakeven_months": be, "breakeven_against": against.label if against is not None else None,
                "sources": [{"what": s.what, "date": s.date, "url": s.url} for s in o.sources],
                "notes": list(o.notes)}

    chart = [{"tokens_per_day": vol, **{o.label: round(o.usd_per_day(vol) / vol * 1e6, 4) for o in r.options}}
             for vol in VOLUMES]
    return {"schema": SCHEMA, "model": r.model, "quant": r.quant, "hardware": r.hardware,
            "workload": {"tokens_per_day": v}, "throughput_tokens_per_s": round(r.throughput_tokens_per_s, 2),
            "kwh_price_usd": kwh_used, "amortisation_months": AMORTISATION_MONTHS,
            "options": [row(o) for o in ranked], "cheapest": ranked[0].label if ranked else None,
            "changes": changes(r.options) if r.options else [], "chart": chart, "notes": list(r.notes)}


@record
class CostAsk:
    """What `cost` is asked: the volume and the local prices that replace the database's defaults."""

    tokens_per_day: int | None = None
    users: int | None = None
    tokens_per_request: int | None = None
    requests_per_user: float = 1.0
    kwh_price: float | None = None
    hours_per_day: float | None = None
    prompt_tokens: int = 512  # per request: the API's input tokens
    prices_file: Path | None = None


def cost(model: str, quant: str | None, hardware: Any, ask: CostAsk, *, catalog: Catalog = BUILTIN,
         machine: Any = None) -> tuple[CostResult, float]:
    """Buying the hardware vs renting it vs a hosted API for `model` at the asked volume; (result, kWh price)."""
    from gemma_fit.jobs.check import check
    from gemma_fit.memory.settings import RunSettings

    volume = check_volume(ask.tokens_per_day, ask.users, ask.tokens_per_request, ask.requests_per_user)
    if ask.hours_per_day is not None:
        check_range("--hours-per-day", ask.hours_per_day)
    check_range("--prompt-tokens", ask.prompt_tokens)
    per_request = ask.tokens_per_request or 256
    one, at_once = ask.prompt_tokens + per_request, min(ask.users or 1, 256)
    if one * at_once > MAX_TOKENS:  # the server's -c holds every request at once; no --ctx to blame
        who = f"{at_once} requests at once x " if at_once > 1 else ""
        raise BadInput(f"{who}(--prompt-tokens {ask.prompt_tokens:,} + {per_request:,} generated) = "
                       f"{one * at_once:,} tokens of context, more than the {MAX_TOKENS:,} gemma-fit plans for: "
                       "fewer or shorter requests")

    def at(slots: int) -> Any:
        s = RunSettings(n_ctx=max(4096, (ask.prompt_tokens + per_request) * slots), n_parallel=slots,
                        kv_unified=slots > 1)
        return check(model, hardware, quant=quant, settings=s, machine=machine, catalog=catalog)

    if ask.users is not None:
        r = at(at_once)  # the requests one llama-server serves at once
    else:  # a volume alone: as many requests at once as the volume needs, as a server batches them (up to 64)
        r = at(1)
        slots = 1
        while (r.performance is not None and r.performance.aggregate_tokens_per_s * 86400 < volume and slots < 64
               and r.verdict.value != "no-go" and one * slots * 2 <= MAX_TOKENS):
            bigger = at(slots * 2)
            if bigger.verdict.value == "no-go" or bigger.performance is None:
                break
            r, slots = bigger, slots * 2
    if one > r.resolved.spec.n_ctx_train:  # llama-server caps a slot at the trained context
        raise BadInput(f"--prompt-tokens {ask.prompt_tokens:,} + {per_request:,} generated = {one:,} tokens, more than "
                       f"{r.resolved.spec.id}'s trained context of {r.resolved.spec.n_ctx_train:,}: a shorter request, "
                       "or a model with a longer context")
    if r.performance is None or r.verdict.value == "no-go":
        raise BadInput(f"{r.resolved.spec.id} {r.quant} does not run on {r.hardware.label} ({r.verdict.value}): "
                       "nothing to price; see gemma-fit check")
    tps = float(r.performance.aggregate_tokens_per_s)
    kwh = kwh_price(ask.kwh_price, catalog)
    options: list[CostOption] = []
    bought = buy_option(r.hardware, tps, kwh, catalog, ask.prices_file)
    notes = []
    if bought is not None:
        options.append(bought)
    else:
        notes.append(f"no purchase price or power figure for {r.hardware.label} in hardware_db/prices")
    options += rent_options(r.hardware, tps, ask.hours_per_day, catalog)
    options += api_options(r.resolved.spec.id, ask.prompt_tokens / per_request, catalog)
    if not options:
        raise BadInput(f"no price to compare for {r.resolved.spec.id} on {r.hardware.label}: no purchase, rental or "
                       "API price in hardware_db/prices")
    slots = r.detail.settings.n_parallel if hasattr(r.detail, "settings") else 1
    notes.append(f"{tps:,.1f} tokens/s in total at {slots} request{'s' if slots > 1 else ''} at once (llama.cpp, "
                 f"{r.quant}): {tps * 86400 / 1e6:,.1f} M tokens a day per machine")
    return CostResult(r.resolved.spec.id, r.quant, r.hardware.label, volume, tps, tuple(options), tuple(notes)), kwh[0]
