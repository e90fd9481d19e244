"""llama.cpp itself: one model, quant, settings and hardware in; llama.cpp's plan, its answer and the speed out.

`run_check` is the estimate every llama.cpp-based answer starts from (check, report cells, recommend, buy,
advice, Ollama); engines.llamacpp_engine wraps it as the `llama.cpp` engine.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from gemma_fit.base.record import record
from gemma_fit.base.units import MIB
from gemma_fit.base.verdict import Verdict
from gemma_fit.base.version import LLAMA_CPP_LABEL
from gemma_fit.engines.base import CheckResult, Unmodelled
from gemma_fit.gguf.layout import estimated_file_bytes
from gemma_fit.gguf.tensors import TensorPlan, build_plan
from gemma_fit.gguf.unsloth import unpublished_mix
from gemma_fit.hardware.spec import Hardware
from gemma_fit.memory.estimate import MemoryEstimate, runtime_overhead
from gemma_fit.memory.fit import SAFETY_MARGIN_BYTES, Fit, decide, with_parallel_outputs
from gemma_fit.memory.llamacpp_fit import FitChoice
from gemma_fit.memory.settings import RunSettings, validate
from gemma_fit.model.catalog import ResolvedModel
from gemma_fit.model.spec import ModelSpec
from gemma_fit.speed.predict import Performance, SpeedInputError, predict_performance
from gemma_fit.speed.serve_llamacpp import llamacpp_serving

if TYPE_CHECKING:
    from gemma_fit.gguf.reader import GGUFHeader

NAME = "llama.cpp"


@record
class Advice:
    """One move that changes a plan (engines.advice), checked with the whole pipeline."""

    change: str  # in words
    flags: str  # what to change on `gemma-fit check` (llama.cpp's spelling where llama.cpp has the flag)
    verdict: Verdict
    max_ctx_fit: int
    decode_tokens_per_s: float | None
    command: str  # the llama-server command of the changed plan
    bits: float = 16.0  # bits per weight of the changed plan's file type (the decision rule's 2-3-bit class)


@record
class LlamaCppPlan:
    """llama.cpp's own part of a check: the tensors, the settings as llama.cpp runs them, its plan (`fit`), and
    what a single check adds (advice, what llama.cpp's own fit would choose)."""

    plan: TensorPlan
    settings: RunSettings
    fit: Fit
    file_size_bytes: int
    speed_error: str | None = None
    advice: tuple[Advice, ...] = ()  # best first (filled for a single check)
    llamacpp_fit: FitChoice | None = None  # what llama.cpp's own fit would choose (a single check)
    margin_bytes: int = SAFETY_MARGIN_BYTES  # kept free on each GPU (--margin), before unmodelled bytes
    unmodelled: Unmodelled | None = None  # bytes of the file this estimate does not place, kept free too

    @property
    def estimate(self) -> MemoryEstimate:
        return self.fit.estimate


LlamaCppResult = CheckResult[LlamaCppPlan]


def assumptions(r: LlamaCppResult) -> list[str]:
    """What a llama.cpp answer takes as given: the rules' version, the sizing, each backend's overhead."""
    backends = tuple(sorted({g.backend for g in r.hardware.gpus}))
    return [*_assumed(r.detail.settings.n_outputs_max, backends), *r.hardware.notes]


@cache  # a report asks it for every cell: a few outputs counts and backends
def _assumed(n_outputs_max: int, backends: tuple[str, ...]) -> tuple[str, ...]:
    out = [
        f"llama.cpp rules as of commit {LLAMA_CPP_LABEL}; compute buffer sized for llama-server "
        f"(logits for {n_outputs_max} output(s) per ubatch)",
        "weights are memory-mapped: host weights count the mapped span of the file",
    ]
    for backend in backends:
        o = runtime_overhead(backend)
        kind = "measured" if o.measured else "a budget, not yet measured"
        out.append(f"{backend} runtime overhead {o.bytes / MIB:.0f} MiB per device ({kind})")
    return tuple(out)


def run_check(resolved: ResolvedModel, quant: str, settings: RunSettings, hardware: Hardware,
              prompt_tokens: int = 512, with_speed: bool = True, plan: TensorPlan | None = None,
              gguf_path: Path | str | None = None, margin_bytes: int = SAFETY_MARGIN_BYTES,
              unmodelled: Unmodelled | None = None, output_tokens: int | None = None,
              request_rate: float | None = None, with_serving: bool = True, explain: bool = True) -> LlamaCppResult:
    """`plan` replaces the database plan when the tensors come from a real GGUF header; `gguf_path` is
    that file as the user gave it (the llama-server command then runs it, not a made-up file name).
    What the plan cannot place (an Unsloth UD file's unpublished mix, `unmodelled`) is kept free on top of
    `margin_bytes`, and the reasons say so. `with_serving` False leaves out the serving answer at the -np slots
    (performance.serving None), for answers that never show it (a compact report cell); `explain` False, the
    suggestion of what would fit instead (memory.fit.decide)."""
    s = with_parallel_outputs(validate(settings, resolved.spec))
    plan = plan or build_plan(resolved.spec, quant)
    ud = unpublished_mix(plan)
    extra = [(ud.excess_bytes, ud.note())] if ud else []
    extra += [(unmodelled.bytes, unmodelled.note)] if unmodelled else []
    fit = decide(plan, s, hardware.gpus, hardware.host_capacity_bytes,
                 gguf_name=str(gguf_path) if gguf_path is not None else None,
                 margin_bytes=margin_bytes + sum(b for b, _ in extra), explain=explain)
    if extra:
        fit = replace(fit, reasons=(*fit.reasons, *(note for _, note in extra)))
    s = fit.estimate.settings  # the plan's own: -ngl auto may move experts (--n-cpu-moe)
    perf, speed_error = None, None
    if with_speed and fit.verdict != Verdict.NO_GO:
        try:
            perf = speed_of(plan, fit.estimate, hardware, prompt_tokens, output_tokens, request_rate,
                            with_serving=with_serving)
            if s.speculative is not None:
                from gemma_fit.engines.speculative import with_speculation

                perf = with_speculation(plan, fit.estimate, hardware, perf, s.speculative, prompt_tokens,
                                        output_tokens, resolved.db_dirs)
            if perf.serving is not None and perf.serving.max_concurrency == 0:
                fit = replace(fit, reasons=(*fit.reasons, _slot_too_small(s, fit.estimate.n_ctx, prompt_tokens,
                                                                          output_tokens)))
        except SpeedInputError as exc:
            speed_error = str(exc)
    detail = LlamaCppPlan(plan, s, fit, estimated_file_bytes(plan), speed_error, margin_bytes=margin_bytes,
                          unmodelled=unmodelled)
    return result_of(resolved, hardware, detail, perf)


def result_of(resolved: ResolvedModel, hardware: Hardware, detail: LlamaCppPlan,
              performance: Performance | None) -> LlamaCppResult:
    """The answer of a llama.cpp plan (its verdict, reasons and command are the plan's own)."""
    fit = detail.fit
    return CheckResult(NAME, resolved, detail.plan.ftype.name, hardware, fit.verdict, fit.reasons, fit.max_ctx_fit,
                       fit.estimate.n_ctx, cpu_command(fit.server_command, hardware), performance, detail)


def cpu_command(command: str, hardware: Hardware) -> str:
    """The command with the threads (-t) and --numa mode the speed was counted for; numactl mode runs under numactl,
    bound to the first node's cores and memory (llama.cpp's --numa numactl takes the CPU map numactl gives it)."""
    if hardware.threads_flag is not None:
        command = f"{command} -t {hardware.threads_flag}"
    if hardware.numa is None:
        return command
    command = f"{command} --numa {hardware.numa}"
    return f"numactl --cpunodebind=0 --membind=0 {command}" if hardware.numa == "numactl" else command


def _slot_too_small(s: RunSettings, n_ctx: int, prompt_tokens: int, output_tokens: int | None) -> str:
    need = prompt_tokens + (output_tokens or 0)
    slot = n_ctx if s.kv_unified else n_ctx // max(1, s.n_parallel)
    return (f"each of the {s.n_parallel} slots holds {slot:,} tokens, fewer than one request's {need:,} (prompt"
            f"{' + output' if output_tokens else ''}): llama-server rejects such requests; -c "
            f"{s.n_parallel * need:,} gives every slot room (the speeds are for {s.n_parallel} full slots)")


def speed_of(plan: TensorPlan, est: MemoryEstimate, hardware: Hardware, prompt_tokens: int,
             output_tokens: int | None = None, request_rate: float | None = None,
             with_serving: bool = True) -> Performance:
    """Single-stream speed and the serving answer at the plan's -np slots (raises SpeedInputError)."""
    perf = predict_performance(plan, est, hardware, prompt_tokens)
    if not with_serving:
        return perf
    return replace(perf, serving=llamacpp_serving(plan, est, hardware, perf.prefill_tokens_per_s, prompt_tokens,
                                                  output_tokens, request_rate))


@record
class InspectResult:
    path: Path  # as the user gave it
    header: GGUFHeader
    spec: ModelSpec
    plan: TensorPlan
    check: LlamaCppResult | None  # with hardware: the check of this file there
