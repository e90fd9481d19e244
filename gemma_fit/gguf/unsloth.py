"""Unsloth's dynamic quants (UD-*): their tensor mix is not published, so a UD plan follows its base type's
llama-quantize mix and carries, as extra margin, what the published UD files weigh beyond that mix
(model_db/llamacpp/unsloth_ud.yaml)."""

from __future__ import annotations

import math
from functools import cache

from gemma_fit.base.record import record
from gemma_fit.gguf.layout import estimated_file_bytes
from gemma_fit.gguf.tensors import TensorPlan, build_plan
from gemma_fit.gguf.types import unsloth_ud


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


def unpublished_mix(plan: TensorPlan) -> UnpublishedMix | None:
    """The UD excess of `plan`: its own model's published file where there is one, else the largest excess
    any published file of that recipe shows."""
    recipe = plan.ftype.name
    if plan.ftype.mix_of is None:
        return None
    published = unsloth_ud()[recipe]["published_bytes"]
    if plan.model.id in published:
        ratio, evidence = _ratio(recipe, plan.model.id), f"the published {plan.model.id} file"
    else:
        worst = max(published, key=lambda m: _ratio(recipe, m))
        ratio, evidence = _ratio(recipe, worst), f"the most any published file shows: {worst}"
    ratio = max(ratio, 0.0)
    return UnpublishedMix(recipe, plan.ftype.mix_of, ratio, evidence,
                          math.ceil(ratio * estimated_file_bytes(plan)))
