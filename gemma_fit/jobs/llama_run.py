"""Running llama.cpp's programs and watching them: where the binaries are, the process group they run in, the
peak memory they reach (RSS through psutil, device memory through NVML, sampled while they run) and the
figures their log prints (jobs/llama_log.py). Never through a shell.

llama.cpp runs in its own session (process group): on --timeout, or when it leaves children behind, the
whole group is ended (SIGTERM, then SIGKILL). Its output is parsed as it arrives, line by line, keeping only
the figures and a short tail (lines capped at MAX_LINE_BYTES), so a log of any size takes bounded memory; a
reader that a stray process keeps blocked on the pipe is abandoned after READER_GRACE_S.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
from contextlib import suppress
from pathlib import Path
from typing import Any

import psutil

from gemma_fit.base import cache as llamacpp_cache
from gemma_fit.base.errors import BadInput, GemmaFitError
from gemma_fit.base.ranges import check_range
from gemma_fit.jobs.llama_log import TAIL_LINES, LogParser, Measured, read_lines

TOOL = "llama-completion"
TERM_GRACE_S = 2.0  # after SIGTERM to the process group, before SIGKILL
READER_GRACE_S = 5.0  # after the group is ended, for the output reader to reach end of file


class LlamaCppFailed(GemmaFitError):
    """llama.cpp missing output, crashing or running out of memory."""

    exit_code = 5


def cache_bin_dir() -> Path | None:
    """Where scripts/build_llamacpp.py builds llama.cpp (None when there is no home folder to look in)."""
    try:
        return llamacpp_cache.bin_dir()
    except RuntimeError:  # Path.home() without HOME or a passwd entry
        return None


def find_llama_bin(llama_bin: Path | None, tool: str = TOOL) -> Path:
    """llama.cpp's `tool` (llama-completion, llama-bench ...) in --llama-bin DIR; else in the build
    scripts/build_llamacpp.py makes (the llama.cpp version whose rules the estimate follows); else on PATH."""
    how = (f"build it with `{llamacpp_cache.BUILD_COMMAND}` in a gemma-fit source checkout (it prints the "
           f"bin folder; {llamacpp_cache.CACHE_ENV} sets the cache) and pass --llama-bin DIR")
    if llama_bin is not None:
        exe = Path(llama_bin) / tool
        if not exe.is_file():
            raise BadInput(f"{tool} not found in --llama-bin {llama_bin}; {how}")
        return exe
    cached = cache_bin_dir()
    if cached is not None and (cached / tool).is_file():
        return cached / tool
    found = shutil.which(tool)
    if not found:
        where = f"in {cached} or on PATH" if cached is not None else "on PATH"
        raise BadInput(f"{tool} not found {where}; {how}")
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


def check_timeout(timeout: float) -> None:
    check_range("--timeout", timeout)


def _tool_env(exe: str) -> dict[str, str]:
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join([str(Path(exe).parent), env.get("LD_LIBRARY_PATH", "")])
    return env


MAX_TOOL_OUTPUT_BYTES = 8 * 1024 * 1024  # llama-bench's JSON for a few hundred tests is well under 1 MiB


def run_tool(args: list[str], timeout: float) -> str:
    """A llama.cpp program's standard output (llama-bench -o json, llama-batched-bench --output-format jsonl),
    bounded in time and size; its log (stderr) only as the tail of a failure."""
    check_timeout(timeout)
    try:
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                env=_tool_env(args[0]), start_new_session=True)
    except OSError as exc:
        raise BadInput(f"cannot run {args[0]}: {exc.strerror or exc}") from None
    out: list[bytes] = []
    log = LogParser()

    def read_out() -> None:
        assert proc.stdout is not None
        with suppress(OSError, ValueError):
            out.append(proc.stdout.read(MAX_TOOL_OUTPUT_BYTES + 1))

    readers = [threading.Thread(target=read_out, daemon=True),
               threading.Thread(target=_read_into, args=(proc.stderr, log), daemon=True)]
    for r in readers:
        r.start()
    timed_out = False
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        end_process_group(proc)
    for r in readers:
        r.join(READER_GRACE_S)
    name = Path(args[0]).name
    if timed_out:
        raise LlamaCppFailed(f"{name} did not finish in {timeout:g} s (ended); last lines: {log.tail()}")
    if proc.returncode != 0:
        reason = "ran out of memory" if log.out_of_memory else "failed"
        raise LlamaCppFailed(f"{name} {reason} ({_status(proc.returncode)}); last lines: {log.tail()}")
    data = b"".join(out)
    if len(data) > MAX_TOOL_OUTPUT_BYTES:
        raise LlamaCppFailed(f"{name} printed more than {MAX_TOOL_OUTPUT_BYTES // 2**20} MiB")
    return data.decode("utf-8", errors="replace")


def run_llama(args: list[str], timeout: float) -> Measured:
    check_timeout(timeout)
    env = _tool_env(args[0])
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
