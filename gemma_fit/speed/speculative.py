"""Speculative decoding: a small drafter proposes k tokens, the target checks them in one batched step.

One step of one sequence: the drafter runs k times (one token each, each after the last), then the target
processes the k drafted tokens and one more together, reading its weights once and its KV cache once; it keeps the
drafts up to the first it disagrees with, and its own token after them. With each draft accepted with probability p
(independently: the model of Leviathan et al. 2023, "Fast Inference from Transformers via Speculative Decoding",
eq. 1), a step yields (1 - p^(k+1)) / (1 - p) tokens.

With B sequences at once the target's step carries B (k + 1) tokens: on a memory-bound GPU that is nearly free,
once the arithmetic of the batch outweighs the weight read it is not, so the gain shrinks as requests are batched
and can turn into a loss. The drafter's own steps carry B tokens each. Both come from the same bytes-and-FLOPs
pipelines as plain decoding (speed.batch), so a drafter that spills to the CPU or a compute-bound GPU shows up as
the loss it is.
"""

from __future__ import annotations

from gemma_fit.base.record import record
from gemma_fit.speed.batch import Pipeline


def tokens_per_step(acceptance: float, draft_max: int) -> float:
    """Expected tokens a verification step yields: the accepted prefix of `draft_max` drafts plus the target's own."""
    if draft_max < 1:
        return 1.0
    if acceptance >= 1.0:
        return float(draft_max + 1)
    return (1.0 - acceptance ** (draft_max + 1)) / (1.0 - acceptance)


@record
class SpeculativeStep:
    """One speculative step of `batch` sequences, and what plain decoding does in the same time."""

    batch: int
    tokens_per_step: float
    draft_s: float  # the drafter's k sequential steps
    verify_s: float  # the target's step over batch x (k + 1) tokens
    plain_step_s: float  # the target's ordinary step of `batch` tokens

    @property
    def step_s(self) -> float:
        return self.draft_s + self.verify_s

    @property
    def per_user_tokens_per_s(self) -> float:
        return self.tokens_per_step / self.step_s if self.step_s > 0 else 0.0

    @property
    def aggregate_tokens_per_s(self) -> float:
        return self.batch * self.per_user_tokens_per_s

    @property
    def speedup(self) -> float:
        """Tokens per second with the drafter over without it, at this batch."""
        return self.per_user_tokens_per_s * self.plain_step_s if self.plain_step_s > 0 else 0.0


def speculative_step(target: Pipeline, drafter: Pipeline, batch: int, draft_max: int,
                     acceptance: float, overhead_s: float = 0.0) -> SpeculativeStep:
    """The step of `batch` sequences with `draft_max` drafts each: the target's verification reads each sequence's
    KV cache once for its k + 1 tokens; the drafter steps k times over the batch, each with the engine's fixed
    `overhead_s` beside its own pass."""
    verify = target.step_s(batch * (draft_max + 1), kv_seqs=batch)
    draft = draft_max * (drafter.step_s(batch) + overhead_s)
    return SpeculativeStep(batch, tokens_per_step(acceptance, draft_max), draft, verify, target.step_s(batch))


def best_draft_max(target: Pipeline, drafter: Pipeline, batch: int, acceptance: float, overhead_s: float = 0.0,
                   limit: int = 16) -> int:
    """The number of drafts per step that gives the most tokens per second at this batch (1 to `limit`)."""
    return max(range(1, limit + 1),
               key=lambda k: speculative_step(target, drafter, batch, k, acceptance, overhead_s).per_user_tokens_per_s)
