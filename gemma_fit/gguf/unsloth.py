"""Unsloth's dynamic quants (UD-*): their tensor mix is not published, so a UD plan follows its base type's
llama-quantize mix and carries, as extra margin, what the published UD files weigh beyond that mix
(model_db/llamacpp/unsloth_ud.yaml)."""

from __future__ import annotations

import math
from functools import cache

from gemma_fit.base.record import record
from gemma_fit.gguf.layout import estimated_file_bytes
from gemma_fit.gguf.tensors import TensorPlan, build_plan
from gemma_fit.gguf.types import file_types, ggml_type, unsloth_ud


@record
class UnpublishedMix:
    recipe: str  # e.g. UD-Q4_K_XL
    mix_of: str  # the llama-quantize type modelled, e.g. Q4_K_M
    excess_ratio: float  # published file / modelled file - 1, at least 0
    evidence: str  # which published file(s) the ratio comes from
    excess_bytes: int  # excess_ratio x this plan's file

    def note(self) -> str:
        return (f"Unsloth does not publish the {self.recipe} tensor mix: modelled as {self.mix_of}, and "
                f"{self.excess_bytes / 2**20:,.0f} MiB more kept free ({self.excess_ratio:.1%}, {self.evidence})")


@cache
def _ratio(recipe: str, model_id: str) -> float:
    published = int(unsloth_ud()[recipe]["published_bytes"][model_id]["bytes"])
    from gemma_fit.model.catalog import resolve_model

    return published / estimated_file_bytes(build_plan(resolve_model(model_id).spec, recipe)) - 1


def _bits(recipe: str) -> float:
    return file_types()[recipe].default_type.bits_per_weight


def _nearest_plain_named(recipe: str) -> list[tuple[str, str]]:
    """(recipe, model) of the published UD files named after a plain llama.cpp type (UD-IQ2_XXS, UD-Q4_K_M ...)
    whose type is the nearest below and the nearest above `recipe`'s in bits per weight: how much Unsloth
    upgrades a mix varies with its bits (a 2-bit file gains more than a 6-bit one)."""
    named = [r for r, u in unsloth_ud().items() if r == f"UD-{u['mix_of']}"]
    below = [r for r in named if _bits(r) <= _bits(recipe)]
    above = [r for r in named if _bits(r) >= _bits(recipe)]
    picked = sorted({*sorted(below, key=_bits)[-1:], *sorted(above, key=_bits)[:1]}, key=_bits)
    return [(r, m) for r in picked for m in unsloth_ud()[r]["published_bytes"]]


def unpublished_mix(plan: TensorPlan) -> UnpublishedMix | None:
    """The UD excess of `plan`: its own model's published file where there is one, else the largest excess
    any published file of that recipe shows; a UD-<type> name with no published file of its own takes the
    largest the files named after the nearest plain types show."""
    recipe = plan.ftype.name
    if plan.ftype.mix_of is None:
        return None
    entry = unsloth_ud().get(recipe)
    if entry is not None and plan.model.id in entry["published_bytes"]:
        ratio, evidence = _ratio(recipe, plan.model.id), f"the published {plan.model.id} file"
    else:
        pool = [(recipe, m) for m in entry["published_bytes"]] if entry is not None else _nearest_plain_named(recipe)
        worst_recipe, worst = max(pool, key=lambda rm: _ratio(*rm))
        ratio = _ratio(worst_recipe, worst)
        evidence = f"the most any published file shows: {worst}" if entry is not None else (
            f"the most the nearest published UD types show: {worst_recipe} of {worst}")
    ratio = max(ratio, 0.0)
    return UnpublishedMix(recipe, plan.ftype.mix_of, ratio, evidence,
                          math.ceil(ratio * estimated_file_bytes(plan)))


def published_excess(plan: TensorPlan) -> float:
    """The share by which the plan's own model's published UD file outweighs the modelled mix (0 where that file is
    not published): its tensors carry those bytes, and decode reads them. Unlike the memory margin, never another
    model's figure: a speed taken slower on another file's evidence is no safer, only wrong."""
    entry = unsloth_ud().get(plan.ftype.name)
    if plan.ftype.mix_of is None or entry is None or plan.model.id not in entry["published_bytes"]:
        return 0.0
    return max(_ratio(plan.ftype.name, plan.model.id), 0.0)


def bf16_share(plan: TensorPlan) -> float:
    """The share of the layers' dense matrix weights a UD file built around Q8_0 (UD-Q8_K_XL) keeps in BF16: no
    quantized llama.cpp type is wider than Q8_0, so what its own model's published file weighs beyond the Q8_0 mix is
    tensors kept unquantized, each weight 2 bytes where Q8_0 takes 34/32. Counted as layer matrices, which a prompt
    multiplies through the BF16 kernels (cuBLAS, hipBLAS, or Vulkan's scalar shaders without BF16 cooperative
    matrices): Strix Halo's Vulkan runs Gemma 3 12B UD-Q8_K_XL prompts at 514 tok/s, 520 so counted, 744 as plain
    Q8_0 (docs/speed.md). 0 for every other file."""
    if plan.ftype.mix_of != "Q8_0":
        return 0.0
    excess = published_excess(plan) * estimated_file_bytes(plan)
    per_weight = ggml_type("BF16").bits_per_weight / 8 - ggml_type("Q8_0").bits_per_weight / 8
    dense = sum(t.n_elements for t in plan.tensors if t.role == "layer" and len(t.shape) >= 2 and "_exps" not in t.name)
    return min(1.0, excess / per_weight / dense) if dense else 0.0
