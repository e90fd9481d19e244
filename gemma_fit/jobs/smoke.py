"""`gemma-fit smoke`: run llama.cpp, measure memory and speed, set them beside the estimate.

Runs llama-completion (from --llama-bin, the build scripts/build_llamacpp.py caches, or PATH) with the settings
`check` would use, on a real GGUF or on a zero-weight file written by `synth` (speed and allocations do not
depend on weight values). Memory comes from llama.cpp's own buffer lines (model, KV, compute, output), the
process's peak RSS and, with an NVIDIA driver, its peak device memory (jobs/llama_run.py). Speed comes from
llama.cpp's own timing lines.
"""

from __future__ import annotations

import contextlib
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gemma_fit.base.errors import BadInput
from gemma_fit.base.ranges import check_range
from gemma_fit.base.record import record
from gemma_fit.base.text import printable
from gemma_fit.db.catalog import BUILTIN, Catalog
from gemma_fit.engines.llamacpp import LlamaCppResult, run_check
from gemma_fit.gguf.tensors import build_plan
from gemma_fit.hardware.select import select_hardware
from gemma_fit.jobs.inputs import gguf_model
from gemma_fit.jobs.llama_log import Measured
from gemma_fit.jobs.llama_run import check_timeout, find_llama_bin, run_llama
from gemma_fit.memory.settings import RunSettings
from gemma_fit.model.catalog import resolve_model
from gemma_fit.present.documents import check_json

MAX_THREADS = 512  # GGML_MAX_N_THREADS
MAX_PROMPT_TOKENS = 128 * 1024 - 1  # one byte per token in one argv string: Linux's MAX_ARG_STRLEN


@contextmanager
def synthetic_file(plan: Any) -> Iterator[Path]:
    """A zero-weight GGUF in a temporary folder, removed afterwards."""
    from gemma_fit.gguf.writer import write_synthetic_gguf

    with tempfile.TemporaryDirectory(prefix="gemma-fit-smoke-") as tmp:
        path = Path(tmp) / f"{plan.model.id}-{plan.ftype.name}.gguf"
        write_synthetic_gguf(plan, path)
        yield path


def llama_args(exe: Path, gguf: Path, n_ctx: int, s: Any, n_gpu_layers: int, prompt_tokens: int,
               n_predict: int, threads: int, cpu_only: bool) -> list[str]:
    args = [str(exe), "-m", str(gguf), "-c", str(n_ctx), "-b", str(s.n_batch), "-ub", str(s.n_ubatch),
            "-np", str(s.n_parallel), "-fa", "off" if s.flash_attn == "off" else s.flash_attn,
            "-ctk", s.cache_type_k, "-ctv", s.cache_type_v, "-ngl", str(n_gpu_layers), "--fit", "off",
            "-n", str(n_predict), "-no-cnv", "--temp", "0", "-t", str(threads), "--no-warmup", "-lv", "4",
            # one byte token per character with the placeholder vocabulary of a zero-weight file
            "-p", "a" * max(1, prompt_tokens - 1)]
    if cpu_only:
        args += ["-lm", "none"]  # weights in plain allocations: the buffer lines then count every byte
    if s.swa_full:
        args.append("--swa-full")
    if s.kv_unified:
        args.append("-kvu")
    return args + s.placement_args()


def check_run_numbers(threads: int, prompt_tokens: int, n_predict: int, timeout: float) -> None:
    """smoke's own numbers (the run settings are check's, validated there), before anything runs."""
    if not 1 <= threads <= MAX_THREADS:
        raise BadInput(f"--threads {threads} is impossible: 1 to {MAX_THREADS} (llama.cpp's maximum)")
    if not 1 <= prompt_tokens <= MAX_PROMPT_TOKENS:
        raise BadInput(f"--prompt-tokens {prompt_tokens} is impossible: 1 to {MAX_PROMPT_TOKENS:,} "
                       "(the prompt is one command-line argument)")
    check_range("--n-predict", n_predict)
    check_timeout(timeout)


def check_prompt_fits(prompt_tokens: int, n_ctx_seq: int) -> None:
    """llama-completion refuses a prompt longer than the context - 4 ("prompt is too long")."""
    if prompt_tokens > n_ctx_seq - 4:
        raise BadInput(f"--prompt-tokens {prompt_tokens} does not fit the context of {n_ctx_seq:,} per sequence "
                       f"(at most {n_ctx_seq - 4:,}); raise --ctx or lower --prompt-tokens")


def shown_command(args: list[str], prompt_tokens: int) -> list[str]:
    """The llama.cpp command line as the document shows it: the binary's name, the prompt as its length."""
    shown = [Path(args[0]).name, *args[1:]]
    i = shown.index("-p")
    shown[i + 1] = f"<{prompt_tokens} tokens>"
    return shown


def measured_memory(m: Measured, n_devices: int) -> dict[str, Any]:
    """llama.cpp's buffers grouped like check's memory block (GPU buffers per device, the rest host)."""
    devices = [{"weights_bytes": 0, "kv_cache_bytes": 0, "compute_bytes": 0} for _ in range(n_devices)]
    host = {"weights_bytes": 0, "kv_cache_bytes": 0, "compute_bytes": 0, "output_bytes": 0}
    for name, b in m.buffers.items():
        gpu = re.fullmatch(r"(?:CUDA|ROCm|Vulkan|MTL|SYCL)(\d+)", name)
        slot = devices[int(gpu.group(1))] if gpu and int(gpu.group(1)) < n_devices else host
        slot["weights_bytes"] += b["model"]
        slot["kv_cache_bytes"] += b["KV"]
        slot["compute_bytes"] += b["compute"]
        if slot is host:
            host["output_bytes"] += b["output"]
    for i, d in enumerate(devices):
        d["total_bytes"] = m.peak_device_bytes.get(i) or (d["weights_bytes"] + d["kv_cache_bytes"] + d["compute_bytes"])
    host["total_bytes"] = sum(host[k] for k in ("weights_bytes", "kv_cache_bytes", "compute_bytes", "output_bytes"))
    host["peak_rss_bytes"] = m.peak_rss_bytes
    return {"devices": devices, "host": host}


def error_pct(estimate: dict[str, Any], measured: dict[str, Any]) -> dict[str, float | None]:
    """(estimate - measured) / measured in %, per term, summed over the devices (or the host if none)."""
    est = estimate["devices"] or [estimate["host"]]
    mea = measured["devices"] or [measured["host"]]

    def pct(key: str) -> float | None:
        e, m = sum(d[key] for d in est), sum(d[key] for d in mea)
        return round(100.0 * (e - m) / m, 2) if m else None

    return {"total": pct("total_bytes"), "weights": pct("weights_bytes"), "kv_cache": pct("kv_cache_bytes"),
            "compute": pct("compute_bytes")}


@record
class SmokeRun:
    """How to run llama.cpp: what smoke adds to check's settings."""

    prompt_tokens: int = 128
    n_predict: int = 16
    threads: int = 2
    timeout_s: float = 600.0
    llama_bin: Path | None = None  # a folder with llama.cpp's binaries; None: the cached build, else PATH


@record
class SmokeResult:
    """llama.cpp's measurement beside gemma-fit's estimate of the same run."""

    estimate: LlamaCppResult
    measured: Measured
    memory: dict[str, Any]  # the measured buffers grouped like check's memory block (measured_memory)
    command: list[str]  # the llama.cpp command line, as shown (shown_command)
    llama_bin: Path


def smoke(model: str | None, quant: str, settings: RunSettings, run: SmokeRun, *, gguf: Path | None = None,
          gpus: tuple[str, ...] = (), catalog: Catalog = BUILTIN) -> SmokeResult:
    """Run llama.cpp on `gguf`, or on a zero-weight file of `model` at `quant`, and measure it."""
    if (gguf is None) == (model is None):
        raise BadInput("give --gguf FILE, or --model ID --synthetic")
    check_run_numbers(run.threads, run.prompt_tokens, run.n_predict, run.timeout_s)
    hw = select_hardware(list(gpus) or ["cpu"], None, catalog.hardware_dirs)
    source: contextlib.AbstractContextManager[Path]
    if gguf is not None:
        resolved, plan = gguf_model(gguf)
        source = contextlib.nullcontext(gguf)
    else:
        resolved = resolve_model(model or "", catalog.model_dirs)
        plan = build_plan(resolved.spec, quant)
        source = synthetic_file(plan)
    result = run_check(resolved, plan.ftype.name, settings, hw, prompt_tokens=run.prompt_tokens, plan=plan)
    check_prompt_fits(run.prompt_tokens, result.detail.settings.ctx_per_stream(resolved.spec))
    exe = find_llama_bin(run.llama_bin)
    with source as path:
        args = llama_args(exe, Path(path), result.n_ctx, result.detail.settings, result.detail.fit.n_gpu_layers,
                          run.prompt_tokens, run.n_predict, run.threads, not hw.gpus)
        measured = run_llama(args, run.timeout_s)
    return SmokeResult(result, measured, measured_memory(measured, len(hw.gpus)),
                       shown_command(args, run.prompt_tokens), exe.parent)


RECORDS_ENV = "GEMMA_FIT_SMOKE_RECORDS"


def smoke_calibration_run(r: SmokeResult) -> dict[str, Any] | None:
    """The smoke's measured speed beside the estimate's, as a calibration run (None without both figures)."""
    import datetime

    perf = r.estimate.performance
    if perf is None:
        return None
    rows = [{"test": test, "kind": kind, "concurrency": 1, "predicted": round(float(pred), 3),
             "measured": round(float(mea), 3)}
            for test, kind, pred, mea in (
                (f"llama-completion tg{r.command[r.command.index('-n') + 1]}", "decode", perf.decode_tokens_per_s,
                 r.measured.decode_tokens_per_s),
                (f"llama-completion pp{perf.prompt_tokens}", "prefill", perf.prefill_tokens_per_s,
                 r.measured.prefill_tokens_per_s))
            if pred and mea]
    if not rows:
        return None
    return {"date": datetime.date.today().isoformat(), "tool": "gemma-fit smoke", "model": r.estimate.resolved.spec.id,
            "quant": r.estimate.quant, "build": None, "rows": rows}


def record_smoke(doc: dict[str, Any], result: SmokeResult | None = None) -> Path:
    """Append a smoke document to this machine's records ($GEMMA_FIT_SMOKE_RECORDS, else smoke_records.jsonl in
    gemma-fit's data folder): one JSON line each; and its measured speed to this machine's calibration
    (hardware.calibration_store), which later answers for the same hardware use. Returns the records file."""
    if result is not None and (run := smoke_calibration_run(result)) is not None:
        from gemma_fit.hardware.calibration_store import save_run

        try:
            save_run(result.estimate.hardware, run)
        except OSError as exc:
            raise BadInput(f"--record: cannot write the calibration: {exc.strerror or exc}") from None
    import json
    import os

    from gemma_fit.base.cache import data_root

    path = Path(os.environ.get(RECORDS_ENV) or data_root() / "smoke_records.jsonl")
    try:
        if path.exists() and not path.is_file():  # a pipe nobody reads would block for ever, a device fill up
            raise BadInput(f"--record: {printable(str(path), 120)} is not a regular file")
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(doc, sort_keys=True) + "\n")
    except OSError as exc:
        raise BadInput(f"--record: cannot write {path}: {exc.strerror or exc}") from None
    return path


SCHEMA = "gemma-fit.smoke/1"


def smoke_document(r: SmokeResult) -> dict[str, Any]:
    """gemma-fit.smoke/1: the estimate's memory block beside llama.cpp's measurement, and their errors."""
    est = check_json(r.estimate)
    return {"schema": SCHEMA, "model": est["model"], "settings": est["settings"], "estimate": est["memory"],
            "measured": {**r.memory, "decode_tokens_per_s": r.measured.decode_tokens_per_s,
                         "prefill_tokens_per_s": r.measured.prefill_tokens_per_s},
            "estimated_speed": est["performance"], "error_pct": error_pct(est["memory"], r.memory),
            "llama_cpp_command": r.command, "llama_cpp_bin": str(r.llama_bin)}
