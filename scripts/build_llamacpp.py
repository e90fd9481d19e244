#!/usr/bin/env python3
"""Build llama.cpp (CPU) once into a cache folder outside the repo and print its bin/ folder.

The source is the llama.cpp tree vendored in the llama-cpp-python sdist on PyPI (the version whose
rules gemma-fit follows). Nothing of it is copied into the repo. Reused when already built.

    python scripts/build_llamacpp.py          # prints e.g. ~/.cache/gemma-fit/llama.cpp-0.3.36/build/bin
Environment: GEMMA_FIT_CACHE (default ~/.cache/gemma-fit).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType


def _load_cache_rule() -> ModuleType:
    """gemma_fit/base/cache.py, loaded by path (the package need not be installed): the one place of the
    cache rule and the sdist version, shared with `gemma-fit smoke`, which looks for this build there."""
    import importlib.util

    path = Path(__file__).resolve().parent.parent / "gemma_fit" / "base" / "cache.py"
    spec = importlib.util.spec_from_file_location("_gemma_fit_llamacpp_cache", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_CACHE_RULE = _load_cache_rule()
SDIST_VERSION: str = _CACHE_RULE.LLAMA_CPP_PYTHON_VERSION
TARGETS = ("llama-quantize", "llama-completion", "llama-fit-params", "llama-bench", "llama-batched-bench",
           "llama-speculative-simple", "llama-mtmd-cli")


def cache_root() -> Path:
    """$GEMMA_FIT_CACHE, else ~/.cache/gemma-fit."""
    return Path(_CACHE_RULE.cache_root())


def bin_dir() -> Path:
    """<cache>/llama.cpp-<SDIST_VERSION>/build/bin."""
    return Path(_CACHE_RULE.bin_dir(SDIST_VERSION))


PROBE_SOURCE = Path(__file__).resolve().parent.parent / "tools" / "llama_mem_probe.cpp"
PROBE = "llama-mem-probe"
PROBE_FLAGS = ("-O1", "-std=c++17")


def probe_stamp() -> str:
    """What the probe binary is built from (its source and compile flags): a build from an older source is
    rebuilt, also in a cache that CI restores from an earlier run."""
    digest = hashlib.sha256(PROBE_SOURCE.read_bytes())
    digest.update(" ".join(PROBE_FLAGS).encode())
    return digest.hexdigest()


def _probe_current(b: Path) -> bool:
    stamp = b / f"{PROBE}.sha256"
    return (b / PROBE).is_file() and stamp.is_file() and stamp.read_text().strip() == probe_stamp()


def _have_all(b: Path) -> bool:
    return all((b / t).is_file() for t in TARGETS) and _probe_current(b)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One builder at a time (parallel test workers all ask for the build)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _log(msg: str) -> None:
    print(f"[build_llamacpp] {msg}", file=sys.stderr, flush=True)


def fetch_source(work: Path) -> Path:
    src = work / "src"
    if (src / "CMakeLists.txt").is_file():
        return src
    dl = work / "sdist"
    dl.mkdir(parents=True, exist_ok=True)
    sdist = dl / f"llama_cpp_python-{SDIST_VERSION}.tar.gz"
    if not sdist.is_file():
        _log(f"downloading llama-cpp-python=={SDIST_VERSION} sdist")
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", "llama-cpp-python",
             f"llama-cpp-python=={SDIST_VERSION}", "-d", str(dl)],
            check=True, stdout=subprocess.DEVNULL,
        )
    _log("unpacking vendor/llama.cpp")
    prefix = f"llama_cpp_python-{SDIST_VERSION}/vendor/llama.cpp/"
    tmp = work / "src.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(prefix)]
        for m in members:
            m.name = m.name[len(prefix):]
        tar.extractall(tmp, members=[m for m in members if m.name], filter="data")
    tmp.rename(src)
    return src


def build() -> Path:
    b = bin_dir()
    if _have_all(b):
        return b
    with _locked(b.parent.parent / "build.lock"):
        return _build(b)


def _build(b: Path) -> Path:
    if _have_all(b):  # built by another process while this one waited for the lock
        return b
    if all((b / t).is_file() for t in TARGETS):  # llama.cpp built, the probe missing or changed
        build_probe(b.parent.parent / "src", b)
        return b
    work = b.parent.parent
    work.mkdir(parents=True, exist_ok=True)
    src = fetch_source(work)
    build_dir = work / "build"
    flags = ["-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=OFF", "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF",
             "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_SERVER=OFF", "-DGGML_OPENMP=OFF"]
    _log("configuring (cmake)")
    subprocess.run(["cmake", "-S", str(src), "-B", str(build_dir), *flags], check=True,
                   stdout=subprocess.DEVNULL)
    jobs = str(os.cpu_count() or 2)
    _log(f"building {', '.join(TARGETS)} with {jobs} jobs (about 6 minutes on two cores)")
    _run_with_progress(["cmake", "--build", str(build_dir), "-j", jobs, "--target", *TARGETS])
    build_probe(src, b)
    if not _have_all(b):
        raise SystemExit(f"build finished but binaries are missing in {b}")
    return b


def _run_with_progress(cmd: list[str]) -> None:
    """Run a build, printing its percentage every 10% or every minute (a silent 10-minute step reads
    as a hang), and the last lines of its output if it fails."""
    started = time.monotonic()
    last_pct, last_time = -10, started
    tail: list[str] = []
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          errors="replace") as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            tail = [*tail[-19:], line.rstrip()]
            match = re.match(r"\[\s*(\d+)%\]", line)
            now = time.monotonic()
            pct = int(match.group(1)) if match else last_pct
            if pct >= last_pct + 10 or now - last_time >= 60:
                _log(f"{pct}% after {int(now - started) // 60}m{int(now - started) % 60:02d}s")
                last_pct, last_time = max(pct, last_pct), now
    if proc.returncode != 0:
        print("\n".join(tail), file=sys.stderr)
        raise SystemExit(f"build failed ({' '.join(cmd)}: exit {proc.returncode})")
    _log(f"built in {int(time.monotonic() - started) // 60}m{int(time.monotonic() - started) % 60:02d}s")


def build_probe(src: Path, b: Path) -> None:
    """gemma-fit's own measuring tool (tools/llama_mem_probe.cpp), linked against the build; stamped with
    probe_stamp() so that a changed source is rebuilt."""
    _log(f"compiling {PROBE}")
    stamp = probe_stamp()
    tmp = b / f".{PROBE}.{os.getpid()}"
    subprocess.run(
        ["c++", *PROBE_FLAGS, "-I", str(src / "include"), "-I", str(src / "ggml" / "include"),
         "-I", str(src / "src"), str(PROBE_SOURCE), "-L", str(b), "-lllama", "-lggml", "-lggml-base",
         "-Wl,-rpath,$ORIGIN", "-o", str(tmp)],
        check=True,
    )
    os.replace(tmp, b / PROBE)  # never a half-written binary under the probe's name
    (b / f".{PROBE}.sha256.{os.getpid()}").write_text(stamp + "\n")
    os.replace(b / f".{PROBE}.sha256.{os.getpid()}", b / f"{PROBE}.sha256")


if __name__ == "__main__":
    print(build())
