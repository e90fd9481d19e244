"""Speculative decoding on llama.cpp: the drafter's memory beside the target's, the speed it buys, the command.

Two drafters (llama-server -md FILE --spec-type ...):
- `--draft MODEL[:QUANT]` (draft-simple): a smaller model of the same family and tokenizer (Gemma 3 270M or 1B for
  Gemma 3 12B / 27B, Gemma 2 2B for Gemma 2 9B / 27B). llama.cpp builds its context from the target's parameters
  (common_base_params_to_speculative: the same -c, -np, -b, -ub and flash attention; its own KV types, f16 unless
  -ctkd/-ctvd; logits for one output per sequence), so its memory is the estimate of that model under those
  settings, kept on the main GPU here (-devd names it where there are several).
- `--mtp` (draft-mtp): Gemma 4's own assistant drafter (model_db/llamacpp/drafters.yaml). Its layers attend to the
  target's KV cache (llama_model::create_memory for gemma4-assistant: each layer shares the target's last sliding-
  window or full layer), so it adds its weights and a compute buffer, no KV cache.
The acceptance rate is the published one for the pair (model_db/llamacpp/speculative.yaml, each with its source),
or the user's --acceptance.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache
from typing import Any

from gemma_fit.base.errors import BadInput
from gemma_fit.base.record import record
from gemma_fit.db.rules import read_packaged_yaml
from gemma_fit.engines.mtp import drafter_by_id
from gemma_fit.gguf.tensors import build_plan
from gemma_fit.hardware.spec import Hardware
from gemma_fit.memory.estimate import estimate_memory
from gemma_fit.memory.fit import LLAMA_DRAFT_MAX
from gemma_fit.memory.settings import RunSettings, Speculative, pad_to
from gemma_fit.model.catalog import ResolvedModel, library_tag, resolve_model

MAX_DRAFT = 64
VERIFY_REREAD = 0.0
# llama.cpp's host work per drafted token beyond the drafter's own pass (sampling, handing the target's hidden state
# over, scheduling two contexts): benchmarks/fit_speculative.py over 8 published runs (RTX 5070, Strix Halo, RTX PRO
# 6000): median error 7%, leaving each run out 10%; the RTX PRO 6000 run alone sets it (without it the fit is 0)
DRAFT_STEP_OVERHEAD_S = 3.95e-3
VOCAB_MAX_SIZE_DIFFERENCE = 128  # common/speculative.cpp SPEC_VOCAB_MAX_SIZE_DIFFERENCE (Gemma 3 27B has 64 more)


@cache
def acceptance_table() -> list[dict[str, Any]]:
    """model_db/llamacpp/speculative.yaml: published acceptance per target and drafter, with sources."""
    return list(read_packaged_yaml("llamacpp/speculative.yaml")["acceptance"])


def per_draft_probability(accepted_share: float, draft_max: int) -> float:
    """The per-draft acceptance p whose expected accepted / drafted at k drafts per step is the published share:
    p (1 - p^k) / ((1 - p) k) = share, solved by bisection (the left side grows with p)."""
    if draft_max <= 1:
        return accepted_share
    lo, hi = 0.0, 0.9999
    for _ in range(60):
        p = (lo + hi) / 2
        share = p * (1 - p ** draft_max) / ((1 - p) * draft_max)
        lo, hi = (p, hi) if share < accepted_share else (lo, p)
    return (lo + hi) / 2


def _median_p(rows: list[dict[str, Any]]) -> float:
    values = sorted(per_draft_probability(float(r["accepted_share"]), int(r["draft_max"])) for r in rows)
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def published_acceptance(target: str, method: str, drafter: str, generation: str | None = None
                         ) -> tuple[float, str] | None:
    """The per-draft acceptance of the published runs of this pair (median); where there are none, the median of
    the method's runs on the family's other targets, said so. None without any."""
    rows = [r for r in acceptance_table() if r["target"] == target and r["drafter"] == drafter]
    if rows:
        return _median_p(rows), f"median of {len(rows)} published run{'s' if len(rows) > 1 else ''}: " + \
            "; ".join(sorted({str(r["source"]) for r in rows}))
    same = [r for r in acceptance_table() if r["method"] == method
            and (generation is None or str(r["target"]).startswith(f"gemma-{generation}-"))]
    if not same:
        return None
    return _median_p(same), (f"no published run of {drafter} with {target}: the median of {len(same)} {method} runs "
                             f"on other Gemma {generation or ''} targets")


BOTH_ASKED = "give --mtp (the model's own drafter) or --draft MODEL, not both"
NO_DRAFT_MODEL = "--draft needs a model id (e.g. gemma-3-270m or gemma-3-270m:Q8_0)"
NUMBERS_ALONE = "--draft-max and --acceptance go with --mtp or --draft MODEL"


def _parse_draft(text: str) -> tuple[str, str | None]:
    """--draft MODEL[:QUANT], or an Ollama library tag (gemma3:270m, gemma3:270m-it-q8_0) as its model and quant."""
    tag = library_tag(text)
    if tag is not None:
        return tag
    name, _, quant = text.partition(":")
    if not name.strip():
        raise BadInput(NO_DRAFT_MODEL)
    return name.strip(), quant.strip() or None


def _check_numbers(draft_max: int | None, acceptance: float | None) -> None:
    if draft_max is not None and not 1 <= draft_max <= MAX_DRAFT:
        raise BadInput(f"--draft-max {draft_max} is out of range (1 to {MAX_DRAFT})")
    if acceptance is not None and not 0.0 <= acceptance < 1.0:
        raise BadInput(f"--acceptance {acceptance} is not a probability below 1 (the share of drafted tokens the "
                       "target keeps, e.g. 0.7)")


def resolve_speculative(target: ResolvedModel, *, mtp: bool, draft: str | None, draft_max: int | None,
                        acceptance: float | None, model_dirs: tuple[Any, ...] = ()) -> Speculative | None:
    """--mtp / --draft as a Speculative (None without either); BadInput for a drafter llama.cpp would refuse."""
    if not mtp and draft is None:
        if draft_max is not None or acceptance is not None:
            raise BadInput(NUMBERS_ALONE)
        return None
    if mtp and draft is not None:
        raise BadInput(BOTH_ASKED)
    _check_numbers(draft_max, acceptance)
    if mtp:
        from gemma_fit.engines.mtp import drafter_for

        d = drafter_for(target.spec.id)
        method, draft_id, quant, file = "mtp", d.id, d.quant, d.file
    else:
        name, quant_given = _parse_draft(draft or "")
        resolved = resolve_model(name, model_dirs)
        _check_pair(target, resolved)
        method, draft_id = "draft", resolved.spec.id
        quant = build_plan(resolved.spec, quant_given or "Q8_0").ftype.name
        file = f"{draft_id}-{quant}.gguf"
    if acceptance is not None:
        p, source = acceptance, "given (--acceptance)"
    else:
        found = published_acceptance(target.spec.id, method, draft_id, _generation(target))
        if found is None:
            raise BadInput(f"no published acceptance rate for {draft_id} drafting {target.spec.id}; give "
                           "--acceptance P (the share of drafted tokens the target keeps, e.g. 0.6)")
        p, source = found
    return Speculative(method, draft_id, quant, draft_max, p, source, file)


_ARCH_GENERATION = {"gemma": "1", "gemma2": "2", "gemma3": "3", "gemma3n": "3n", "gemma4": "4"}  # a family's tokenizer


def _generation(r: ResolvedModel) -> str | None:
    """The Gemma generation: the database entry's, else the architecture's (a GGUF or config.json of the family)."""
    entry = r.entry
    return str(entry.generation) if entry is not None else _ARCH_GENERATION.get(r.spec.arch)


def _check_pair(target: ResolvedModel, draft: ResolvedModel) -> None:
    """llama.cpp refuses a draft whose vocabulary differs from the target's (common_speculative_are_compatible:
    type, size within 128, the same special tokens and texts); gemma-fit knows a family shares its tokenizer."""
    if draft.spec.id == target.spec.id:
        raise BadInput(f"--draft {draft.spec.id} is the target itself; a drafter is a smaller model of its family")
    if abs(draft.spec.n_vocab - target.spec.n_vocab) > VOCAB_MAX_SIZE_DIFFERENCE:
        raise BadInput(f"--draft {draft.spec.id} cannot draft for {target.spec.id}: llama.cpp needs the same "
                       f"vocabulary ({draft.spec.n_vocab:,} tokens against {target.spec.n_vocab:,})")
    if _generation(draft) != _generation(target):
        def family(r: ResolvedModel) -> str:
            return f"Gemma {_generation(r)}'s" if _generation(r) else f"{r.spec.id}'s (not a database model)"

        raise BadInput(f"--draft {draft.spec.id} cannot draft for {target.spec.id}: llama.cpp needs the same "
                       f"tokenizer, and {family(draft)} is not {family(target)} (the same special tokens and texts, "
                       "whatever the sizes)")
    if draft.spec.n_layer >= target.spec.n_layer and draft.spec.n_embd >= target.spec.n_embd:
        raise BadInput(f"--draft {draft.spec.id} is not smaller than {target.spec.id}: it would slow decoding down")


@record
class DraftMemory:
    weights_bytes: int
    kv_cache_bytes: int
    compute_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.kv_cache_bytes + self.compute_bytes


def draft_settings(target: RunSettings) -> RunSettings:
    """The draft context's settings: the target's, with f16 KV (no -ctkd/-ctvd), logits of one output per
    sequence, all its layers on the GPU, nothing else loaded beside it."""
    return replace(target, cache_type_k="f16", cache_type_v="f16", n_outputs_max=max(1, target.n_parallel),
                   n_gpu_layers=None, override_tensor=(), cpu_moe=False, n_cpu_moe=0, mmproj_bytes=0, mmproj_path="",
                   images=0, image_tokens=0, draft_bytes=0, speculative=None)


def draft_memory(spec: Speculative, settings: RunSettings, hardware: Hardware, model_dirs: tuple[Any, ...] = ()
                 ) -> DraftMemory:
    """What the drafter takes on the main GPU (or in RAM without one)."""
    if spec.method == "mtp":

        d = drafter_by_id(spec.draft_model)
        return DraftMemory(d.weights_bytes, 0, d.compute_bytes(settings, pad_to(settings.n_ctx or 4096, 256)))
    resolved = resolve_model(spec.draft_model, model_dirs)
    plan = build_plan(resolved.spec, spec.draft_quant)
    gpus = hardware.gpus[:1]
    est = estimate_memory(plan, draft_settings(settings), gpus, resolved.spec.n_layer + 1 if gpus else 0,
                          hardware.host_capacity_bytes)
    if gpus:
        dev = est.devices[0]
        return DraftMemory(dev.weights_bytes, dev.kv_cache_bytes, dev.compute_bytes)
    h = est.host
    return DraftMemory(h.weights_bytes, h.kv_cache_bytes, h.compute_bytes)


def with_drafter(settings: RunSettings, spec: Speculative | None, hardware: Hardware,
                 model_dirs: tuple[Any, ...] = (), target: Any = None) -> RunSettings:
    """The settings with the drafter's bytes on the main GPU (or the host), for the fit to count. The draft context
    takes the target's context (common/speculative.cpp: n_ctx = llama_n_ctx(ctx_tgt)); the target's server keeps
    logits for each slot's drafts and its own token (server-context.cpp: n_parallel x (1 + n_max), at most -b)."""
    if spec is None:
        return settings
    if settings.n_ctx == 0 and target is not None:
        settings = replace(settings, n_ctx=settings.resolved_ctx(target))
    mem = draft_memory(spec, settings, hardware, model_dirs)
    k = spec.draft_max or LLAMA_DRAFT_MAX
    outputs = min(settings.n_batch, max(1, settings.n_parallel) * (1 + k))
    return replace(settings, speculative=spec, draft_bytes=mem.total_bytes, n_outputs_max=outputs)


def drafter_pipeline(spec: Speculative, settings: RunSettings, hardware: Hardware, position: int,
                     model_dirs: tuple[Any, ...] = ()) -> Any:
    """The drafter's own decode step, on the main GPU (or the CPU), from the same model as the target's."""
    from gemma_fit.speed.serve_llamacpp import llamacpp_pipeline

    main = replace(hardware, gpus=hardware.gpus[:1],
                   attachments=hardware.attachments[:1] if hardware.attachments else None)
    if spec.method == "mtp":
        from gemma_fit.engines.mtp import mtp_pipeline

        return mtp_pipeline(drafter_by_id(spec.draft_model), main)
    resolved = resolve_model(spec.draft_model, model_dirs)
    plan = build_plan(resolved.spec, spec.draft_quant)
    s = draft_settings(settings)
    est = estimate_memory(plan, s, main.gpus, resolved.spec.n_layer + 1 if main.gpus else 0,
                          hardware.host_capacity_bytes)
    return llamacpp_pipeline(plan, est, main, max(1, min(position, est.n_ctx)))


def speculative_figures(spec: Speculative, target_pipe: Any, draft_pipe: Any, n_parallel: int,
                        concurrencies: tuple[int, ...], overhead_s: float | None = None) -> dict[str, Any]:
    """performance.speculative: the drafts per step (given, else the best at one sequence), tokens per step, speed-up
    at the plan's concurrency, and how the gain changes as requests are batched."""
    from gemma_fit.speed.speculative import best_draft_max, speculative_step

    p = float(spec.acceptance or 0.0)
    k = spec.draft_max or LLAMA_DRAFT_MAX  # what the printed command runs (llama.cpp's default when not given)
    oh = DRAFT_STEP_OVERHEAD_S if overhead_s is None else overhead_s
    here = speculative_step(target_pipe, draft_pipe, max(1, n_parallel), k, p, oh)
    one = speculative_step(target_pipe, draft_pipe, 1, k, p, oh)
    scaling = [speculative_step(target_pipe, draft_pipe, b, k, p, oh) for b in concurrencies]
    return {"method": spec.method, "draft_model": spec.draft_model, "draft_quant": spec.draft_quant,
            "draft_max": k, "best_draft_max": best_draft_max(target_pipe, draft_pipe, max(1, n_parallel), p, oh),
            "acceptance_rate": round(p, 4), "acceptance_source": spec.acceptance_source,
            "tokens_per_step": round(here.tokens_per_step, 3), "speedup": round(here.speedup, 3),
            "single_stream_speedup": round(one.speedup, 3),
            "decode_tokens_per_s": round(one.per_user_tokens_per_s, 2),
            "draft_ms_per_step": round(here.draft_s * 1e3, 3), "verify_ms_per_step": round(here.verify_s * 1e3, 3),
            "scaling": [{"concurrency": s.batch, "speedup": round(s.speedup, 3),
                         "aggregate_tokens_per_s": round(s.aggregate_tokens_per_s, 1)} for s in scaling],
            "pays": here.speedup > 1.0}


def with_speculation(plan: Any, est: Any, hardware: Hardware, perf: Any, spec: Speculative, prompt_tokens: int,
                     output_tokens: int | None, model_dirs: tuple[Any, ...] = ()) -> Any:
    """The performance with the drafter: decode, time to first token and the serving figures include it."""
    from gemma_fit.speed.serve_llamacpp import llamacpp_pipeline
    from gemma_fit.speed.traffic import SCALING_POINTS

    position = max(1, min(prompt_tokens + (output_tokens or 0) // 2, est.n_ctx))
    # the k + 1 tokens of one sequence go through the matrix kernels as a small prompt chunk does: at the prefill's
    # matrix rate, without the weight re-reads many sequences' batched decode was measured to cost
    target = llamacpp_pipeline(plan, est, hardware, position, reread=VERIFY_REREAD)
    drafter = drafter_pipeline(spec, est.settings, hardware, position, model_dirs)
    n = max(1, est.settings.n_parallel)
    points = tuple(c for c in SCALING_POINTS if c <= n) or (1,)
    fig = speculative_figures(spec, target, drafter, n, points)
    return apply_figures(perf, spec, fig, n)


def apply_figures(perf: Any, spec: Speculative, fig: dict[str, Any], n: int) -> Any:
    """The performance with the drafter's figures: decode, time to first token and serving include them."""
    decode = fig["decode_tokens_per_s"] or perf.decode_tokens_per_s
    prefill_s = perf.ttft_s - 1.0 / perf.decode_tokens_per_s if perf.decode_tokens_per_s else perf.ttft_s
    gain = {row["concurrency"]: row["speedup"] for row in fig["scaling"]}
    serving = perf.serving
    if serving is not None:
        at_n = fig["speedup"]
        serving = replace(serving, aggregate_tokens_per_s=serving.aggregate_tokens_per_s * at_n,
                          per_user_tokens_per_s=serving.per_user_tokens_per_s * at_n,
                          scaling=tuple((c, agg * gain.get(c, at_n), user * gain.get(c, at_n))
                                        for c, agg, user in serving.scaling))
    note = (f"speculative decoding ({spec.method}, {spec.draft_model} {spec.draft_quant}, {fig['draft_max']} drafts "
            f"per step, acceptance {fig['acceptance_rate']:.2f}): {fig['tokens_per_step']:.2f} tokens per step, "
            f"x{fig['single_stream_speedup']:.2f} for one request, x{fig['speedup']:.2f} at {n}")
    if not fig["pays"]:
        note += ("; it does not pay here: the drafts and their verification take longer than the tokens they save "
                 "(drop --mtp/--draft" + (", or fewer requests at once)" if n > 1 and fig["single_stream_speedup"] > 1
                                          else ")"))
    elif fig["best_draft_max"] != fig["draft_max"]:
        note += f"; --draft-max {fig['best_draft_max']} would be faster here"
    return replace(perf, decode_tokens_per_s=decode, ttft_s=prefill_s + 1.0 / decode, serving=serving,
                   speculative=fig, notes=(*perf.notes, note))


def resolve_asked(target: ResolvedModel, asked: Speculative, model_dirs: tuple[Any, ...] = ()) -> Speculative | None:
    """The Speculative the command line built (method, the draft as typed) resolved for this target."""
    if asked.asked_both:
        raise BadInput(BOTH_ASKED)
    draft = None
    if asked.method == "draft" and asked.draft_model:
        draft = f"{asked.draft_model}:{asked.draft_quant}" if asked.draft_quant else asked.draft_model
    elif asked.method == "draft" and asked.draft_quant:
        raise BadInput(NO_DRAFT_MODEL)
    return resolve_speculative(target, mtp=asked.method == "mtp" and not asked.asked_both,
                               draft=draft if not (asked.method == "draft" and not asked.draft_model) else None,
                               draft_max=asked.draft_max, acceptance=asked.acceptance, model_dirs=model_dirs)


def check_ask(asked: Speculative | None, model_dirs: tuple[Any, ...] = ()) -> None:
    """What an ask is refused for whatever the target (recommend tries many, and takes a refusal there as "no
    drafter for this model"): both methods, --draft-max or --acceptance alone, numbers out of range, a draft model
    or quant the databases do not know."""
    if asked is None or asked.resolved:
        return
    if asked.asked_both:
        raise BadInput(BOTH_ASKED)
    if asked.method == "draft" and not asked.draft_model:
        raise BadInput(NO_DRAFT_MODEL if asked.draft_quant else NUMBERS_ALONE)
    _check_numbers(asked.draft_max, asked.acceptance)
    if asked.method == "draft":
        from gemma_fit.gguf.types import file_type

        name, quant = _parse_draft(f"{asked.draft_model}:{asked.draft_quant}" if asked.draft_quant
                                   else asked.draft_model)
        resolve_model(name, model_dirs)
        if quant:
            file_type(quant)


def check_drafting_engine(engine: str, asked: Speculative) -> None:
    """--mtp and --draft where the engine drafts: llama.cpp both, vLLM and Ollama Gemma 4's own MTP drafter."""
    if engine not in ("llama.cpp", "vllm", "ollama"):
        raise BadInput(f"--mtp / --draft are modelled for llama.cpp, vLLM and Ollama (--mtp); not for {engine}")
    if engine != "llama.cpp" and asked.method != "mtp":
        raise BadInput(f"--draft MODEL on --engine {engine} is not modelled; --mtp (Gemma 4's own drafter) is")


def with_model_drafter(target: ResolvedModel, settings: RunSettings, hardware: Hardware) -> RunSettings:
    """The settings with this model's drafter counted, the drafter as asked (--mtp / --draft) resolved for it: for
    answers over many models (recommend), where a model without a drafter for the ask is no candidate (BadInput)."""
    spec = settings.speculative
    if spec is None:
        return settings
    if not spec.resolved:
        spec = resolve_asked(target, spec, target.db_dirs)
    return with_drafter(settings, spec, hardware, target.db_dirs, target.spec)


OLLAMA_DRAFT_SINCE = (0, 30, 0)  # llama-server under Ollama (v0.30.0): DRAFT models reach it as --spec-type draft-mtp
OLLAMA_DRAFT_NUM_PREDICT = 4  # api/types.go: draft_num_predict's default for a separate draft model


def ollama_draft(spec: Speculative, engine_version: str) -> Speculative:
    """Ollama's drafter (a Modelfile `DRAFT path`, `PARAMETER draft_num_predict N`): since v0.30.0 Ollama runs
    llama-server and passes a draft as `--spec-type draft-mtp` (llm/llama_server.go), so only Gemma 4's own MTP
    drafter; before, DRAFT (v0.23.1) served only its MLX runner on macOS."""
    from gemma_fit.engines.versions import parse_version

    if spec.method != "mtp":
        raise BadInput("--draft MODEL on --engine ollama is not modelled: Ollama hands any DRAFT to llama-server as an "
                       "MTP drafter; --mtp (Gemma 4's own drafter) is")
    version = parse_version(engine_version.split()[-1]) if engine_version else None
    if version is not None and version < OLLAMA_DRAFT_SINCE:
        raise BadInput(f"--mtp needs Ollama 0.30.0 or later (llama-server runs the drafter); {engine_version} runs "
                       "DRAFT only with its MLX runner on macOS")
    return replace(spec, draft_max=spec.draft_max or OLLAMA_DRAFT_NUM_PREDICT)


def draft_command(command: str, spec: Speculative | None) -> str:
    """Ollama's command with the drafter: a Modelfile that adds DRAFT to the model, created and run."""
    if spec is None:
        return command
    serve, _, run = command.rpartition("; ")
    lines = f"DRAFT ./{spec.draft_file}\\nPARAMETER draft_num_predict {spec.draft_max}\\n"
    if "' > Modelfile" in run:  # the GGUF's own Modelfile import: the DRAFT lines join it
        return f"{serve}; " + run.replace("' > Modelfile", f"{lines}' > Modelfile", 1)
    base = run.split()[-1]
    name = f"{base.replace(':', '-').replace('/', '-')}-mtp"
    return (f"{serve}; printf 'FROM {base}\\n{lines}' > Modelfile.mtp && ollama create {name} -f Modelfile.mtp && "
            f"ollama run {name}")
