"""Work done once per test session and shared by the tests and by pytest-xdist's workers.

Zero-weight GGUF files (writing one takes a second or more: the gguf package packs the 256k-token
vocabulary one value at a time) and the answers of slow llama.cpp runs are made once, in a folder
of the session's temporary base that all workers of the session see, under a file lock: the first
worker to need one makes it, the others wait for it and read it. Nothing is kept across sessions, so
nothing can be stale. Tests treat these files as read-only: one that changes a file makes its own.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFReader


def cores_per_worker() -> int:
    """The cores one test process has to itself: all of them without xdist, one each when xdist runs a worker
    per core. llama.cpp's threads wait for each other spinning, so a run with more threads than free cores
    is many times slower (seconds per token on a busy two-core machine instead of tens of milliseconds)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, cores // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))


def shared_dir(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """<session temp base>/<name>: under xdist the base all workers' own bases are made in."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    folder = base / name
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive lock on `path` (a lock file, made if missing), held for the block."""
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def once(done: Path, make: Callable[[], None]) -> Path:
    """Run `make` unless `done` exists; `make` must create `done` last (a worker that finds it trusts it).
    Workers of one session take turns on done's lock, so `make` runs once per session."""
    if not done.exists():
        with locked(done.with_name(done.name + ".lock")):
            if not done.exists():
                make()
                if not done.exists():
                    raise AssertionError(f"{done} was not made")
    return done


@dataclass(frozen=True)
class Synth:
    """A zero-weight file and what write_synthetic_gguf returned for it (its size in bytes)."""

    path: Path
    size: int


class SynthFiles:
    """synth(model, quant): the zero-weight file of build_plan(resolve_model(model).spec, quant), written once
    per session with write_synthetic_gguf, as <model>-<quant>.gguf (the name a GGUF's model id comes from)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._known: dict[tuple[str, str], Synth] = {}

    def __call__(self, model: str, quant: str) -> Synth:
        key = (model, quant)
        if key not in self._known:
            path = self.folder / f"{model}-{quant}.gguf"
            size_file = self.folder / f"{model}-{quant}.size"

            def write() -> None:
                from gemma_fit.gguf.tensors import build_plan
                from gemma_fit.gguf.writer import write_synthetic_gguf
                from gemma_fit.model.catalog import resolve_model

                size = write_synthetic_gguf(build_plan(resolve_model(model).spec, quant), path)
                path.chmod(0o444)  # shared: read-only (for a test not run as root)
                tmp = size_file.with_name(size_file.name + f".{os.getpid()}")
                tmp.write_text(str(size))
                tmp.replace(size_file)

            once(size_file, write)
            self._known[key] = Synth(path, int(size_file.read_text()))
        return self._known[key]


class PlainGGUFReader(GGUFReader):
    """gguf.GGUFReader, unchanged, over the same mapped bytes viewed as a plain numpy array instead of a
    numpy.memmap: the reader slices the array once or more per value, and memmap's Python-level __getitem__ and
    __array_finalize__ took two thirds of its time on a 256k-token vocabulary (13 s of CPU a file, now 4 s).
    Every value is parsed by the gguf package's own code from the same bytes."""

    @property  # type: ignore[override]
    def data(self) -> np.ndarray:
        return self._plain_data

    @data.setter
    def data(self, value: np.ndarray) -> None:
        self._plain_data = value.view(np.ndarray)
