"""Bounded sequential reads of one GGUF file's header: scalars, strings, arrays and the KV pairs.

Every count and length is checked against its limit (gemma_fit.gguf.limits) and against the bytes
left in the file before anything is read or allocated for it, and no read goes past the header
budget. Every problem is a one-line `BadInput("<file>: <what is wrong>")` with the file's strings
escaped by base.text.printable. The tensor infos, the file and the split model are read by
gemma_fit.gguf.reader on top of this.
"""

from __future__ import annotations

import struct
from typing import Any, BinaryIO

from gemma_fit.base.errors import BadInput
from gemma_fit.base.text import printable
from gemma_fit.gguf import limits
from gemma_fit.gguf.limits import Budget
from gemma_fit.gguf.value_types import SCALAR_FORMATS, GGUFValueType, type_name

_CHUNK = 1 << 20  # read-ahead: no header read goes more than this past what it needs

_BOOL, _STRING, _ARRAY = GGUFValueType.BOOL, GGUFValueType.STRING, GGUFValueType.ARRAY


def quote(s: str) -> str:
    """A string from the file (key, tensor name) as it appears in a message: quoted, escaped, short."""
    return f"'{printable(s, 80)}'"


def bad_input(label: str, what: str) -> BadInput:
    """`<file>: <what>` on one line with every control character escaped."""
    return BadInput(printable(f"{label}: {what}", 5000))


class Reader:
    """Buffered sequential reads of one file's header, with every bound checked."""

    def __init__(self, f: BinaryIO, label: str, file_bytes: int, budget: Budget | None = None) -> None:
        self.f = f
        self.label = label
        self.file_bytes = file_bytes
        self.budget = budget or Budget()
        self.max_header = self.budget.header_bytes  # this file's share of the header budget
        self.buf = b""
        self.base = 0  # file offset of buf[0]
        self.pos = 0  # index into buf

    def fail(self, what: str) -> BadInput:
        return bad_input(self.label, what)

    @property
    def tell(self) -> int:
        return self.base + self.pos

    @property
    def remaining(self) -> int:
        return self.file_bytes - self.tell

    def _fill(self, n: int, what: str) -> None:
        """Make buf hold at least n bytes from pos."""
        if self.tell + n > self.file_bytes:
            raise self.fail(f"truncated: {what} at byte {self.tell} needs {n} bytes, the file has "
                            f"{self.remaining} left")
        if self.tell + n > self.max_header:
            raise self.fail(f"header larger than {limits.MAX_HEADER_BYTES / (1024 * 1024):g} MiB at {what} "
                            "(not a plausible GGUF; a split model counts all its shards)")
        have = len(self.buf) - self.pos
        want = max(n - have, min(_CHUNK, self.file_bytes - self.base - len(self.buf), self.max_header - self.tell))
        self.f.seek(self.base + len(self.buf))
        more = self.f.read(want)
        if len(more) < n - have:
            raise self.fail(f"truncated: {what} at byte {self.tell} (file shrank while reading?)")
        self.buf = self.buf[self.pos:] + more
        self.base += self.pos
        self.pos = 0

    def take(self, n: int, what: str) -> bytes:
        if self.pos + n > len(self.buf):
            self._fill(n, what)
        out = self.buf[self.pos:self.pos + n]
        self.pos += n
        return out

    def scalar(self, fmt: str, size: int, what: str) -> Any:
        if self.pos + size > len(self.buf):
            self._fill(size, what)
        v = struct.unpack_from("<" + fmt, self.buf, self.pos)[0]
        self.pos += size
        return v

    def u32(self, what: str) -> int:
        return self.scalar("I", 4, what)

    def i32(self, what: str) -> int:
        return self.scalar("i", 4, what)

    def u64(self, what: str) -> int:
        return self.scalar("Q", 8, what)

    def i64(self, what: str) -> int:
        return self.scalar("q", 8, what)

    def string_bytes(self, what: str, limit: int | None = None) -> bytes:
        limit = limits.MAX_STRING_BYTES if limit is None else limit
        n = self.u64(f"{what} length")
        if n > limit:
            raise self.fail(f"{what} is {n} bytes long (limit {limit})")
        return self.take(n, what)

    def name(self, what: str, limit: int | None = None) -> str:
        raw = self.string_bytes(what, limit)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"{what} is not valid UTF-8: {raw[:40]!r}") from None

    def count_elements(self, n: int, what: str) -> None:
        if n > limits.MAX_ARRAY_LEN:
            raise self.fail(f"{what} has an array of {n} elements (limit {limits.MAX_ARRAY_LEN})")
        if n > self.budget.array_elements:
            raise self.fail(f"{what}: the header's arrays hold more than {limits.MAX_ARRAY_ELEMENTS} elements in all")
        self.budget.array_elements -= n

    def string_array(self, n: int, what: str) -> tuple[str, ...]:
        out: list[str] = []
        append = out.append
        unpack_from = struct.Struct("<Q").unpack_from
        max_bytes = limits.MAX_STRING_BYTES
        i = 0
        while i < n:
            if self.pos + 8 > len(self.buf):
                self._fill(8, f"{what}[{i}] length")
            buf, pos = self.buf, self.pos
            size = unpack_from(buf, pos)[0]
            if size == 0:
                # a run of empty strings (e.g. a zero-filled region): take it in one step
                end = min(len(buf), pos + 8 * (n - i), pos + 65536)
                run = end - pos - len(buf[pos:end].lstrip(b"\0"))
                k = max(1, run // 8)
                out.extend([""] * k)
                self.pos = pos + 8 * k
                i += k
                continue
            if size > max_bytes:
                raise self.fail(f"{what}[{i}] is {size} bytes long (limit {max_bytes})")
            if pos + 8 + size > len(buf):
                self.pos = pos + 8
                raw = self.take(size, f"{what}[{i}]")
            else:
                raw = buf[pos + 8:pos + 8 + size]
                self.pos = pos + 8 + size
            append(raw.decode("utf-8", errors="replace"))
            i += 1
        return tuple(out)

    def value(self, vtype: int, what: str, depth: int = 0) -> Any:
        if vtype in SCALAR_FORMATS:
            fmt, size = SCALAR_FORMATS[vtype]
            v = self.scalar(fmt, size, what)
            return bool(v) if vtype == _BOOL else v
        if vtype == _STRING:
            return self.string_bytes(what).decode("utf-8", errors="replace")
        if vtype == _ARRAY:
            return self.array(what, depth + 1)[1]
        raise self.fail(f"{what} has unknown GGUF value type {vtype}")

    def array(self, what: str, depth: int) -> tuple[int, tuple[Any, ...]]:
        """(element type, elements)."""
        if depth > limits.MAX_ARRAY_DEPTH:
            raise self.fail(f"{what}: arrays nested more than {limits.MAX_ARRAY_DEPTH} deep")
        sub = self.u32(f"{what} element type")
        n = self.u64(f"{what} array length")
        self.count_elements(n, what)
        if sub in SCALAR_FORMATS:
            fmt, size = SCALAR_FORMATS[sub]
            if n * size > self.remaining:
                raise self.fail(f"truncated: {what} claims {n} elements of {size} bytes, the file has "
                                f"{self.remaining} bytes left")
            values = struct.unpack(f"<{n}{fmt}", self.take(n * size, what))
            return sub, tuple(v != 0 for v in values) if sub == _BOOL else values
        min_size = 8 if sub == _STRING else 12 if sub == _ARRAY else 0
        if min_size == 0:
            raise self.fail(f"{what} has arrays of unknown GGUF value type {sub}")
        if n * min_size > self.remaining:
            raise self.fail(f"truncated: {what} claims {n} elements, the file has {self.remaining} bytes left")
        if sub == _STRING:
            return sub, self.string_array(n, what)
        return sub, tuple(self.array(f"{what}[{i}]", depth + 1)[1] for i in range(n))


def read_kv(r: Reader, n_kv: int) -> tuple[dict[str, Any], dict[str, str]]:
    """The KV pairs: key -> value (arrays are tuples), and key -> value type name ("ARRAY[STRING]")."""
    metadata: dict[str, Any] = {}
    types: dict[str, str] = {}
    for i in range(n_kv):
        key = r.name(f"key {i}", limits.MAX_KEY_BYTES)
        if not key:
            raise r.fail(f"key {i} is empty")
        if key in metadata:
            raise r.fail(f"duplicate key {quote(key)}")
        vtype = r.u32(f"value type of {quote(key)}")
        if vtype == _ARRAY:
            sub, metadata[key] = r.array(quote(key), 1)
            types[key] = f"ARRAY[{type_name(sub)}]"
        else:
            metadata[key] = r.value(vtype, quote(key))
            types[key] = type_name(vtype)
    return metadata, types
