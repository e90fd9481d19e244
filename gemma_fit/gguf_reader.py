"""A header-only GGUF reader: metadata and tensor infos, without touching the tensor data.

Written from the GGUF v2/v3 layout (little-endian): magic "GGUF", u32 version, u64 tensor count,
u64 KV count, the KV pairs (key string, u32 value type, value; arrays are u32 element type, u64
length, elements; strings are u64 length + UTF-8 bytes), the tensor infos (name string, u32 n_dims,
n_dims x i64 ne (ggml order, ne0 first), i32 ggml type, u64 offset into the data section), padding
to `general.alignment` (default 32), then the data section.

Only the header is read, with buffered reads, so a 60 GB file costs a few MiB of I/O. The checks
follow llama.cpp's own parser (ggml/src/gguf.cpp) plus limits that keep hostile input cheap: every
problem is a `BadInput("<file>: <what is wrong>")`, found within bounded time and memory.

Split models (`name-00001-of-00003.gguf`, keys split.no / split.count / split.tensors.count): given
the first shard, every shard's header is read and the tensors are merged, as llama.cpp's loader does.
"""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Any, BinaryIO

from .errors import BadInput
from .ggml import GGMLType, ggml_types

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
GGML_MAX_DIMS = 4
GGML_MAX_NAME = 64  # llama.cpp rejects tensor names of this length or longer

# Limits on hostile input (far above any real file: a 262k-token vocabulary is ~6 MB of header).
MAX_TENSORS = 1_000_000
MAX_KV = 100_000
MAX_ARRAY_LEN = 50_000_000
MAX_STRING_BYTES = 100_000_000
MAX_HEADER_BYTES = 256 * 1024 * 1024
MAX_ARRAY_DEPTH = 8
_INT64_MAX = 2**63 - 1

_CHUNK = 1 << 20

# GGUF value types: id -> (name, struct format, size) for the fixed-size ones.
_UINT8, _INT8, _UINT16, _INT16, _UINT32, _INT32, _FLOAT32, _BOOL, _STRING, _ARRAY, _UINT64, _INT64, _FLOAT64 = range(13)
_SCALARS: dict[int, tuple[str, int]] = {
    _UINT8: ("B", 1), _INT8: ("b", 1), _UINT16: ("H", 2), _INT16: ("h", 2), _UINT32: ("I", 4),
    _INT32: ("i", 4), _FLOAT32: ("f", 4), _BOOL: ("B", 1), _UINT64: ("Q", 8), _INT64: ("q", 8),
    _FLOAT64: ("d", 8),
}
VALUE_TYPE_NAMES = (
    "UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "FLOAT32", "BOOL", "STRING", "ARRAY", "UINT64", "INT64",
    "FLOAT64",
)

_SPLIT_NAME = re.compile(r"^(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")


@dataclass(frozen=True)
class GGUFTensorInfo:
    name: str
    shape: tuple[int, ...]  # ggml order, ne0 (the row length) first
    ggml_type: GGMLType
    offset: int  # from the start of its shard's data section
    n_bytes: int
    shard: int = 0  # index into GGUFHeader.shards

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass(frozen=True)
class GGUFShard:
    path: Path
    version: int
    data_offset: int  # where the data section starts in this file
    file_bytes: int
    n_tensors: int
    tensor_data_bytes: int  # the data section as the tensor infos lay it out (padded)


@dataclass(frozen=True)
class GGUFHeader:
    path: Path
    version: int
    metadata: Mapping[str, Any]  # the first shard's KV pairs; arrays are tuples
    tensors: tuple[GGUFTensorInfo, ...]  # in file order, shard after shard
    data_offset: int  # of the first shard
    file_bytes: int  # sum over shards
    shards: tuple[GGUFShard, ...]
    alignment: int = DEFAULT_ALIGNMENT
    # key -> GGUF value type name ("UINT32", "ARRAY[STRING]")
    metadata_types: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def __hash__(self) -> int:
        return hash((self.path, self.file_bytes, self.data_offset, self.tensors))

    @property
    def n_params(self) -> int:
        return sum(t.n_elements for t in self.tensors)

    @property
    def tensor_data_bytes(self) -> int:
        return sum(t.n_bytes for t in self.tensors)

    def tensor(self, name: str) -> GGUFTensorInfo | None:
        return self._by_name.get(name)

    @property
    def _by_name(self) -> dict[str, GGUFTensorInfo]:
        cached = self.__dict__.get("_by_name_cache")
        if cached is None:
            cached = {t.name: t for t in self.tensors}
            object.__setattr__(self, "_by_name_cache", cached)
        return cached


@cache
def _types_by_id() -> dict[int, GGMLType]:
    return {t.id: t for t in ggml_types().values()}


class _Reader:
    """Buffered sequential reads of one file's header, with every bound checked."""

    def __init__(self, f: BinaryIO, label: str, file_bytes: int) -> None:
        self.f = f
        self.label = label
        self.file_bytes = file_bytes
        self.buf = b""
        self.base = 0  # file offset of buf[0]
        self.pos = 0  # index into buf

    def fail(self, what: str) -> BadInput:
        return BadInput(f"{self.label}: {what}")

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
        if self.tell + n > MAX_HEADER_BYTES:
            raise self.fail(f"header larger than {MAX_HEADER_BYTES // (1024 * 1024)} MiB at {what} "
                            "(not a plausible GGUF)")
        have = len(self.buf) - self.pos
        want = max(n - have, min(_CHUNK, self.file_bytes - self.base - len(self.buf)))
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

    def string_bytes(self, what: str) -> bytes:
        n = self.u64(f"{what} length")
        if n > MAX_STRING_BYTES:
            raise self.fail(f"{what} is {n} bytes long (limit {MAX_STRING_BYTES})")
        return self.take(n, what)

    def name(self, what: str) -> str:
        raw = self.string_bytes(what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"{what} is not valid UTF-8: {raw[:40]!r}") from None

    def string_array(self, n: int, what: str) -> tuple[str, ...]:
        out: list[str] = []
        append = out.append
        unpack_from = struct.Struct("<Q").unpack_from
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
            if size > MAX_STRING_BYTES:
                raise self.fail(f"{what}[{i}] is {size} bytes long (limit {MAX_STRING_BYTES})")
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
        if vtype in _SCALARS:
            fmt, size = _SCALARS[vtype]
            v = self.scalar(fmt, size, what)
            return bool(v) if vtype == _BOOL else v
        if vtype == _STRING:
            return self.string_bytes(what).decode("utf-8", errors="replace")
        if vtype == _ARRAY:
            return self.array(what, depth + 1)[1]
        raise self.fail(f"{what} has unknown GGUF value type {vtype}")

    def array(self, what: str, depth: int) -> tuple[int, tuple[Any, ...]]:
        """(element type, elements)."""
        if depth > MAX_ARRAY_DEPTH:
            raise self.fail(f"{what}: arrays nested more than {MAX_ARRAY_DEPTH} deep")
        sub = self.u32(f"{what} element type")
        n = self.u64(f"{what} array length")
        if n > MAX_ARRAY_LEN:
            raise self.fail(f"{what} has an array of {n} elements (limit {MAX_ARRAY_LEN})")
        if sub in _SCALARS:
            fmt, size = _SCALARS[sub]
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


def _type_name(vtype: int) -> str:
    return VALUE_TYPE_NAMES[vtype] if 0 <= vtype < len(VALUE_TYPE_NAMES) else str(vtype)


def _read_kv(r: _Reader, n_kv: int) -> tuple[dict[str, Any], dict[str, str]]:
    metadata: dict[str, Any] = {}
    types: dict[str, str] = {}
    for i in range(n_kv):
        key = r.name(f"key {i}")
        if not key:
            raise r.fail(f"key {i} is empty")
        if key in metadata:
            raise r.fail(f"duplicate key '{key}'")
        vtype = r.u32(f"value type of '{key}'")
        if vtype == _ARRAY:
            sub, metadata[key] = r.array(f"'{key}'", 1)
            types[key] = f"ARRAY[{_type_name(sub)}]"
        else:
            metadata[key] = r.value(vtype, f"'{key}'")
            types[key] = _type_name(vtype)
    return metadata, types


def _read_tensor_infos(r: _Reader, n_tensors: int, shard: int) -> list[GGUFTensorInfo]:
    by_id = _types_by_id()
    infos: list[GGUFTensorInfo] = []
    seen: set[str] = set()
    for i in range(n_tensors):
        name = r.name(f"tensor {i} name")
        if len(name.encode("utf-8")) >= GGML_MAX_NAME:
            raise r.fail(f"tensor {i} name is too long ({len(name)} >= {GGML_MAX_NAME}): '{name[:80]}'")
        if name in seen:
            raise r.fail(f"duplicate tensor name '{name}'")
        seen.add(name)
        n_dims = r.u32(f"tensor '{name}' n_dims")
        if not 1 <= n_dims <= GGML_MAX_DIMS:
            raise r.fail(f"tensor '{name}' has {n_dims} dimensions (must be 1 to {GGML_MAX_DIMS})")
        shape = tuple(r.i64(f"tensor '{name}' dimension {j}") for j in range(n_dims))
        n_el = 1
        for d in shape:
            if d <= 0:
                raise r.fail(f"tensor '{name}' has a dimension of {d} (shape {list(shape)})")
            n_el *= d
        if n_el > _INT64_MAX:
            raise r.fail(f"tensor '{name}' shape {list(shape)} overflows int64")
        type_id = r.i32(f"tensor '{name}' type")
        gt = by_id.get(type_id)
        if gt is None:
            raise r.fail(f"tensor '{name}' has unknown ggml type id {type_id}")
        if shape[0] % gt.block:
            raise r.fail(f"tensor '{name}' row of {shape[0]} elements is not a multiple of the {gt.name} "
                         f"block ({gt.block})")
        offset = r.u64(f"tensor '{name}' offset")
        infos.append(GGUFTensorInfo(name, shape, gt, offset, gt.tensor_bytes(shape), shard))
    return infos


def _check_layout(r: _Reader, infos: list[GGUFTensorInfo], alignment: int, data_offset: int) -> int:
    """Offsets as llama.cpp requires them: in order, each tensor padded to the alignment, inside the file.
    Returns the size of the data section."""
    expected = 0
    for t in infos:
        if t.offset % alignment:
            raise r.fail(f"tensor '{t.name}' offset {t.offset} is not aligned to {alignment} bytes")
        if data_offset + t.offset + t.n_bytes > r.file_bytes:
            raise r.fail(f"tensor '{t.name}' data ({t.n_bytes} bytes at {data_offset + t.offset}) extends past the "
                         f"end of the file ({r.file_bytes} bytes): truncated?")
        if t.offset != expected:
            raise r.fail(f"tensor '{t.name}' has offset {t.offset}, expected {expected} (tensor data must follow "
                         f"in order, each padded to {alignment} bytes)")
        expected += (t.n_bytes + alignment - 1) // alignment * alignment
    return expected


def _version(r: _Reader) -> int:
    magic = r.take(4, "magic")
    if magic != GGUF_MAGIC:
        raise r.fail(f"not a GGUF file (magic {magic!r}, expected b'GGUF')")
    version = r.u32("version")
    if version not in SUPPORTED_VERSIONS:
        swapped = struct.unpack("<I", struct.pack(">I", version))[0]
        if swapped in SUPPORTED_VERSIONS:
            raise r.fail(f"big-endian GGUF (version {swapped}) is not supported")
        raise r.fail(f"unsupported GGUF version {version} (supported: {', '.join(map(str, SUPPORTED_VERSIONS))})")
    return version


@dataclass(frozen=True)
class _One:
    shard: GGUFShard
    metadata: dict[str, Any]
    types: dict[str, str]
    tensors: list[GGUFTensorInfo]
    alignment: int


def _read_one(path: Path, shard: int = 0) -> _One:
    label = str(path)
    try:
        with open(path, "rb") as f:
            file_bytes = os.fstat(f.fileno()).st_size
            r = _Reader(f, label, file_bytes)
            version = _version(r)
            n_tensors = r.u64("tensor count")
            n_kv = r.u64("KV count")
            if n_tensors > MAX_TENSORS:
                raise r.fail(f"tensor count {n_tensors} is absurd (limit {MAX_TENSORS})")
            if n_kv > MAX_KV:
                raise r.fail(f"KV count {n_kv} is absurd (limit {MAX_KV})")
            # each KV pair takes at least 13 bytes, each tensor info at least 32
            if n_kv * 13 + n_tensors * 32 > r.remaining:
                raise r.fail(f"truncated: {n_kv} KV pairs and {n_tensors} tensor infos cannot fit in the "
                             f"{r.remaining} bytes left")
            metadata, types = _read_kv(r, n_kv)
            alignment = DEFAULT_ALIGNMENT
            if "general.alignment" in metadata:
                alignment = metadata["general.alignment"]
                if types["general.alignment"] != "UINT32":
                    raise r.fail(f"general.alignment must be UINT32, not {types['general.alignment']}")
                if alignment == 0 or alignment & (alignment - 1):
                    raise r.fail(f"general.alignment {alignment} is not a power of 2")
            infos = _read_tensor_infos(r, n_tensors, shard)
            header_end = r.tell
    except OSError as exc:
        raise BadInput(f"{label}: cannot read: {exc.strerror or exc}") from None
    data_offset = (header_end + alignment - 1) // alignment * alignment if n_tensors else header_end
    if data_offset > file_bytes:
        raise r.fail(f"truncated: the data section would start at {data_offset}, past the end ({file_bytes} bytes)")
    data_bytes = _check_layout(r, infos, alignment, data_offset)
    info = GGUFShard(path, version, data_offset, file_bytes, n_tensors, data_bytes)
    return _One(info, metadata, types, infos, alignment)


def _int_key(one: _One, key: str, label: str) -> int | None:
    v = one.metadata.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise BadInput(f"{label}: {key} must be an integer, not {one.types.get(key)}")
    return v


def _read_split(first: _One, path: Path, n_split: int) -> list[_One]:
    m = _SPLIT_NAME.match(path.name)
    expected = f"-00001-of-{n_split:05d}.gguf"
    if m is None or int(m["no"]) != 1 or int(m["count"]) != n_split:
        raise BadInput(f"{path}: split.count is {n_split} but the name does not end in '{expected}'")
    shards = [first]
    for i in range(1, n_split):
        p = path.with_name(f"{m['prefix']}-{i + 1:05d}-of-{n_split:05d}.gguf")
        if not p.is_file():
            raise BadInput(f"{path}: shard {i + 1} of {n_split} is missing: {p}")
        one = _read_one(p, i)
        no = _int_key(one, "split.no", str(p))
        if no is None:
            raise BadInput(f"{p}: missing key split.no")
        if no != i:
            raise BadInput(f"{p}: split.no is {no}, expected {i}")
        count = _int_key(one, "split.count", str(p))
        if count is not None and count != n_split:
            raise BadInput(f"{p}: split.count is {count}, but the first shard says {n_split}")
        shards.append(one)
    return shards


def read_gguf_header(path: str | os.PathLike[str]) -> GGUFHeader:
    """Read a GGUF file's header (all shards' headers for a split model, given its first shard)."""
    path = Path(path)
    if path.is_dir():
        raise BadInput(f"{path}: is a folder, not a GGUF file")
    if not path.exists():
        raise BadInput(f"{path}: file not found")
    first = _read_one(path)
    label = str(path)
    n_split = _int_key(first, "split.count", label) or 1
    split_no = _int_key(first, "split.no", label) or 0
    if split_no != 0:
        raise BadInput(f"{path}: this is shard {split_no + 1} of {n_split} of a split model; pass the first shard "
                       f"(…-00001-of-{n_split:05d}.gguf)")
    ones = _read_split(first, path, n_split) if n_split > 1 else [first]
    tensors: list[GGUFTensorInfo] = []
    seen: set[str] = set()
    for one in ones:
        for t in one.tensors:
            if t.name in seen:
                raise BadInput(f"{one.shard.path}: tensor '{t.name}' is also in an earlier shard")
            seen.add(t.name)
            tensors.append(t)
    n_expected = _int_key(first, "split.tensors.count", label)
    if n_split > 1 and n_expected is not None and n_expected != len(tensors):
        raise BadInput(f"{path}: split.tensors.count is {n_expected} but the {n_split} shards hold {len(tensors)}")
    return GGUFHeader(
        path=path,
        version=first.shard.version,
        metadata=MappingProxyType(first.metadata),
        tensors=tuple(tensors),
        data_offset=first.shard.data_offset,
        file_bytes=sum(one.shard.file_bytes for one in ones),
        shards=tuple(one.shard for one in ones),
        alignment=first.alignment,
        metadata_types=MappingProxyType(first.types),
    )
