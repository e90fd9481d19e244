"""Compiled code kept between runs: the `__init__` of each record (base.record) is generated source, and compiling
it took 5-8 ms of a cold `check` (49 functions); Python's own .pyc files keep only modules' code.

The code objects are stored with `marshal` (as .pyc files store theirs) in one file of the cache folder
(`$GEMMA_FIT_CACHE` or ~/.cache/gemma-fit), keyed by the exact source and file name, and per Python version (marshal's
format and bytecode change between versions). The file is read once per process, at the first compile, and written
at exit only when something new was compiled. A file that cannot be read or written is simply not used: the code is
compiled as before.
"""

from __future__ import annotations

import contextlib
import marshal
import os
import sys
from types import CodeType

from gemma_fit.base.cache import cache_root

MAX_ENTRIES = 4096  # past this (sources of many versions), the file keeps only what this process used

_codes: dict[str, CodeType] | None = None
_used: set[str] = set()
_added = False


def _path() -> str:
    return os.path.join(str(cache_root()), f"record-code-{sys.implementation.cache_tag}.marshal")


def _read() -> dict[str, CodeType]:
    try:
        with open(_path(), "rb") as f:
            stored = marshal.load(f)
    except Exception:  # absent, truncated, another format: compile as if there were none
        return {}
    if not isinstance(stored, dict):
        return {}
    return {k: v for k, v in stored.items() if isinstance(k, str) and isinstance(v, CodeType)}


def _write() -> None:
    if not _added or _codes is None:
        return
    keep = _codes if len(_codes) <= MAX_ENTRIES else {k: v for k, v in _codes.items() if k in _used}
    path = _path()
    with contextlib.suppress(OSError):  # a read-only home: the next run compiles again, nothing breaks
        os.makedirs(os.path.dirname(path), exist_ok=True)
        import tempfile

        fd, tmp = tempfile.mkstemp(prefix=".record-code.", dir=os.path.dirname(path))
        try:
            with os.fdopen(fd, "wb") as f:
                marshal.dump(keep, f)
            os.replace(tmp, path)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def compiled(source: str, filename: str) -> CodeType:
    """`compile(source, filename, "exec")`, from the cache when an earlier run compiled the same."""
    global _codes, _added
    if _codes is None:
        _codes = _read()
        import atexit

        atexit.register(_write)
    key = f"{filename}\n{source}"
    _used.add(key)
    code = _codes.get(key)
    if code is None:
        code = compile(source, filename, "exec")
        _codes[key] = code
        _added = True
    return code
