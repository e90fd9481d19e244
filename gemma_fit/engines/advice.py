"""Ranked advice: when a plan does not fit, or fits only tightly or with layers or experts on the CPU,
the moves that change it, each checked with the whole pipeline (verdict, largest context, decode speed),
best first.

The moves are what llama.cpp users do: a quantized KV cache (q8_0, then q4_0: a V cache in a quantized
type needs flash attention), a smaller context, fewer slots, routed experts in system memory (MoE
models), layers on the CPU, the next smaller quant, a second GPU of the same kind.
"""

from __future__ import annotations

from dataclasses import replace

from gemma_fit.base.errors import GemmaFitError
from gemma_fit.base.verdict import Verdict
from gemma_fit.engines.decision import LOW_BITS
from gemma_fit.engines.llamacpp import Advice, LlamaCppResult, run_check
from gemma_fit.gguf.tensors import build_plan
from gemma_fit.hardware.spec import MAX_GPUS_PER_CONTEXT
from gemma_fit.memory.settings import RunSettings

# Quality notes from llama.cpp's own measurements of KV cache quantization (PR #7412 perplexity table:
# q8_0 K and V +0.002 ppl on 7B, q4_0 +0.06), kept as words: the numbers are the PR's, not ours.
KV_NOTE = {"q8_0": "near-lossless (llama.cpp PR #7412: +0.002 perplexity)",
           "q4_0": "a small quality loss (llama.cpp PR #7412: about +0.06 perplexity)"}
# The file types a user steps down through, best first (bits per weight falling).
QUANT_LADDER = ("BF16", "Q8_0", "Q6_K", "Q5_K_M", "Q5_K_S", "Q4_K_M", "Q4_K_S", "IQ4_XS", "Q3_K_M",
                "IQ3_M", "IQ3_XXS", "Q2_K", "IQ2_M")


def _try(base: LlamaCppResult, change: str, flags: str, settings: RunSettings | None = None,
         quant: str | None = None, gpus: int = 0) -> Advice | None:
    hw = base.hardware.times(gpus) if gpus else base.hardware  # the same machine with each GPU (and slot) twice
    d = base.detail
    s = settings or d.settings
    plan = build_plan(base.resolved.spec, quant) if quant else d.plan
    try:
        r = run_check(base.resolved, plan.ftype.name, s, hw, plan=plan, margin_bytes=d.margin_bytes,
                      unmodelled=d.unmodelled)
    except GemmaFitError:
        return None
    if r.verdict == Verdict.NO_GO:
        return None
    speed = r.performance.decode_tokens_per_s if r.performance else None
    return Advice(change, flags, r.verdict, r.max_ctx_fit, speed, r.command, plan.ftype.default_type.bits_per_weight)


def _moves(r: LlamaCppResult) -> list[Advice | None]:
    s = r.detail.settings
    if r.detail.fit.auto_n_cpu_moe:  # experts -ngl auto moved: each move chooses its own
        s = replace(s, n_cpu_moe=0)
    model = r.resolved.spec
    out: list[Advice | None] = []
    auto = replace(s, n_gpu_layers=None)
    for kv in ("q8_0", "q4_0"):
        if s.cache_type_k != kv or s.cache_type_v != kv:
            fa = "" if s.flash_attn != "off" else " -fa on"
            out.append(_try(r, f"KV cache {kv}: {KV_NOTE[kv]}; a quantized V cache needs flash attention",
                            f"-ctk {kv} -ctv {kv}{fa}",
                            replace(auto, cache_type_k=kv, cache_type_v=kv,
                                    flash_attn="on" if s.flash_attn == "off" else s.flash_attn)))
    ctx = r.max_ctx_fit
    if 256 <= ctx < r.n_ctx:
        out.append(_try(r, f"a smaller context: {ctx:,} tokens fit", f"-c {ctx}", replace(auto, n_ctx=ctx)))
    if s.n_parallel > 1:
        out.append(_try(r, "one slot instead of " + str(s.n_parallel), "-np 1", replace(auto, n_parallel=1)))
    if model.n_expert and not s.cpu_moe:
        out.append(_try(r, "every layer's routed experts in system memory", "--cpu-moe",
                        replace(s, cpu_moe=True, n_cpu_moe=0, n_gpu_layers=None)))
    if r.hardware.gpus and s.n_gpu_layers is not None:
        out.append(_try(r, "the layers that fit on the GPU(s), the rest on the CPU (-ngl auto)", "-ngl auto", auto))
    lower = _next_quant_down(r.detail.plan.ftype.name)
    if lower:
        out.append(_try(r, f"the next smaller quant, {lower}", f"--quant {lower}", auto, quant=lower))
    if r.hardware.gpus and len(r.hardware.gpus) * 2 <= MAX_GPUS_PER_CONTEXT and not any(
            g.unified_memory for g in r.hardware.gpus):
        ids = " ".join(f"--gpu {g.id}" for g in r.hardware.gpus * 2)
        what = f"a second {r.hardware.gpus[0].name}" if len(r.hardware.gpus) == 1 else "twice the GPUs"
        out.append(_try(r, what, ids, auto, gpus=2))
    return out


DRAFTER_PAYS = 1.1  # a drafter is worth suggesting from a 10% faster decode on


def drafter_move(r: LlamaCppResult) -> Advice | None:
    """Gemma 4's own MTP drafter on this plan, where the model has one and it makes decoding at least
    DRAFTER_PAYS times faster (engines.speculative); None otherwise."""
    from gemma_fit.engines.mtp import has_drafter
    from gemma_fit.engines.speculative import resolve_speculative, with_drafter

    s = r.detail.settings
    if s.speculative is not None or not has_drafter(r.resolved.spec.id) or r.performance is None:
        return None
    try:
        spec = resolve_speculative(r.resolved, mtp=True, draft=None, draft_max=None, acceptance=None)
        if spec is None:
            return None
        with_mtp = with_drafter(replace(s, n_outputs_max=0), spec, r.hardware, r.resolved.db_dirs, r.resolved.spec)
    except GemmaFitError:
        return None
    move = _try(r, "", "--mtp", with_mtp)
    if move is None or move.decode_tokens_per_s is None:
        return None
    gain = move.decode_tokens_per_s / r.performance.decode_tokens_per_s
    if gain < DRAFTER_PAYS:
        return None
    return replace(move, change=f"Gemma 4's own MTP drafter ({spec.draft_file}): decode x{gain:.2f} at the published "
                                f"acceptance, {move.decode_tokens_per_s:.0f} tok/s")


def _next_quant_down(quant: str) -> str | None:
    if quant in QUANT_LADDER:
        i = QUANT_LADDER.index(quant)
        return QUANT_LADDER[i + 1] if i + 1 < len(QUANT_LADDER) else None
    return "Q4_K_M" if quant in ("F16", "F32") else None


def advise(r: LlamaCppResult) -> tuple[Advice, ...]:
    """The moves that make this plan fit or fit better (a better verdict, or the same one faster), best first."""
    if r.verdict == Verdict.GO:  # nothing needs changing
        return ()
    current = r.verdict.rank
    moves = [a for a in _moves(r) if a is not None]  # in the order a user would try them
    better = [a for a in moves if a.verdict.rank < current
              or (a.verdict.rank == current and (a.decode_tokens_per_s or 0) > _speed(r))]
    # The decision rule's classes first (docs/decisions.md): moves that leave the whole model on the GPU at 4 bits or
    # more before the rest; then the best verdict; among equals, the cheaper move (the order above: KV cache before
    # context, context before quality or hardware).
    return tuple(sorted(better, key=lambda a: (not (a.verdict.runs_on_gpu and a.bits >= LOW_BITS), a.verdict.rank)))


def _speed(r: LlamaCppResult) -> float:
    return r.performance.decode_tokens_per_s if r.performance else 0.0
