"""`gemma-fit cost`: buy vs rent vs a hosted API for a Gemma model at a daily volume."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from gemma_fit import api
from gemma_fit.base.files import write_text
from gemma_fit.cli import state
from gemma_fit.cli.options import GpuOpt, HardwareOpt, tokens, volume


def cost_command(
    model: Annotated[str, typer.Option("--model", "-m", help="Model id or alias (gemma-3-27b, 27b).")],
    quant: Annotated[str | None, typer.Option("--quant", "-q", help="File type. \\[default: Q4_K_M]")] = None,
    gpu: GpuOpt = None,
    hardware: HardwareOpt = None,
    tokens_per_day: Annotated[int | None, typer.Option("--tokens-per-day", parser=volume, metavar="N[k|M]",
                                                       help="Generated tokens a day (k = x1000, M = x1,000,000, "
                                                            "as API prices count them).")] = None,
    users: Annotated[int | None, typer.Option("--users", help="Users (concurrent requests), with "
                                              "--tokens-per-request.")] = None,
    tokens_per_request: Annotated[int | None, typer.Option("--tokens-per-request", parser=tokens, metavar="N[k]",
                                                           help="Tokens generated per request.")] = None,
    requests_per_user: Annotated[float, typer.Option("--requests-per-user", help="Requests each user makes a "
                                                     "day.")] = 1.0,
    kwh_price: Annotated[float | None, typer.Option("--kwh-price", help="USD per kWh. \\[default: the dated US "
                                                    "average, hardware_db/prices]")] = None,
    hours_per_day: Annotated[float | None, typer.Option("--hours-per-day", help="Hours a day a rented GPU is paid "
                                                        "for. \\[default: the hours the volume needs]")] = None,
    prompt_tokens: Annotated[int, typer.Option("--prompt-tokens", parser=tokens, metavar="N[k]",
                                               help="Prompt tokens per request (an API bills them).")] = 512,
    prices: Annotated[Path | None, typer.Option("--prices", help="Your purchase prices (hardware_db/prices "
                                                "schema) instead of the database's.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout.")] = False,
    html: Annotated[Path | None, typer.Option("--html", help="Also write a self-contained page: the answer, a chart "
                                              "of cost per million tokens against daily volume, every source.")] = None,
) -> None:
    """Buy vs rent vs a hosted API: cost per million tokens at your volume, and where the answer changes."""
    ask = api.CostAsk(tokens_per_day, users, tokens_per_request, requests_per_user, kwh_price, hours_per_day,
                      prompt_tokens, prices)
    hw = hardware if hardware is not None else list(gpu or [])
    if not hw:
        raise api.BadInput("give --gpu ID (repeat it for several) or --hardware FILE: the machine to price")
    doc = api.cost(model, quant, hw, ask, catalog=state.catalog())
    if html is not None:
        write_text(html, api.cost_page(doc))
    if as_json:
        print(json.dumps(doc, indent=2, allow_nan=False))
    else:
        from gemma_fit.present.terminal import console, render_cost

        render_cost(console(), doc)
