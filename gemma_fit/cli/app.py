"""The `gemma-fit` command line. Rendering and argument handling only; the rules live elsewhere."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gemma_fit import __version__
from gemma_fit.base.errors import EXIT_BAD_INPUT, EXIT_NO_GO, EXIT_OFFLOAD, EXIT_OK, BadInput, GemmaFitError
from gemma_fit.base.units import fmt_bytes
from gemma_fit.cli.hardware import db_app, list_gpus, probe_command
from gemma_fit.cli.report import report_command, write_check_html
from gemma_fit.engines.llamacpp import check_json, run_check
from gemma_fit.gguf.layout import estimated_file_bytes
from gemma_fit.gguf.tensors import TensorPlan, build_plan
from gemma_fit.gguf.types import CONTRACT_QUANTS, file_type
from gemma_fit.hardware.select import Hardware, select_hardware, with_backend
from gemma_fit.memory.settings import MAX_CTX, RunSettings, is_llama_cpp, parse_n_gpu_layers
from gemma_fit.model.catalog import ResolvedModel, entry_spec, load_model_db, resolve_model
from gemma_fit.model.spec import GENERATION_ORDER

if TYPE_CHECKING:
    from rich.console import Console

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Will a Gemma model run on this hardware under llama.cpp? Memory, context and speed.",
)
list_app = typer.Typer(no_args_is_help=True, help="What the databases hold.")
app.add_typer(list_app, name="list")
app.command("probe", help="What this machine has: GPUs (NVML), RAM, CPU, disks.")(probe_command)
app.add_typer(db_app, name="db")
app.command("report", help="The verdict over several GPUs, models, quants and contexts.")(report_command)
list_app.command("gpus", help="Every GPU in the hardware database.")(list_gpus)

EXIT_BY_VERDICT = {"go": EXIT_OK, "tight": EXIT_OK, "offload": EXIT_OFFLOAD, "no-go": EXIT_NO_GO}

_state: dict[str, tuple[Path, ...]] = {"model_db": (), "hardware_db": ()}

ModelOpt = Annotated[str, typer.Option("--model", "-m", help="Model id, alias (9b, e4b) or config.json path.")]
QuantOpt = Annotated[str, typer.Option("--quant", "-q", help="llama.cpp file type, e.g. Q4_K_M.")]


def _out() -> Console:
    from gemma_fit.present.terminal import console  # rich only when something is drawn: --json never imports it

    return console()


def _resolve(model: str) -> ResolvedModel:
    return resolve_model(model, _state["model_db"])


def _print_version(value: bool) -> None:
    """Eager, so that `gemma-fit --version` needs no command (as pip and llama.cpp answer it)."""
    if value:
        print(f"gemma-fit {__version__}")
        raise typer.Exit(0)


@app.callback()
def _global(
    model_db: Annotated[
        list[Path] | None, typer.Option("--model-db", help="Extra model database folder.")
    ] = None,
    hardware_db: Annotated[
        list[Path] | None, typer.Option("--hardware-db", help="Extra hardware database folder.")
    ] = None,
    version: Annotated[bool, typer.Option("--version", is_eager=True, callback=_print_version,
                                          help="Print the version and exit.")] = False,
) -> None:
    _state["model_db"] = tuple(model_db or ())
    _state["hardware_db"] = tuple(hardware_db or ())


def model_block(resolved: ResolvedModel, quant: str) -> dict[str, object]:
    plan = build_plan(resolved.spec, quant)
    return {
        "id": resolved.spec.id,
        "quant": plan.ftype.name,
        "arch": resolved.spec.arch,
        "n_params": plan.n_params,
        "file_size_bytes": estimated_file_bytes(plan),
    }


GpuOpt = Annotated[list[str] | None, typer.Option("--gpu", "-g", help="GPU id (repeat for several), 'local' or 'cpu'.")]
HardwareOpt = Annotated[Path | None, typer.Option("--hardware", help="Machine file (YAML): GPUs, RAM, disk.")]


CtxOpt = Annotated[int, typer.Option("--ctx", "-c", help="Context size; 0 = the model's trained context.")]
UbatchOpt = Annotated[int, typer.Option("--ubatch", "-ub", help="Physical batch (n_ubatch).")]
BatchOpt = Annotated[int, typer.Option("--batch", "-b", help="Logical batch (n_batch).")]
ParallelOpt = Annotated[int, typer.Option("--parallel", "-np", help="Parallel sequences (slots).")]
FlashOpt = Annotated[str, typer.Option("--flash-attn", "-fa", help="auto, on or off.")]
CtkOpt = Annotated[str, typer.Option("--cache-type-k", "-ctk", help="K cache type (f16, q8_0, ...).")]
CtvOpt = Annotated[str, typer.Option("--cache-type-v", "-ctv", help="V cache type (f16, q8_0, ...).")]
NglOpt = Annotated[str, typer.Option("--n-gpu-layers", "-ngl", help="Number or 'auto'.")]
SwaOpt = Annotated[bool, typer.Option("--swa-full", help="Full-size sliding-window cache.")]
UnifiedOpt = Annotated[bool, typer.Option("--kv-unified", help="One KV pool shared by all sequences.")]
PromptOpt = Annotated[int, typer.Option("--prompt-tokens", help="Prompt length for speed and TTFT.")]
MmprojOpt = Annotated[Path | None, typer.Option("--mmproj", help="Multimodal projector GGUF loaded beside it.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="One JSON object on stdout.")]
HtmlOpt = Annotated[Path | None, typer.Option("--html", help="Write a self-contained HTML report here.")]


def _settings(ctx: int, batch: int, ubatch: int, parallel: int, kv_unified: bool, flash_attn: str, ctk: str,
              ctv: str, ngl: str, swa_full: bool, mmproj: Path | None) -> RunSettings:
    mmproj_bytes = 0
    if mmproj is not None:
        from gemma_fit.gguf.from_file import is_mmproj
        from gemma_fit.gguf.from_file import mmproj_bytes as projector_bytes
        from gemma_fit.gguf.reader import read_gguf_header

        header = read_gguf_header(mmproj)
        if not is_mmproj(header):
            raise BadInput(f"{mmproj}: not a multimodal projector (general.architecture is not 'clip')")
        mmproj_bytes = projector_bytes(header)
    return RunSettings(
        n_ctx=ctx, n_batch=batch, n_ubatch=ubatch, n_parallel=parallel, kv_unified=kv_unified,
        flash_attn=flash_attn.lower(), cache_type_k=ctk, cache_type_v=ctv,  # type: ignore[arg-type]
        n_gpu_layers=parse_n_gpu_layers(ngl), swa_full=swa_full, mmproj_bytes=mmproj_bytes,
    )


def _run_and_print(resolved: ResolvedModel, plan: TensorPlan, settings: RunSettings, hw: Hardware,
                   prompt_tokens: int, as_json: bool, html: Path | None,
                   extra: dict[str, object] | None = None, gguf_path: Path | None = None) -> None:
    if not 1 <= prompt_tokens <= MAX_CTX:
        raise BadInput(f"--prompt-tokens {prompt_tokens} is impossible (must be between 1 and {MAX_CTX:,})")
    quant = plan.ftype.name
    result = run_check(resolved, quant, settings, hw, prompt_tokens=prompt_tokens, plan=plan, gguf_path=gguf_path)
    if result.speed_error:
        print(f"gemma-fit: speed not predicted: {result.speed_error}", file=sys.stderr)
    doc = {**check_json(result), **(extra or {})}
    if html is not None:
        write_check_html(doc, resolved, quant, settings, html, hardware=hw)
    if as_json:
        print(json.dumps(doc, indent=2))
    else:
        from gemma_fit.present.terminal import render_check

        render_check(_out(), doc)
    raise typer.Exit(EXIT_BY_VERDICT[result.verdict.verdict])


EngineOpt = Annotated[str, typer.Option("--engine", help="llama.cpp, ollama, vllm or transformers.")]
BackendOpt = Annotated[str | None, typer.Option(
    "--backend", help="llama.cpp backend when not the GPU's own: vulkan (NVIDIA, AMD, Intel), sycl, rocm, cuda.")]


@app.command()
def check(
    model: Annotated[str | None, typer.Option("--model", "-m", help="Model id, alias or config.json.")] = None,
    gpu: GpuOpt = None,
    quant: Annotated[str | None, typer.Option("--quant", "-q", help="File type (Q4_K_M) or, for vLLM and "
                                              "transformers, bf16/fp16/fp8/awq/gptq/nvfp4/bnb-8bit/bnb-4bit.")] = None,
    gguf: Annotated[Path | None, typer.Option("--gguf", help="Estimate from a real GGUF file's header.")] = None,
    ctx: CtxOpt = 4096,
    ubatch: UbatchOpt = 512,
    batch: BatchOpt = 2048,
    parallel: ParallelOpt = 1,
    flash_attn: FlashOpt = "auto",
    cache_type_k: CtkOpt = "f16",
    cache_type_v: CtvOpt = "f16",
    n_gpu_layers: NglOpt = "auto",
    swa_full: SwaOpt = False,
    kv_unified: UnifiedOpt = False,
    hardware: HardwareOpt = None,
    mmproj: MmprojOpt = None,
    prompt_tokens: PromptOpt = 512,
    as_json: JsonOpt = False,
    html: HtmlOpt = None,
    engine: EngineOpt = "llama.cpp",
    gpu_memory_utilization: Annotated[float | None, typer.Option("--gpu-memory-utilization", help="vLLM.")] = None,
    max_num_batched_tokens: Annotated[int | None, typer.Option("--max-num-batched-tokens", help="vLLM.")] = None,
    tensor_parallel_size: Annotated[int | None, typer.Option("--tensor-parallel-size", help="vLLM.")] = None,
    enforce_eager: Annotated[bool, typer.Option("--enforce-eager", help="vLLM: no CUDA graphs.")] = False,
    kv_cache_dtype: Annotated[str | None, typer.Option("--kv-cache-dtype", help="vLLM KV dtype.")] = None,
    batch_size: Annotated[int | None, typer.Option("--batch-size", help="transformers generate batch.")] = None,
    max_new_tokens: Annotated[int | None, typer.Option("--max-new-tokens", help="transformers.")] = None,
    cache_implementation: Annotated[str | None, typer.Option("--cache-implementation",
                                                             help="transformers: dynamic or static.")] = None,
    images: Annotated[int | None, typer.Option("--images", help="Images per prompt (multimodal).")] = None,
    backend: BackendOpt = None,
) -> None:
    """The go/no-go answer for one model, quant, context and hardware."""
    if (model is None) == (gguf is None):
        raise BadInput("give --model ID (with --quant) or --gguf FILE")
    hw = with_backend(select_hardware(gpu or [], hardware, _state["hardware_db"]), backend)
    settings = _settings(ctx, batch, ubatch, parallel, kv_unified, flash_attn, cache_type_k, cache_type_v,
                         n_gpu_layers, swa_full, mmproj if engine == "llama.cpp" else None)
    if not is_llama_cpp(engine):
        from gemma_fit.jobs.check import run_engine_check

        if gguf is not None:
            raise BadInput("--gguf works with --engine llama.cpp (or ollama via --model)")
        doc = run_engine_check(
            engine, _resolve(model or ""), quant, settings, hw, mmproj=mmproj is not None,
            gpu_memory_utilization=gpu_memory_utilization, max_num_batched_tokens=max_num_batched_tokens,
            tensor_parallel_size=tensor_parallel_size, enforce_eager=enforce_eager or None,
            kv_cache_dtype=kv_cache_dtype, batch_size=batch_size, prompt_tokens=prompt_tokens,
            max_new_tokens=max_new_tokens, cache_implementation=cache_implementation, images_per_prompt=images)
        if as_json:
            print(json.dumps(doc, indent=2))
        else:
            from gemma_fit.present.terminal import render_engine

            render_engine(_out(), doc)
        raise typer.Exit(EXIT_BY_VERDICT[doc["verdict"]])
    if gguf is not None:
        resolved, plan = _gguf_model(gguf)
    else:
        resolved = _resolve(model or "")
        plan = build_plan(resolved.spec, quant or "Q4_K_M")
    _run_and_print(resolved, plan, settings, hw, prompt_tokens, as_json, html, gguf_path=gguf)


@app.command()
def inspect(
    file: Annotated[Path, typer.Argument(help="A GGUF file (the first shard of a split model).")],
    gpu: GpuOpt = None,
    hardware: HardwareOpt = None,
    ctx: CtxOpt = 4096,
    ubatch: UbatchOpt = 512,
    batch: BatchOpt = 2048,
    parallel: ParallelOpt = 1,
    flash_attn: FlashOpt = "auto",
    cache_type_k: CtkOpt = "f16",
    cache_type_v: CtvOpt = "f16",
    n_gpu_layers: NglOpt = "auto",
    swa_full: SwaOpt = False,
    kv_unified: UnifiedOpt = False,
    mmproj: MmprojOpt = None,
    prompt_tokens: PromptOpt = 512,
    as_json: JsonOpt = False,
    html: HtmlOpt = None,
    backend: BackendOpt = None,
) -> None:
    """What a GGUF holds (header only) and, with --gpu or --hardware, what it needs there."""
    from gemma_fit.gguf.from_file import model_from_gguf

    header, spec, plan = model_from_gguf(file)
    info = {"schema": "gemma-fit.inspect/1", "file": str(file), "arch": spec.arch, "n_params": plan.n_params,
            "file_size_bytes": header.file_bytes, "tensor_types": plan.type_counts(), "n_ctx_train": spec.n_ctx_train,
            "n_layers": spec.n_layer, "n_tensors": len(plan.tensors), "file_type": plan.ftype.name,
            "shards": len(header.shards), "name": spec.name}
    if not gpu and hardware is None:
        if as_json:
            print(json.dumps(info, indent=2))
        else:
            from gemma_fit.present.terminal import render_inspect

            render_inspect(_out(), info)
        return
    hw = with_backend(select_hardware(gpu or [], hardware, _state["hardware_db"]), backend)
    settings = _settings(ctx, batch, ubatch, parallel, kv_unified, flash_attn, cache_type_k, cache_type_v,
                         n_gpu_layers, swa_full, mmproj)
    resolved = ResolvedModel(spec, None, f"from {file}")
    _run_and_print(resolved, plan, settings, hw, prompt_tokens, as_json, html, extra=info, gguf_path=file)


@app.command()
def synth(
    out: Annotated[Path, typer.Argument(help="Output .gguf path.")],
    model: ModelOpt,
    quant: QuantOpt = "Q4_K_M",
) -> None:
    """Write a zero-weight GGUF of the model's exact layout (sparse: no disk space, no download)."""
    from gemma_fit.gguf.writer import write_synthetic_gguf  # imports gguf and numpy: only when writing

    resolved = _resolve(model)
    plan = build_plan(resolved.spec, quant)
    size = write_synthetic_gguf(plan, out)
    print(f"wrote {out}: {resolved.spec.id} {plan.ftype.name}, {len(plan.tensors)} tensors, "
          f"{fmt_bytes(size)} apparent size (sparse)", file=sys.stderr)


@app.command()
def smoke(
    gguf: Annotated[Path | None, typer.Option("--gguf", help="A real GGUF file to run.")] = None,
    model: Annotated[str | None, typer.Option("--model", "-m", help="Model for a --synthetic run.")] = None,
    quant: QuantOpt = "Q4_K_M",
    synthetic: Annotated[bool, typer.Option("--synthetic", help="Run a zero-weight file of the layout.")] = False,
    gpu: GpuOpt = None,
    ctx: Annotated[int, typer.Option("--ctx", "-c")] = 4096,
    ubatch: Annotated[int, typer.Option("--ubatch", "-ub")] = 512,
    batch: Annotated[int, typer.Option("--batch", "-b")] = 2048,
    parallel: Annotated[int, typer.Option("--parallel", "-np")] = 1,
    flash_attn: Annotated[str, typer.Option("--flash-attn", "-fa")] = "auto",
    cache_type_k: Annotated[str, typer.Option("--cache-type-k", "-ctk")] = "f16",
    cache_type_v: Annotated[str, typer.Option("--cache-type-v", "-ctv")] = "f16",
    n_gpu_layers: Annotated[str, typer.Option("--n-gpu-layers", "-ngl")] = "auto",
    swa_full: Annotated[bool, typer.Option("--swa-full")] = False,
    prompt_tokens: Annotated[int, typer.Option("--prompt-tokens", help="Prompt length (up to the context - 4).")] = 128,
    n_predict: Annotated[int, typer.Option("--n-predict", "-n", help="Tokens to generate (at least 1).")] = 16,
    threads: Annotated[int, typer.Option("--threads", "-t", help="CPU threads, 1 to 512.")] = max(
        1, min(512, os.cpu_count() or 2)),
    llama_bin: Annotated[Path | None, typer.Option(
        "--llama-bin", help="Folder with llama.cpp binaries (default: the build of scripts/build_llamacpp.py in "
                            "$GEMMA_FIT_CACHE or ~/.cache/gemma-fit, else PATH).")] = None,
    timeout: Annotated[float, typer.Option(
        "--timeout", help="Seconds before llama.cpp and all it started are ended.")] = 600,
    record: Annotated[bool, typer.Option("--record", help="Append the comparison to benchmarks/data.")] = False,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Run llama.cpp and set measured memory and speed beside the estimate."""
    from gemma_fit.jobs import smoke as sm
    if (gguf is None) == (not synthetic):
        raise BadInput("give --gguf FILE, or --model ID --synthetic")
    if synthetic and not model:
        raise BadInput("--synthetic needs --model")
    sm.check_run_numbers(threads=threads, prompt_tokens=prompt_tokens, n_predict=n_predict, timeout=timeout)
    hw = select_hardware(gpu or ["cpu"], None, _state["hardware_db"])
    settings = RunSettings(
        n_ctx=ctx, n_batch=batch, n_ubatch=ubatch, n_parallel=parallel, flash_attn=flash_attn.lower(),  # type: ignore[arg-type]
        cache_type_k=cache_type_k, cache_type_v=cache_type_v, n_gpu_layers=parse_n_gpu_layers(n_gpu_layers),
        swa_full=swa_full, n_outputs_max=batch,  # llama-completion reserves logits for every ubatch token
    )
    source: contextlib.AbstractContextManager[Path]
    if gguf is not None:
        resolved, plan = _gguf_model(gguf)
        source = contextlib.nullcontext(gguf)
    else:
        resolved = _resolve(model or "")
        plan = build_plan(resolved.spec, quant)
        source = sm.synthetic_file(plan)
    result = run_check(resolved, plan.ftype.name, settings, hw, prompt_tokens=prompt_tokens, plan=plan)  # validates
    sm.check_prompt_fits(prompt_tokens, result.settings.ctx_per_stream(resolved.spec))
    exe = sm.find_llama_bin(llama_bin)
    est = check_json(result)
    with source as path:
        args = sm.llama_args(exe, Path(path), result.verdict.estimate.n_ctx, result.settings,
                             result.verdict.n_gpu_layers, prompt_tokens, n_predict, threads, not hw.gpus)
        measured = sm.run_llama(args, timeout)
    mem = sm.measured_memory(measured, len(hw.gpus))
    doc = {"schema": "gemma-fit.smoke/1", "model": est["model"], "settings": est["settings"],
           "estimate": est["memory"],
           "measured": {**mem, "decode_tokens_per_s": measured.decode_tokens_per_s,
                        "prefill_tokens_per_s": measured.prefill_tokens_per_s},
           "estimated_speed": est["performance"], "error_pct": sm.error_pct(est["memory"], mem),
           "llama_cpp_command": sm.shown_command(args, prompt_tokens), "llama_cpp_bin": str(exe.parent)}
    if record:
        _record_smoke(doc)
    if as_json:
        print(json.dumps(doc, indent=2))
    else:
        from gemma_fit.present.terminal import render_smoke

        render_smoke(_out(), doc)


def _record_smoke(doc: dict[str, object]) -> None:
    """Append to the repo's calibration store (GEMMA_FIT_SMOKE_RECORDS overrides the file)."""
    default = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "smoke_records.jsonl"
    path = Path(os.environ.get("GEMMA_FIT_SMOKE_RECORDS") or default)
    if not path.parent.is_dir():
        raise BadInput(f"--record needs a source checkout (no {path.parent})")
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(doc, sort_keys=True) + "\n")


def _gguf_model(path: Path) -> tuple[ResolvedModel, TensorPlan]:
    from gemma_fit.gguf.from_file import model_from_gguf

    _, spec, plan = model_from_gguf(path)
    return ResolvedModel(spec, None, f"from {path}"), plan


@list_app.command("models")
def list_models(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Every model in the database."""
    entries = sorted(load_model_db(_state["model_db"]).values(),
                     key=lambda e: (GENERATION_ORDER[e.generation], entry_spec(e).n_embd))
    rows = []
    for e in entries:
        spec = entry_spec(e)
        rows.append({"id": e.id, "name": e.name, "arch": e.arch, "n_layers": spec.n_layer,
                     "n_ctx_train": spec.n_ctx_train, "license": e.license,
                     "n_params": build_plan(spec, "BF16").n_params})
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    from rich.table import Column, Table

    width = max(len(str(r["id"])) for r in rows)
    table = Table(Column("id", no_wrap=True, min_width=width), Column("name", overflow="fold"), "arch", "layers",
                  "context", "params (text)", Column("licence", overflow="fold"))
    for r in rows:
        table.add_row(str(r["id"]), str(r["name"]), str(r["arch"]), str(r["n_layers"]),
                      f"{r['n_ctx_train']:,}", f"{float(str(r['n_params'])) / 1e9:.2f} B", str(r["license"]))
    _out().print(table)


@list_app.command("quants")
def list_quants(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """The llama.cpp file types gemma-fit knows, with their base tensor type."""
    rows = []
    for name in CONTRACT_QUANTS:
        ft = file_type(name)
        bits = ft.default_type.bytes * 8 / ft.default_type.block
        rows.append({"quant": name, "ftype_id": ft.id, "base_type": ft.default_type.name,
                     "base_bits_per_weight": round(bits, 4)})
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    from rich.table import Table

    table = Table("quant", "llama_ftype", "base tensor type", "bits/weight (base)")
    for r in rows:
        table.add_row(str(r["quant"]), str(r["ftype_id"]), str(r["base_type"]), f"{r['base_bits_per_weight']:.4g}")
    _out().print(table)


def _fail(message: str, code: int) -> None:
    """The one line a failure prints: control bytes escaped, so user input cannot drive the terminal."""
    from gemma_fit.base.text import printable

    print(f"gemma-fit: error: {printable(message, limit=2000)}", file=sys.stderr)
    sys.exit(code)


def main() -> None:
    """Entry point: one-line errors and contract exit statuses, never a traceback."""
    import signal

    # `gemma-fit ... | head`: die of SIGPIPE (status 141 in the shell) like cat and grep, instead of
    # click's "exit 1" or Python's BrokenPipeError at the first write after head has gone.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    try:
        rc = app(standalone_mode=False, prog_name="gemma-fit")  # returns typer.Exit's code, not raising it
        if isinstance(rc, int) and rc:
            sys.exit(rc)
    except GemmaFitError as exc:
        _fail(str(exc), exc.exit_code)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        print("gemma-fit: aborted", file=sys.stderr)
        sys.exit(130)
    except Exception as exc:  # usage errors and anything unexpected: one line, no traceback
        format_message = getattr(exc, "format_message", None)
        if format_message is not None:  # typer/click usage errors (unknown option, bad value)
            message = format_message()
            if not message:  # no command given: click printed the help, there is nothing more to say
                sys.exit(EXIT_BAD_INPUT)
            _fail(message, EXIT_BAD_INPUT)
        print(f"gemma-fit: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(1)
