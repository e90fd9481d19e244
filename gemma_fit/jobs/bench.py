"""`gemma-fit bench`: llama.cpp's own benchmarks on this machine, the speed model's prediction of each test beside
them, and (with --save) the machine's calibration that later answers use (hardware.calibration_store).

Runs llama-bench (prompt processing and generation) and, with --parallel N, llama-batched-bench (1, 2, 4 ... N
sequences at once), on a real GGUF or a zero-weight file of the model's exact layout (speed does not depend on
the weights' values); or reads the table llama-bench printed elsewhere (--paste). Each prediction is the model's
own, without any calibration saved before, for the same settings llama.cpp ran: llama-bench's context of prompt +
generated tokens, its batch sizes, threads and GPU layers.
"""

from __future__ import annotations

import contextlib
import datetime
from dataclasses import replace
from pathlib import Path
from typing import Any

from gemma_fit.base.errors import BadInput
from gemma_fit.base.ranges import check_range
from gemma_fit.base.record import record
from gemma_fit.db.catalog import BUILTIN, Catalog
from gemma_fit.db.files import read_text
from gemma_fit.engines.llamacpp import run_check
from gemma_fit.gguf.tensors import TensorPlan, build_plan
from gemma_fit.hardware.calibration_store import machine_key, save_run
from gemma_fit.hardware.flags import MachineFlags
from gemma_fit.hardware.select import hardware_of
from gemma_fit.hardware.spec import Hardware
from gemma_fit.jobs.bench_parse import (
    MAX_PASTE_BYTES,
    Measurement,
    batched_bench_jsonl,
    llama_bench_json,
    pasted_tables,
)
from gemma_fit.jobs.inputs import gguf_model
from gemma_fit.jobs.llama_run import find_llama_bin, run_tool
from gemma_fit.jobs.smoke import MAX_THREADS, synthetic_file
from gemma_fit.memory.settings import RunSettings
from gemma_fit.model.catalog import ResolvedModel, resolve_model
from gemma_fit.speed.predict import predict_performance
from gemma_fit.speed.serve_llamacpp import llamacpp_pipeline

SCHEMA = "gemma-fit.bench/1"
MAX_PARALLEL = 64  # llama-batched-bench sequences: more is a serving test, not a calibration
MAX_REPETITIONS = 100


@record
class BenchRun:
    """What to run: llama-bench's -p, -n and -r, the threads, and llama-batched-bench up to `parallel` sequences."""

    n_prompt: int = 512
    n_gen: int = 128
    repetitions: int = 3
    parallel: int = 1  # > 1: llama-batched-bench at 1, 2, 4 ... parallel sequences
    threads: int = 2
    timeout_s: float = 600.0
    llama_bin: Path | None = None
    paste: Path | None = None  # a file with llama-bench's table: read instead of running


@record
class BenchRow:
    measurement: Measurement
    predicted: float  # tokens/s the speed model gives for this test, uncalibrated

    @property
    def error_pct(self) -> float:
        """(predicted - measured) / measured, in %: positive when the model is too optimistic."""
        return round(100.0 * (self.predicted - self.measurement.tokens_per_s) / self.measurement.tokens_per_s, 2)


@record
class BenchResult:
    model: str
    quant: str
    hardware: Hardware  # without a calibration: what the predictions are for
    rows: tuple[BenchRow, ...]
    commands: tuple[tuple[str, ...], ...]  # what ran, as shown (the binary's name, the file's)
    source: str  # "llama-bench" | "pasted table"
    calibration_file: Path | None = None  # where --save put the runs


def _check_numbers(run: BenchRun) -> None:
    if not 1 <= run.threads <= MAX_THREADS:
        raise BadInput(f"--threads {run.threads} is impossible: 1 to {MAX_THREADS} (llama.cpp's maximum)")
    for flag, value, low, high in (("--n-prompt", run.n_prompt, 1, 1 << 17), ("--n-gen", run.n_gen, 1, 1 << 17),
                                   ("--repetitions", run.repetitions, 1, MAX_REPETITIONS),
                                   ("--parallel", run.parallel, 1, MAX_PARALLEL)):
        if not low <= value <= high:
            raise BadInput(f"{flag} {value} is out of range ({low} to {high:,})")
    check_range("--timeout", run.timeout_s)


def _plan(hw: Hardware, resolved: ResolvedModel, plan: TensorPlan, settings: RunSettings, prompt_tokens: int,
          ngl: int | None) -> Any:
    s = replace(settings, n_gpu_layers=ngl if hw.gpus else 0)
    result = run_check(resolved, plan.ftype.name, s, hw, prompt_tokens=prompt_tokens, plan=plan)
    if result.performance is None:
        why = result.detail.speed_error or f"it does not fit ({result.verdict.value})"
        raise BadInput(f"no prediction for {resolved.spec.id} {plan.ftype.name} on {hw.label}: {why}")
    return result


def predicted(m: Measurement, hw: Hardware, resolved: ResolvedModel, plan: TensorPlan, ngl: int | None) -> float:
    """The speed model's tokens/s for this test, at the settings llama.cpp ran it with."""
    if m.kind == "batched":
        per_seq = m.n_prompt + m.n_gen
        s = RunSettings(n_ctx=m.concurrency * per_seq, n_parallel=m.concurrency)
        result = _plan(hw, resolved, plan, s, max(1, m.n_prompt), ngl)
        pipe = llamacpp_pipeline(plan, result.detail.fit.estimate, hw, m.n_prompt + m.n_gen // 2)
        return round(pipe.aggregate_tokens_per_s(m.concurrency), 3)
    if m.kind == "prefill":
        s = RunSettings(n_ctx=m.n_prompt + m.depth)
        if m.n_batch or m.n_ubatch:  # llama.cpp runs a ubatch of min(-ub, -b) tokens
            n_batch = m.n_batch or s.n_batch
            s = replace(s, n_batch=n_batch, n_ubatch=min(n_batch, m.n_ubatch or s.n_ubatch))
        result = _plan(hw, resolved, plan, s, m.n_prompt, ngl)
        if m.depth:  # the prompt's attention also reads the `depth` cells before it
            perf = predict_performance(plan, result.detail.fit.estimate, hw, m.n_prompt, m.depth)
            return round(float(perf.prefill_tokens_per_s), 3)
        return round(float(result.performance.prefill_tokens_per_s), 3)
    # generation from position `depth`: the mean position over the test is depth + n_gen / 2
    result = _plan(hw, resolved, plan, RunSettings(n_ctx=m.depth + m.n_gen), max(1, m.depth + m.n_gen // 2), ngl)
    return round(float(result.performance.decode_tokens_per_s), 3)


def _bench_args(exe: Path, gguf: Path, run: BenchRun, ngl: int) -> list[str]:
    return [str(exe), "-m", str(gguf), "-p", str(run.n_prompt), "-n", str(run.n_gen), "-r", str(run.repetitions),
            "-t", str(run.threads), "-ngl", str(ngl), "-o", "json"]


def parallel_steps(n: int) -> list[int]:
    """1, 2, 4 ... up to n, and n itself."""
    steps = [1]
    while steps[-1] * 2 < n:
        steps.append(steps[-1] * 2)
    return sorted({*steps, n})


def _batched_args(exe: Path, gguf: Path, run: BenchRun, ngl: int) -> list[str]:
    return [str(exe), "-m", str(gguf), "-c", str(run.parallel * (run.n_prompt + run.n_gen)), "-b", "2048",
            "-ub", "512", "-npp", str(run.n_prompt), "-ntg", str(run.n_gen),
            "-npl", ",".join(str(p) for p in parallel_steps(run.parallel)), "-t", str(run.threads), "-ngl", str(ngl),
            "--output-format", "jsonl"]


def _shown(args: list[str], gguf: Path) -> tuple[str, ...]:
    return tuple(Path(a).name if a in (args[0], str(gguf)) else a for a in args)


def _model(model: str | None, quant: str, gguf: Path | None, catalog: Catalog) -> tuple[ResolvedModel, TensorPlan]:
    if gguf is not None:
        return gguf_model(gguf)
    resolved = resolve_model(model or "", catalog.model_dirs)
    return resolved, build_plan(resolved.spec, quant)


def _measure(run: BenchRun, plan: TensorPlan, gguf: Path | None, ngl: int
             ) -> tuple[list[Measurement], tuple[tuple[str, ...], ...]]:
    bench_exe = find_llama_bin(run.llama_bin, "llama-bench")
    batched_exe = find_llama_bin(run.llama_bin, "llama-batched-bench") if run.parallel > 1 else None
    source: contextlib.AbstractContextManager[Path] = (
        contextlib.nullcontext(gguf) if gguf is not None else synthetic_file(plan))
    with source as path:
        args = _bench_args(bench_exe, Path(path), run, ngl)
        found = llama_bench_json(run_tool(args, run.timeout_s))
        commands = [_shown(args, Path(path))]
        if batched_exe is not None:
            args = _batched_args(batched_exe, Path(path), run, ngl)
            found += batched_bench_jsonl(run_tool(args, run.timeout_s))
            commands.append(_shown(args, Path(path)))
    if not found:
        raise BadInput("llama-bench printed no test")
    return found, tuple(commands)


def bench(model: str | None, quant: str, run: BenchRun, *, gguf: Path | None = None, gpus: tuple[str, ...] = (),
          save: bool = False, catalog: Catalog = BUILTIN) -> BenchResult:
    """Run (or read) llama.cpp's benchmarks on this machine and predict each test; with `save`, keep the runs as
    this machine's calibration."""
    if gguf is not None and model is not None:
        raise BadInput("give --gguf FILE, or --model ID (with --synthetic or --paste), not both")
    if gguf is None and model is None:
        raise BadInput("give --gguf FILE, or --model ID --synthetic (or --model ID --paste FILE)")
    _check_numbers(run)
    pasted = pasted_tables(read_text(run.paste, MAX_PASTE_BYTES)) if run.paste is not None else None
    threads = next((m.threads for m in pasted or () if m.threads), run.threads)
    hw = replace(hardware_of(list(gpus) or ["cpu"], None, catalog.hardware_dirs, MachineFlags(threads=threads)),
                 speed_calibration=None)  # the model's own figures: a calibration is what they are compared with
    resolved, plan = _model(model, quant, gguf, catalog)
    ngl = _plan(hw, resolved, plan, RunSettings(n_ctx=run.n_prompt + run.n_gen), run.n_prompt,
                None).detail.fit.n_gpu_layers if hw.gpus else 0
    commands: tuple[tuple[str, ...], ...] = ()
    if pasted is not None:
        found, source = pasted, "pasted table"
    else:
        found, commands = _measure(run, plan, gguf, ngl)
        source = "llama-bench"
    rows = tuple(BenchRow(m, predicted(m, hw, resolved, plan, m.n_gpu_layers if m.n_gpu_layers is not None
                                       and m.n_gpu_layers >= 0 else ngl)) for m in found)
    result = BenchResult(resolved.spec.id, plan.ftype.name, hw, rows, commands, source)
    if save:
        result = replace(result, calibration_file=save_run(hw, calibration_run(result)))
    return result


def calibration_run(r: BenchResult) -> dict[str, Any]:
    """One saved run: when, what, and each test's measured and predicted tokens/s."""
    build = next((row.measurement.build for row in r.rows if row.measurement.build), None)
    return {"date": datetime.date.today().isoformat(), "tool": r.source, "model": r.model, "quant": r.quant,
            "build": build, "machine": machine_key(r.hardware),
            "rows": [{"test": row.measurement.test, "kind": row.measurement.kind,
                      "concurrency": row.measurement.concurrency, "n_ubatch": row.measurement.n_ubatch,
                      "predicted": row.predicted,
                      "measured": row.measurement.tokens_per_s} for row in r.rows]}


def bench_document(r: BenchResult) -> dict[str, Any]:
    """gemma-fit.bench/1: each test, predicted beside measured."""
    return {"schema": SCHEMA, "model": r.model, "quant": r.quant, "hardware": r.hardware.label,
            "machine": machine_key(r.hardware), "source": r.source,
            "commands": [" ".join(c) for c in r.commands],
            "rows": [{"test": row.measurement.test, "kind": row.measurement.kind,
                      "concurrency": row.measurement.concurrency, "n_ubatch": row.measurement.n_ubatch,
                      "predicted": row.predicted,
                      "measured": round(row.measurement.tokens_per_s, 3), "error_pct": row.error_pct}
                     for row in r.rows],
            "calibration_file": str(r.calibration_file) if r.calibration_file else None}
