"""vLLM with Gemma 4's MTP drafter: `--speculative-config '{"method": "mtp", "model": "google/gemma-4-31B-it-assistant",
"num_speculative_tokens": N}'`.

vLLM maps the assistant checkpoints to its Gemma4MTP model and wires their layers to the target's KV cache (vLLM docs,
features/speculative_decoding/mtp: "wires the assistant layers to share KV cache with the target model"), so the
drafter adds its weights, loaded in bfloat16 (it does not take the target's quantization), split like the target over
the tensor-parallel ranks, and no KV cache. Support came with vLLM PR #41745 (merged 2026-05-06, first in 0.21.0;
0.20.1 refuses it); the 12B assistant needs a later change (PR #44429) that no release tag carried when the recipe
was read. Drafts per step default to vLLM's recipe (vllm-project/recipes Google/Gemma4.md, "benchmarked on NVIDIA
A100 and H100"): E2B 2, E4B 4, 12B 4, 26B-A4B 4, 31B 4 (4-8). vLLM drafts on the GPU inside its CUDA graphs: no host
cost per draft is added (llama.cpp's fitted one is llama.cpp's).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import replace
from typing import Any

from gemma_fit.base.errors import BadInput
from gemma_fit.engines.mtp import Drafter, drafter_by_id, drafter_for
from gemma_fit.engines.versions import parse_version
from gemma_fit.hardware.spec import Hardware

MTP_SINCE = (0, 21, 0)
RECIPE_DRAFTS = {"gemma-4-E2B": 2, "gemma-4-E4B": 4, "gemma-4-12B": 4, "gemma-4-26B-A4B": 4, "gemma-4-31B": 4}
BF16 = 2


def vllm_drafter(spec: Any, engine_version: str, target_id: str) -> tuple[Any, Drafter]:
    """The resolved Speculative for vLLM (bf16 drafter, the recipe's drafts where none were given) and its drafter;
    BadInput where this vLLM release or model has no MTP path."""
    if spec.method != "mtp":
        raise BadInput("--draft MODEL on --engine vllm is not modelled; --mtp (Gemma 4's own drafter) is")
    version = parse_version(engine_version.split()[-1]) if engine_version else None
    if version is not None and version < MTP_SINCE:
        raise BadInput(f"--mtp needs vLLM 0.21.0 or later (Gemma 4 MTP, PR #41745); {engine_version} has no such path")
    if target_id == "gemma-4-12B":
        raise BadInput("--mtp for gemma-4-12B on vLLM needs a nightly build (PR #44429, the 12B's unified assistant): "
                       "no release is modelled; use --engine llama.cpp")
    d = drafter_by_id(spec.draft_model) if spec.draft_model else drafter_for(target_id)  # a report's ask names none
    return replace(spec, draft_model=d.id, draft_quant="bf16",
                   draft_max=spec.draft_max or RECIPE_DRAFTS.get(target_id, 4)), d


def drafter_bytes(d: Drafter, tp: int) -> int:
    """The drafter's bfloat16 weights on each tensor-parallel rank."""
    return d.params * BF16 // max(1, tp)


def speculative_flag(d: Drafter, k: int) -> str:
    config = json.dumps({"method": "mtp", "model": d.hf_repo, "num_speculative_tokens": k})
    return f"--speculative-config {shlex.quote(config)}"


def drafter_reason(d: Drafter, tp: int) -> str:
    return (f"MTP drafter {d.hf_repo} in bfloat16: {drafter_bytes(d, tp) / 2**30:.2f} GiB per GPU in the weights; it "
            "reads the target's KV cache (no pool of its own)")


def with_vllm_speculation(perf: Any, spec: Any, d: Drafter, model: Any, quant: str, devices: tuple[Any, ...],
                          tp: int, dtype_bytes: int, s: Any) -> Any:
    """The performance with the drafter, from vLLM's own target step and the drafter's pass on the first GPU."""
    context = s.prompt_tokens + (s.output_tokens or 0) // 2
    target_pipe = vllm_target_pipeline(model, quant, devices, tp, dtype_bytes, context)
    n_parallel = s.max_num_seqs or 1
    from gemma_fit.engines.mtp import mtp_pipeline
    from gemma_fit.engines.speculative import apply_figures, speculative_figures
    from gemma_fit.speed.traffic import SCALING_POINTS

    drafter = mtp_pipeline(d, Hardware("", tuple(devices[:1]), None), d.params * BF16)
    n = max(1, n_parallel)
    points = tuple(c for c in SCALING_POINTS if c <= n) or (1,)
    fig = speculative_figures(spec, target_pipe, drafter, n, points, overhead_s=0.0)
    return apply_figures(perf, spec, fig, n)


def vllm_target_pipeline(spec: Any, quant: str, devices: tuple[Any, ...], tp: int, dtype_bytes: int,
                         context: int) -> Any:
    """vLLM's decode step of the target (engines.hf_speed), its tensor-parallel link as vllm.py's speed uses it."""
    from gemma_fit.engines.hf_speed import hf_model_work, hf_pipeline, tensor_link

    link_gbps, link_latency = tensor_link("vllm", tuple(devices)) if tp > 1 else (0.0, 0.0)
    return hf_pipeline(hf_model_work(spec, dtype_bytes), devices, quant, "vllm", context, tp, 1, link_gbps,
                       link_latency)
