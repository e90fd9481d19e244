"""What a user needs of a recommendation (`recommend`) and of a purchase (`buy`), with the defaults: plain data,
cheap to import, so that the command line shows the defaults the jobs use."""

from __future__ import annotations

from gemma_fit.base.record import record
from gemma_fit.memory.fit import SAFETY_MARGIN_BYTES

PREFERENCES = ("quality", "speed", "context")
SEGMENTS = ("consumer", "workstation", "datacenter", "apple", "embedded")


@record
class Needs:
    """recommend: the context, the least speed, and what to rank by."""

    n_ctx: int = 8192  # the context the user needs, per sequence
    min_tps: float = 10.0  # about reading speed: a plan slower than this is not one to recommend unasked
    vision: bool = False  # models with a vision tower, and room for one image's projector
    n_parallel: int = 1
    prefer: str = "quality"
    top: int = 5
    margin_bytes: int | None = None  # kept free on each GPU; None: llama.cpp's fit target (1 GiB)


@record
class BuyNeeds:
    """buy: the context and speed the hardware must give, and what may be bought."""

    n_ctx: int = 8192
    min_tps: float = 20.0  # a purchase aims above reading speed (5 to 10 tokens/s) with room for longer prompts
    budget_usd: float | None = None
    max_gpus: int = 2
    segments: tuple[str, ...] = SEGMENTS
    used: bool = False
    vision: bool = False
    top: int = 10
    margin_bytes: int = SAFETY_MARGIN_BYTES
    allow_offload: bool = False  # plans with layers or experts in the host's memory (whose speed is unknown)
