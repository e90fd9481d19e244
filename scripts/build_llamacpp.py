#!/usr/bin/env python3
"""Build llama.cpp (CPU) once into a cache folder outside the repo and print its bin/ folder.

The source is the llama.cpp tree vendored in the llama-cpp-python sdist on PyPI (the version whose
rules gemma-fit follows). Nothing of it is copied into the repo. Reused when already built.

    python scripts/build_llamacpp.py          # prints e.g. ~/.cache/gemma-fit/llama.cpp-0.3.36/build/bin
Environment: GEMMA_FIT_CACHE (default ~/.cache/gemma-fit).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

SDIST_VERSION = "0.3.36"
TARGETS = ("llama-quantize", "llama-completion", "llama-fit-params", "llama-bench")


def cache_root() -> Path:
    return Path(os.environ.get("GEMMA_FIT_CACHE", Path.home() / ".cache" / "gemma-fit"))


def bin_dir() -> Path:
    return cache_root() / f"llama.cpp-{SDIST_VERSION}" / "build" / "bin"


PROBE_SOURCE = Path(__file__).resolve().parent.parent / "tools" / "llama_mem_probe.cpp"


def _have_all(b: Path) -> bool:
    return all((b / t).is_file() for t in (*TARGETS, "llama-mem-probe"))


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
            [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
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
    _log(f"building {', '.join(TARGETS)} with {jobs} jobs (several minutes on two cores)")
    subprocess.run(["cmake", "--build", str(build_dir), "-j", jobs, "--target", *TARGETS], check=True,
                   stdout=subprocess.DEVNULL)
    build_probe(src, b)
    if not _have_all(b):
        raise SystemExit(f"build finished but binaries are missing in {b}")
    return b


def build_probe(src: Path, b: Path) -> None:
    """gemma-fit's own measuring tool (tools/llama_mem_probe.cpp), linked against the build."""
    _log("compiling llama-mem-probe")
    subprocess.run(
        ["c++", "-O1", "-std=c++17", "-I", str(src / "include"), "-I", str(src / "ggml" / "include"),
         "-I", str(src / "src"), str(PROBE_SOURCE), "-L", str(b), "-lllama", "-lggml", "-lggml-base",
         "-Wl,-rpath,$ORIGIN", "-o", str(b / "llama-mem-probe")],
        check=True,
    )


if __name__ == "__main__":
    print(build())
