"""`gemma-fit smoke`: run llama.cpp, measure memory and speed, set them beside the estimate.

Runs llama-completion (from --llama-bin or PATH) with the settings `check` would use, on a real GGUF
or on a zero-weight file written by `synth` (speed and allocations do not depend on weight values).
Memory comes from llama.cpp's own buffer lines (model, KV, compute, output), the process's peak RSS
(psutil) and, with an NVIDIA driver, its peak device memory (NVML), sampled while it runs. Speed
comes from llama.cpp's own timing lines. Never runs through a shell.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from .errors import BadInput, GemmaFitError

MIB = 1024**2
TOOL = "llama-completion"

_BUFFER = re.compile(
    r"(?P<what>model|KV|compute|output) buffer size\s*=\s*(?P<mib>[\d.]+) MiB"
)
_BUFFER_NAME = re.compile(r"(?:load_tensors|llama_kv_cache\w*|sched_reserve|llama_context):\s+(?P<buf>\S+)\s+"
                          r"(?:model|KV|compute|output) buffer size")
_PROMPT = re.compile(r"prompt eval time =\s*[\d.]+ ms /\s*(\d+) tokens \(.*?([\d.]+) tokens per second\)")
_EVAL = re.compile(r"\beval time =\s*[\d.]+ ms /\s*(\d+) runs\s*\(.*?([\d.]+) tokens per second\)")


class LlamaCppFailed(GemmaFitError):
    """llama.cpp missing output, crashing or running out of memory."""

    exit_code = 5


@dataclass
class Measured:
    buffers: dict[str, dict[str, int]] = field(default_factory=dict)  # buffer name -> {model, KV, compute, output}
    prefill_tokens_per_s: float | None = None
    decode_tokens_per_s: float | None = None
    peak_rss_bytes: int = 0
    peak_device_bytes: dict[int, int] = field(default_factory=dict)  # NVML: GPU index -> process peak
    log_tail: str = ""


def parse_log(text: str) -> Measured:
    m = Measured()
    for line in text.splitlines():
        size = _BUFFER.search(line)
        name = _BUFFER_NAME.search(line)
        if size and name:
            slot = m.buffers.setdefault(name.group("buf"), {"model": 0, "KV": 0, "compute": 0, "output": 0})
            slot[size.group("what")] += int(round(float(size.group("mib")) * MIB))
        if (p := _PROMPT.search(line)) is not None:
            m.prefill_tokens_per_s = float(p.group(2))
        elif (e := _EVAL.search(line)) is not None:
            m.decode_tokens_per_s = float(e.group(2))
    return m


def find_llama_bin(llama_bin: Path | None) -> Path:
    if llama_bin is not None:
        exe = Path(llama_bin) / TOOL
        if not exe.is_file():
            raise BadInput(f"{TOOL} not found in --llama-bin {llama_bin}")
        return exe
    found = shutil.which(TOOL)
    if not found:
        raise BadInput(f"{TOOL} not found on PATH; build llama.cpp and pass --llama-bin DIR "
                       "(python scripts/build_llamacpp.py prints one)")
    return Path(found)


class _Sampler:
    """Samples the process tree's RSS and, through NVML, its device memory, every 50 ms."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak_rss = 0
        self.peak_device: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._nvml = _nvml_handles()

    def __enter__(self) -> _Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=2)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(0.05)

    def _sample(self) -> None:
        try:
            proc = psutil.Process(self.pid)
            rss = proc.memory_info().rss + sum(c.memory_info().rss for c in proc.children(recursive=True))
            self.peak_rss = max(self.peak_rss, rss)
        except psutil.Error:
            return
        if self._nvml is None:
            return
        nvml, handles = self._nvml
        for index, handle in enumerate(handles):
            try:
                for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
                    if p.pid == self.pid and p.usedGpuMemory:
                        self.peak_device[index] = max(self.peak_device.get(index, 0), int(p.usedGpuMemory))
            except Exception:  # noqa: BLE001 - NVML errors must not stop the run
                continue


def _nvml_handles() -> tuple[Any, list[Any]] | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml, [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    except Exception:  # noqa: BLE001 - no driver, no GPU: CPU-only measurement
        return None


@contextmanager
def synthetic_file(plan: Any) -> Iterator[Path]:
    """A zero-weight GGUF in a temporary folder, removed afterwards."""
    from .synth import write_synthetic_gguf

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
    return args


def run_llama(args: list[str], timeout: float) -> Measured:
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join([str(Path(args[0]).parent), env.get("LD_LIBRARY_PATH", "")])
    start = time.monotonic()
    try:
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, text=True, errors="replace")
    except OSError as exc:
        raise BadInput(f"cannot run {args[0]}: {exc.strerror or exc}") from None
    with _Sampler(proc.pid) as sampler:
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
            raise LlamaCppFailed(f"llama.cpp did not finish in {timeout:.0f} s; last lines: "
                                 f"{_tail(out)}") from None
    measured = parse_log(out)
    measured.peak_rss_bytes = sampler.peak_rss
    measured.peak_device_bytes = dict(sampler.peak_device)
    measured.log_tail = _tail(out, 20)
    if proc.returncode != 0:
        reason = "ran out of memory" if re.search(r"out of memory|failed to allocate", out, re.I) else "failed"
        raise LlamaCppFailed(f"llama.cpp {reason} (exit {proc.returncode}) after {time.monotonic() - start:.1f} s; "
                             f"last lines: {_tail(out)}")
    if not measured.buffers:
        raise LlamaCppFailed(f"llama.cpp printed no buffer sizes; last lines: {_tail(out)}")
    return measured


def _tail(text: str, n: int = 3) -> str:
    lines = [x.strip() for x in (text or "").strip().splitlines() if x.strip()]
    return " | ".join(lines[-n:]) or "(no output)"


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
