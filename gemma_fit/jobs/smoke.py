"""`gemma-fit smoke`: run llama.cpp, measure memory and speed, set them beside the estimate.

Runs llama-completion (from --llama-bin or PATH) with the settings `check` would use, on a real GGUF
or on a zero-weight file written by `synth` (speed and allocations do not depend on weight values).
Memory comes from llama.cpp's own buffer lines (model, KV, compute, output), the process's peak RSS
(psutil) and, with an NVIDIA driver, its peak device memory (NVML), sampled while it runs. Speed
comes from llama.cpp's own timing lines. Never runs through a shell.

llama.cpp runs in its own session (process group): on --timeout, or when it leaves children behind, the
whole group is ended (SIGTERM, then SIGKILL). Its output is parsed as it arrives, line by line
(jobs/llama_log.py), keeping only the figures and a short tail (lines capped at MAX_LINE_BYTES), so a log
of any size takes bounded memory; a reader that a stray process keeps blocked on the pipe is abandoned
after READER_GRACE_S.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import psutil

from gemma_fit.base import cache as llamacpp_cache
from gemma_fit.base.errors import BadInput, GemmaFitError
from gemma_fit.jobs.llama_log import TAIL_LINES, LogParser, Measured, read_lines
from gemma_fit.memory.settings import MAX_CTX

TOOL = "llama-completion"
TERM_GRACE_S = 2.0  # after SIGTERM to the process group, before SIGKILL
READER_GRACE_S = 5.0  # after the group is ended, for the output reader to reach end of file
MAX_THREADS = 512  # GGML_MAX_N_THREADS
MAX_TIMEOUT_S = 7 * 24 * 3600.0
MAX_PROMPT_TOKENS = 128 * 1024 - 1  # one byte per token in one argv string: Linux's MAX_ARG_STRLEN


class LlamaCppFailed(GemmaFitError):
    """llama.cpp missing output, crashing or running out of memory."""

    exit_code = 5


def cache_bin_dir() -> Path | None:
    """Where scripts/build_llamacpp.py builds llama.cpp (None when there is no home folder to look in)."""
    try:
        return llamacpp_cache.bin_dir()
    except RuntimeError:  # Path.home() without HOME or a passwd entry
        return None


def find_llama_bin(llama_bin: Path | None) -> Path:
    """--llama-bin DIR; else the build scripts/build_llamacpp.py makes (the llama.cpp version whose rules the
    estimate follows); else llama-completion on PATH."""
    how = (f"build it with `{llamacpp_cache.BUILD_COMMAND}` in a gemma-fit source checkout (it prints the "
           f"bin folder; {llamacpp_cache.CACHE_ENV} sets the cache) and pass --llama-bin DIR")
    if llama_bin is not None:
        exe = Path(llama_bin) / TOOL
        if not exe.is_file():
            raise BadInput(f"{TOOL} not found in --llama-bin {llama_bin}; {how}")
        return exe
    cached = cache_bin_dir()
    if cached is not None and (cached / TOOL).is_file():
        return cached / TOOL
    found = shutil.which(TOOL)
    if not found:
        where = f"in {cached} or on PATH" if cached is not None else "on PATH"
        raise BadInput(f"{TOOL} not found {where}; {how}")
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
    if not 1 <= n_predict <= MAX_CTX:
        raise BadInput(f"--n-predict {n_predict} is impossible: 1 to {MAX_CTX:,} (decode speed needs a token)")
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


def check_timeout(timeout: float) -> None:
    if not (math.isfinite(timeout) and 0 < timeout <= MAX_TIMEOUT_S):
        raise BadInput(f"--timeout {timeout:g} is impossible: seconds above 0, at most {MAX_TIMEOUT_S:.0f}")


def run_llama(args: list[str], timeout: float) -> Measured:
    check_timeout(timeout)
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join([str(Path(args[0]).parent), env.get("LD_LIBRARY_PATH", "")])
    start = time.monotonic()
    try:
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, start_new_session=True)
    except OSError as exc:
        raise BadInput(f"cannot run {args[0]}: {exc.strerror or exc}") from None
    parser = LogParser()
    reader = threading.Thread(target=_read_into, args=(proc.stdout, parser), daemon=True)
    reader.start()
    timed_out = False
    try:
        with _Sampler(proc.pid) as sampler:
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
    finally:  # on a timeout, an interrupt or a normal exit: nothing of llama.cpp's is left running
        end_process_group(proc)
    reader.join(READER_GRACE_S)  # a process that left the group may hold the pipe open: not waited for
    measured = parser.snapshot()
    if timed_out:
        raise LlamaCppFailed(f"llama.cpp did not finish in {timeout:g} s (ended); last lines: {parser.tail()}")
    measured.peak_rss_bytes = sampler.peak_rss
    measured.peak_device_bytes = dict(sampler.peak_device)
    measured.log_tail = parser.tail(TAIL_LINES)
    if proc.returncode != 0:
        reason = "ran out of memory" if parser.out_of_memory else "failed"
        raise LlamaCppFailed(f"llama.cpp {reason} ({_status(proc.returncode)}) after "
                             f"{time.monotonic() - start:.1f} s; last lines: {parser.tail()}")
    if not measured.buffers:
        raise LlamaCppFailed(f"llama.cpp printed no buffer sizes; last lines: {parser.tail()}")
    return measured


def _read_into(stream: Any, parser: LogParser) -> None:
    try:
        for line in read_lines(stream):
            parser.feed(line)
    except (OSError, ValueError):  # the pipe closed under the reader
        return


def _status(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit {returncode}"


def end_process_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to llama.cpp's process group, SIGKILL after TERM_GRACE_S; reaps llama.cpp itself."""
    pgid = proc.pid  # start_new_session: the group is the child's own
    if proc.poll() is None:
        _signal_group(pgid, signal.SIGTERM)
        with suppress(subprocess.TimeoutExpired):
            proc.wait(TERM_GRACE_S)
    elif _signal_group(pgid, 0):  # it exited; what it started is still there
        _signal_group(pgid, signal.SIGTERM)
        deadline = time.monotonic() + TERM_GRACE_S
        while time.monotonic() < deadline and _signal_group(pgid, 0):
            time.sleep(0.05)
    _signal_group(pgid, signal.SIGKILL)
    proc.wait()


def _signal_group(pgid: int, sig: int) -> bool:
    """False when the group is gone."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:  # a member changed user: nothing more to do for it
        return True
    return True


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
