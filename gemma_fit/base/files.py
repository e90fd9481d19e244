"""Writing files the user names (--html, synth): never replacing what is not a regular file.

A regular file is written atomically: a temporary file in the same folder, renamed over it, so a
failure leaves the old file. Renaming over /dev/null or a pipe (`--html >(cat)`) would replace the
device with a regular file, as root for every program on the machine: those are written in place.
A symlink keeps pointing where it did; its target is written. A file this process read as input (a machine,
cluster, prices, database, config or GGUF file: `note_input`) is never written over: `--html machine.yaml` would
replace the user's machine file with a page.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from gemma_fit.base.errors import BadInput

_INPUTS: set[tuple[int, int]] = set()  # (device, inode) of each file read as input


def note_input(st: os.stat_result) -> None:
    """Remember a file read as input (by its status, taken from the open file): write_text refuses it."""
    _INPUTS.add((st.st_dev, st.st_ino))


def refuse_input(path: Path) -> None:
    try:
        st = os.stat(path)
    except OSError:
        return  # nothing there yet (or unreadable): not one of the inputs
    if (st.st_dev, st.st_ino) in _INPUTS:
        from gemma_fit.base.text import printable

        raise BadInput(f"will not write {printable(str(path), 120)}: this command read it as input; "
                       "give another file name")


def new_file_mode(path: Path) -> int:
    """The mode a file written by rename should get: an existing file keeps its own, a new one gets the
    umask's (as open() would give it), not mkstemp's 0600."""
    if path.exists():
        return path.stat().st_mode & 0o7777
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def _write_in_place(path: Path, text: str) -> None:
    """Write to a device or pipe where it is: a pipe nobody reads is refused at once (O_NONBLOCK opens it only
    when a reader waits, as `>(cat)` does), instead of blocking for ever; the write itself then blocks as usual."""
    import errno
    import fcntl
    import stat as stat_

    flags = os.O_WRONLY | (os.O_NONBLOCK if stat_.S_ISFIFO(os.stat(path).st_mode) else 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a FIFO without a reader
            raise OSError(exc.errno, "a named pipe that nothing reads") from None
        raise
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)


def output_target(path: Path) -> Path | None:
    """The regular file an output path writes (a link's target), or None for something that exists and is written in
    place (a device, a pipe); BadInput for a folder, a file read as input, a name past the system's limit, a loop.
    Asked before any work (a report of minutes should not fail at its last step), and by write_text."""
    refuse_input(path)
    try:
        if path.is_dir():
            raise IsADirectoryError(21, "is a directory")
        if path.exists() and not path.is_file():
            return None
        return path.resolve(strict=True) if path.is_symlink() else path
    except (OSError, RuntimeError) as exc:  # RuntimeError: a link loop (Python before 3.13)
        from gemma_fit.base.text import printable

        reason = "a symbolic link loop" if isinstance(exc, RuntimeError) else exc.strerror or str(exc)
        raise BadInput(f"cannot write {printable(str(path), 120)}: {reason}") from None


def write_text(path: Path, text: str) -> None:
    """Write a regular file atomically (a temporary file in the same folder, then os.replace), through
    a symlink to its target; anything else that exists (/dev/null, a pipe such as /dev/fd/63 from
    `--html >(cat)`) is written in place, never replaced. A file read as input is refused. BadInput on any
    failure."""
    path = Path(path)
    target = output_target(path)
    if target is None:
        _write_in_place(path, text)
        return
    path = target
    folder = path.parent if str(path.parent) else Path(".")
    tmp: str | None = None
    try:
        import tempfile  # only when writing: a check that writes nothing never loads it

        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
        os.chmod(tmp, new_file_mode(path))
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        from gemma_fit.base.text import printable

        raise BadInput(f"cannot write {printable(str(path), 120)}: {exc.strerror or exc}") from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)

