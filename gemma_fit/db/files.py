"""Where the built-in databases live, and reading a user's file in bounded time and memory (a regular file, its
size, its encoding). YAML itself is db.yaml_files': a cold `check` reads snapshots and never imports yaml."""

from __future__ import annotations

import codecs
import os
import stat
from pathlib import Path

from gemma_fit.base.errors import BadInput, DatabaseError
from gemma_fit.base.files import note_input

# Bounds for any YAML the tool reads. The largest file in hardware_db/ and model_db/ is under 50 KB
# with under 2,000 nodes; these are far above that and far below what could exhaust memory or time.
MAX_YAML_BYTES = 16 * 1024 * 1024
MAX_YAML_NODES = 1_000_000  # nodes after following aliases (a "billion laughs" file expands past it)


def packaged_dir(name: str) -> Path:
    """The built-in database folder (`model_db` or `hardware_db`).

    An installed wheel ships it as data under gemma_fit/_data/<name>; a source checkout (and an
    editable install) reads the top-level folder of the repo.
    """
    here = Path(__file__).resolve().parent.parent  # the gemma_fit package
    installed = here / "_data" / name
    if installed.is_dir():
        return installed
    return here.parent / name


def shown(path: Path | str) -> str:
    """A path as an error message shows it: on one line, control characters escaped."""
    text = str(path)
    return ascii(text)[1:-1] if any(ord(c) < 32 or ord(c) == 127 for c in text) else text


def _file_kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def read_bytes(path: Path, max_bytes: int) -> bytes:
    """A regular file's bytes, at most `max_bytes`; never blocks on a FIFO or device, never reads
    past the cap (`/dev/zero`, `/dev/urandom`, a FIFO and a directory are refused before reading)."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)  # O_NONBLOCK: opening a FIFO returns at once instead of waiting for a writer
    except OSError as exc:
        raise DatabaseError(f"{shown(path)}: cannot read: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise DatabaseError(f"{shown(path)}: cannot read: {_file_kind(st.st_mode)}, not a regular file")
        note_input(st)
        if st.st_size > max_bytes:
            raise DatabaseError(f"{shown(path)}: too large ({st.st_size:,} bytes; at most {max_bytes:,})")
        chunks: list[bytes] = []
        total = 0
        while total <= max_bytes:  # st_size can lie (/proc files, a file still growing): cap the reads too
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > max_bytes:
            raise DatabaseError(f"{shown(path)}: too large (more than {max_bytes:,} bytes)")
        return b"".join(chunks)
    except OSError as exc:
        raise DatabaseError(f"{shown(path)}: cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def decode_text(raw: bytes, path: Path) -> str:
    """UTF-8 text (a UTF-8 byte-order mark is dropped); anything else is one clear error."""
    if raw.startswith((codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)):  # before UTF-16: UTF-32 LE starts like it
        raise DatabaseError(f"{shown(path)}: the file is UTF-32 text; save it as UTF-8")
    if raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        raise DatabaseError(f"{shown(path)}: the file is UTF-16 text; save it as UTF-8")
    nul = raw.find(b"\x00")
    if nul >= 0:
        line = raw.count(b"\n", 0, nul) + 1
        raise DatabaseError(f"{shown(path)}:{line}: not a text file (a NUL byte at offset {nul}: binary data, "
                            "or UTF-16/32 without a byte-order mark); give a UTF-8 YAML file")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise DatabaseError(f"{shown(path)}:{line}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset "
                            f"{exc.start}); save the file as UTF-8") from None


def read_text(path: Path, max_bytes: int = MAX_YAML_BYTES) -> str:
    return decode_text(read_bytes(path, max_bytes), path)


MAX_DB_FILES = 10_000  # YAML files in one database folder: more is a wrong folder (/, /proc), not a database


def yaml_files_under(folder: Path, recursive: bool = True) -> list[Path]:
    """The regular *.yaml files in `folder` (and below it), sorted: links to folders are not followed (a loop),
    a file that vanishes while the folder is read (/proc) is skipped, and a *.yaml that is not a regular file (a
    FIFO, a device) or more than MAX_DB_FILES files are refused."""
    found: list[Path] = []
    for root, dirs, files in os.walk(folder, followlinks=False):
        if not recursive:
            dirs.clear()
        for name in files:
            if not name.endswith(".yaml"):
                continue
            path = Path(root, name)
            try:
                regular = stat.S_ISREG(os.stat(path).st_mode)
            except (OSError, ValueError):
                continue
            if not regular:  # a FIFO would block a read, a device never end: refused, as machine files are
                raise BadInput(f"{shown(path)} is not a regular file: a database folder holds YAML files only")
            found.append(path)
            if len(found) > MAX_DB_FILES:
                raise BadInput(f"{shown(folder)} holds more than {MAX_DB_FILES:,} YAML files: not a database folder")
    return sorted(found)


def stat_path(path: Path) -> os.stat_result | None:
    """The path's status (links followed), or None when nothing is there. Never opens the file."""
    try:
        return os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except ValueError:  # an embedded NUL byte: no such file
        return None
    except OSError as exc:
        raise BadInput(f"cannot read {shown(path)}: {exc.strerror or exc}") from None
