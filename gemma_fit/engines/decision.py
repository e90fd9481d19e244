"""The one decision rule: which plan is best, and why, wherever gemma-fit ranks plans (recommend, the answer at the
top of a report, the plan each buy option takes; check's advice orders its moves by its classes). docs/decisions.md
gives the rule with its reasons:

1. Plans that reach the speed floor come before those that do not (which are ranked by speed alone).
2. A plan that runs entirely on the GPU(s) at 4 bits or more comes before every plan with layers or experts in
   system memory and every 2- or 3-bit plan: offloaded speed is the host's, and what a bigger quant adds is
   mostly under what the quality data can resolve.
3. A 2- or 3-bit plan of a model is dropped where a 4-bit or better plan of that model is among the candidates.
4. Then the preference (quality, speed or context). Quality scores closer than QUALITY_RESOLUTION are a tie the
   data cannot break; ties go to the faster plan, then the larger context, then the more memory left.

Pure: plain figures in, ranked figures with their reasons out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Generic, TypeVar

from gemma_fit.base.record import record
from gemma_fit.gguf.quality import Quality

# Quality points the data cannot tell apart: one standard error of the benchmarks behind it (MMLU-Pro's 12,032
# questions at 80% correct: 0.36 points; Unsloth's per-quant MMLU, 14,042 questions at 71%: 0.38).
QUALITY_RESOLUTION = 0.4
LOW_BITS = 4.0  # file types whose main tensor type stores fewer bits per weight than this are "2- or 3-bit"
PREFERENCES = ("quality", "speed", "context")

T = TypeVar("T")


@record
class Option(Generic[T]):
    """One plan as the rule sees it; `item` is the caller's own object (a candidate, a report cell)."""

    item: T
    model: str
    quant: str
    bits: float  # bits per weight of the file type's main tensor type (Q4_K: 4.5, Q3_K: 3.44, Q2_K: 2.63)
    on_gpu: bool  # nothing spills: the whole model on the GPU(s), or on a machine without one, in its memory
    quality: Quality
    decode: float  # tokens/s, 0 when unknown
    max_ctx: int
    headroom: int  # bytes left on the tightest device
    home: str = "the GPU"  # where a plan that does not spill runs: "system memory" on a machine without a GPU

    @property
    def low_bit(self) -> bool:
        return self.bits < LOW_BITS

    @property
    def sound(self) -> bool:
        """Entirely on the GPU at 4 bits or more: the plans rule 2 puts first."""
        return self.on_gpu and not self.low_bit

    @property
    def score(self) -> float:
        return self.quality.score if self.quality.score is not None else -1.0


@record
class Ranked(Generic[T]):
    option: Option[T]
    why: str  # a few words: why it stands where it stands


def rank(options: Sequence[Option[T]], min_tps: float, prefer: str = "quality") -> list[Ranked[T]]:
    """Every option, best first, each with its reason (rules 1 to 4 of the module's docstring)."""
    out: list[Ranked[T]] = []
    left = _drop_low_bit(options)
    while left:
        out.append(_first(left, min_tps, prefer))
        left.remove(out[-1].option)
    return out


def best(options: Sequence[Option[T]], min_tps: float, prefer: str = "quality") -> Ranked[T] | None:
    """rank(...)[0] without ranking the rest: one pass (a report asks it over thousands of cells per GPU)."""
    pool = _drop_low_bit(options)
    return _first(pool, min_tps, prefer) if pool else None


def best_sound(options: Sequence[Option[T]], min_tps: float, prefer: str = "quality") -> Ranked[T] | None:
    """best() over the options that are sound and reach the floor (rules 1 and 2's first class); None when none is.
    When there is one, that class is best()'s tier whatever else is offered: a caller whose other options can be
    neither (a report's offloaded cells) gets best() over all without building those."""
    top = [o for o in options if o.sound and o.decode >= min_tps]
    return best(top, min_tps, prefer) if top else None


def _first(left: Sequence[Option[T]], min_tps: float, prefer: str) -> Ranked[T]:
    """The best of the options left, with its reason."""
    tier = _first_tier(left, min_tps)
    # Under the floor only the speed matters: the plan closest to usable comes first.
    pick, how = _pick(tier, prefer if tier[0].decode >= min_tps else "speed")
    return Ranked(pick, _why(pick, how, min_tps))


def _drop_low_bit(options: Sequence[Option[T]]) -> list[Option[T]]:
    """Rule 3: a model's 2- and 3-bit plans only where none of its 4-bit or better plans is a candidate."""
    has_4bit = {o.model for o in options if not o.low_bit}
    return [o for o in options if not (o.low_bit and o.model in has_4bit)]


def _first_tier(left: Sequence[Option[T]], min_tps: float) -> list[Option[T]]:
    """Rules 1 and 2: the options of the best class still left."""
    fast = [o for o in left if o.decode >= min_tps] or list(left)
    return [o for o in fast if o.sound] or fast


def _pick(tier: Sequence[Option[T]], prefer: str) -> tuple[Option[T], str]:
    """Rule 4: the best of one class for the preference, and what decided it."""
    if prefer == "speed":
        return max(tier, key=lambda o: (o.decode, o.score, o.max_ctx, o.headroom)), "the fastest"
    if prefer == "context":
        return max(tier, key=lambda o: (o.max_ctx, o.score, o.decode, o.headroom)), "the largest context"
    top = max(o.score for o in tier)
    near = [o for o in tier if o.score >= top - QUALITY_RESOLUTION]
    pick = max(near, key=lambda o: (o.decode, o.max_ctx, o.headroom))
    if len(near) == 1:
        return pick, "the best quality"
    return pick, f"the fastest of {len(near)} plans within {QUALITY_RESOLUTION} quality points (a tie)"


def _why(o: Option[T], how: str, min_tps: float) -> str:
    parts = [how if o.quality.score is not None or how != "the best quality" else "no published quality score"]
    if o.sound:
        parts.append(f"all {'in' if o.home == 'system memory' else 'on'} {o.home} at 4+ bits")
    elif not o.on_gpu:
        parts.append("partly in system memory, so after plans all on the GPU")
    else:
        parts.append(f"{o.bits:.1f} bits, as no 4-bit file of this model fits (keeps {o.quality.retention:.1%} "
                     "of full precision on Gemma 3 27B; smaller models lose more)")
    if o.decode < min_tps:  # the tiers put it here only when nothing left reaches the floor
        parts.append(f"under {min_tps:g} tok/s, as is everything left")
    return "; ".join(parts)


def scales(options: Sequence[Option[T]]) -> list[str]:
    """The quality scales a ranking compares, in order of first appearance (more than one: the mix is stated)."""
    return list(dict.fromkeys(o.quality.benchmark.scale for o in options if o.quality.benchmark is not None))
