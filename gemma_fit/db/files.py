"""Where the built-in databases live, and reading YAML with clear errors, in bounded time and memory."""

from __future__ import annotations

import codecs
import os
import re
import stat
from pathlib import Path
from typing import Any

import yaml

from gemma_fit.base.errors import BadInput, DatabaseError

# libyaml's safe loader is ~10x faster than the pure-Python one: it keeps a cold `check` fast.
_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# Bounds for any YAML the tool reads. The largest file in hardware_db/ and model_db/ is under 50 KB
# with under 2,000 nodes; these are far above that and far below what could exhaust memory or time.
MAX_YAML_BYTES = 16 * 1024 * 1024
MAX_YAML_NODES = 1_000_000  # nodes after following aliases (a "billion laughs" file expands past it)
_MERGE_TAG = "tag:yaml.org,2002:merge"
# An alias (`*name`) follows a space, a flow indicator or the start of a line; files without one
# cannot expand, so the expansion count is skipped for them (the packaged databases have none).
_STAR_NAME = re.compile(r"\*[^\s\]},]")


def _may_have_alias(text: str) -> bool:
    """Cheap (a plain `in` first, then only around each `*`): a single regex with a look-behind
    alternative costs ~15 ms over the databases, more than all the rest of this check."""
    if "*" not in text:
        return False
    return any(m.start() == 0 or text[m.start() - 1] in " \t\r\n[{,-?:" for m in _STAR_NAME.finditer(text))


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


class _YAMLLimit(yaml.YAMLError):
    def __init__(self, problem: str, mark: Any = None) -> None:
        super().__init__(problem)
        self.problem = problem
        self.problem_mark = mark


def expanded_size(root: yaml.Node, limit: int) -> int:
    """How many nodes the document has once every alias is followed (a shared node counts each time
    it is used); _YAMLLimit past `limit` or on an alias that refers to itself. Iterative: no recursion."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            open_nodes.discard(key)
            total = 1
            if isinstance(node, yaml.SequenceNode):
                total += sum(sizes[id(c)] for c in node.value)
            elif isinstance(node, yaml.MappingNode):
                total += sum(sizes[id(k)] + sizes[id(v)] for k, v in node.value)
            if total > limit:
                raise _YAMLLimit(f"more than {limit:,} values (each use of a YAML alias counts again)",
                                 node.start_mark)
            sizes[key] = total
            continue
        if key in sizes:
            continue
        if key in open_nodes:
            raise _YAMLLimit("a YAML alias refers to a node that contains it (a recursive structure)",
                             node.start_mark)
        open_nodes.add(key)
        stack.append((node, True))
        if isinstance(node, yaml.SequenceNode):
            stack.extend((c, False) for c in node.value)
        elif isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                stack.extend(((k, False), (v, False)))
    return sizes[id(root)]


class UniqueKeyLoader(_LOADER):  # type: ignore[valid-type,misc]
    """The safe loader, refusing a mapping that repeats a key (PyYAML silently keeps the last one)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            seen: set[Any] = set()
            for key_node, _ in node.value:
                if key_node.tag == _MERGE_TAG:
                    continue  # `<<: *base` merges: keys given beside it override, as YAML says
                key = self.construct_object(key_node, deep=deep)
                try:
                    duplicate = key in seen
                    seen.add(key)
                except TypeError:
                    continue  # an unhashable key: the base constructor reports it
                if duplicate:
                    raise _YAMLLimit(f"duplicate key '{key}' (a key may appear once in a mapping)",
                                     key_node.start_mark)
        return super().construct_mapping(node, deep=deep)  # type: ignore[no-any-return]


def parse_yaml(text: str, path: Path, *, unique_keys: bool = False,
               max_nodes: int = MAX_YAML_NODES) -> tuple[Any, yaml.Node | None]:
    """The data of one YAML document and its node tree (for line numbers); DatabaseError naming the
    file and line on malformed YAML, a repeated key (with `unique_keys`) or an alias bomb."""
    loader = (UniqueKeyLoader if unique_keys else _LOADER)(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return None, None
        if unique_keys or _may_have_alias(text):
            expanded_size(root, max_nodes)
        return loader.construct_document(root), root
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{shown(path)}:{mark.line + 1}" if mark else shown(path)
        problem = getattr(exc, "problem", None) or (str(exc).splitlines() or [type(exc).__name__])[0]
        context = getattr(exc, "context", None)
        if context and problem.startswith("but "):  # "expected a single document in the stream, but found ..."
            problem = f"{context}, {problem}"
        raise DatabaseError(f"{where}: malformed YAML: {problem}") from None
    except (ValueError, OverflowError, RecursionError) as exc:  # e.g. a date 2001-02-30, a 5,000-digit int
        text_of = str(exc).split(";")[0].splitlines()[0] if str(exc) else type(exc).__name__
        raise DatabaseError(f"{shown(path)}: malformed YAML: a value cannot be read ({text_of})") from None
    finally:
        loader.dispose()


def read_yaml(path: Path, max_bytes: int = MAX_YAML_BYTES, *, unique_keys: bool = False,
              max_nodes: int = MAX_YAML_NODES) -> Any:
    """One YAML file's data. At most `max_bytes` are read (a FIFO, device or directory is refused
    without blocking); the text must be UTF-8; `unique_keys` refuses repeated keys (for files people
    write by hand; the packaged databases skip that check to keep a cold start fast)."""
    return parse_yaml(read_text(path, max_bytes), path, unique_keys=unique_keys, max_nodes=max_nodes)[0]


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
