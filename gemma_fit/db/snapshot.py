"""Validated databases kept as snapshots of plain frozen data, so a cold run does not validate again.

A cold `check` needs a model's spec, a GPU's spec, a few PCIe rates and the llama.cpp rule tables.
Reading and validating the YAML (and building the pydantic schema that validates it) cost more than
the whole estimate, so the first run stores what each stage derived (model.catalog's cards,
hardware.snapshot's specs, db.rules' tables) in the cache folder (`$GEMMA_FIT_CACHE` or
~/.cache/gemma-fit) and later runs load those pickles instead. A snapshot is keyed by the size and
modification time of every database file and every module of this package, so any edit to either
rebuilds it; a cache that cannot be read or written is simply not used. The validated databases stay
the one source: a snapshot only keeps what they give.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import sys
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any, TypeVar, cast

from gemma_fit.base.cache import cache_root
from gemma_fit.base.version import __version__
from gemma_fit.db.files import packaged_dir

try:  # BLAKE2 without hashlib, whose OpenSSL load is ~3 ms of a cold `check`
    from _blake2 import blake2b
except ImportError:  # a Python built without it
    from hashlib import blake2b

_FORMAT = 2  # bump when the shape of what is stored changes
T = TypeVar("T")


def _files(root: str, suffix: str) -> list[tuple[str, int, int]]:
    """Every file under `root` ending in `suffix`: its path, size and mtime (os.scandir: a cold start walks
    some 300 files, and Path.rglob took several times as long)."""
    out: list[tuple[str, int, int]] = []
    with os.scandir(root) as entries:
        for e in entries:
            if e.is_dir(follow_symlinks=False):
                out.extend(_files(e.path, suffix))
            elif e.name.endswith(suffix):
                st = e.stat()
                out.append((e.path, st.st_size, st.st_mtime_ns))
    return sorted(out)


def source_key() -> str:
    """A digest of the package version, Python, and every database file and module's size and mtime."""
    digest = blake2b(f"{_FORMAT} {__version__} {sys.version}".encode())
    package = str(Path(__file__).resolve().parent.parent)
    files = [f for name in ("model_db", "hardware_db") for f in _files(str(packaged_dir(name)), ".yaml")]
    for path, size, mtime in files + _files(package, ".py"):
        digest.update(f"{path} {size} {mtime}\n".encode())
    return digest.hexdigest()


def cache_file(name: str) -> Path:
    """The snapshot's file: one per installed copy of the package (two virtual environments, or a checkout beside
    an install, would otherwise overwrite each other's snapshot on every run)."""
    where = blake2b(str(Path(__file__).resolve().parent.parent).encode()).hexdigest()[:12]
    return cache_root() / f"{name}-{where}.pickle"


def load(path: Path, key: str, kind: type[T]) -> T | None:
    try:
        with path.open("rb") as f:
            stored_key, value = pickle.load(f)  # noqa: S301 - our own file in the user's cache folder
    except Exception:  # absent, unreadable, truncated, from another version: rebuild
        return None
    return value if stored_key == key and isinstance(value, kind) else None


def store(path: Path, key: str, value: object) -> None:
    with contextlib.suppress(OSError):  # a read-only home: every run validates, nothing breaks
        path.parent.mkdir(parents=True, exist_ok=True)
        import tempfile  # only when a snapshot is written: a cold run that reads one never loads it

        fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                pickle.dump((key, value), f, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, path)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


@cache
def _key_once() -> str:
    return source_key()


_memo: dict[str, Any] = {}


def snapshot(name: str, kind: type[T], build: Callable[[], T]) -> T:
    """The snapshot called `name`: from the cache when its key matches, else built and stored."""
    if name in _memo:
        return cast(T, _memo[name])
    key = _key_once()
    path = cache_file(name)
    value = load(path, key, kind)
    if value is None:
        value = build()
        store(path, key, value)
    _memo[name] = value
    return value
