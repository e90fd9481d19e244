"""A header-only GGUF reader: metadata and tensor infos, without touching the tensor data.

Written from the GGUF v2/v3 layout (little-endian): magic "GGUF", u32 version, u64 tensor count,
u64 KV count, the KV pairs (key string, u32 value type, value; arrays are u32 element type, u64
length, elements; strings are u64 length + UTF-8 bytes), the tensor infos (name string, u32 n_dims,
n_dims x i64 ne (ggml order, ne0 first), i32 ggml type, u64 offset into the data section), padding
to `general.alignment` (default 32), then the data section.

Only the header is read, with buffered reads, so a 60 GB file costs a few MiB of I/O. The checks
follow llama.cpp's own parser (ggml/src/gguf.cpp) plus limits that keep hostile input cheap: every
problem is a `BadInput("<file>: <what is wrong>")` on one line, with the file's strings (keys, tensor
names) escaped by base.text.printable, found within bounded time and memory. Each count and length
is checked against its limit (and against the bytes left in the file) before anything is read or
allocated for it, and no header, alone or summed over a split model's shards, is read past
MAX_HEADER_BYTES. The limits are in gemma_fit.gguf.limits, the bounded reads of values, arrays and
KV pairs in gemma_fit.gguf.parse; this module reads the tensor infos, each file and the split model.

Split models (`name-00001-of-00003.gguf`, keys split.no / split.count / split.tensors.count): given
the first shard, every shard's header is read and the tensors are merged, as llama.cpp's loader does.
"""

from __future__ import annotations

import os
import re
import stat
import struct
from collections.abc import Mapping
from dataclasses import field
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

from gemma_fit.base.files import note_input
from gemma_fit.base.record import record
from gemma_fit.base.text import printable
from gemma_fit.gguf import limits
from gemma_fit.gguf.limits import Budget
from gemma_fit.gguf.parse import Reader, bad_input, quote, read_kv
from gemma_fit.gguf.types import GGMLType, ggml_types

__all__ = ["GGUFHeader", "GGUFShard", "GGUFTensorInfo", "bad_input", "read_gguf_header"]

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
GGML_MAX_DIMS = 4
GGML_MAX_NAME = 64  # llama.cpp rejects tensor names of this length or longer
_INT64_MAX = 2**63 - 1

_SPLIT_NAME = re.compile(r"^(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")


@record
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


@record
class GGUFShard:
    path: Path
    version: int
    data_offset: int  # where the data section starts in this file
    file_bytes: int
    n_tensors: int
    tensor_data_bytes: int  # the data section as the tensor infos lay it out (padded)


@record
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


_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_TYPE_OFFSET = struct.Struct("<iQ")
_DIMS = {n: struct.Struct(f"<{n}q") for n in range(1, GGML_MAX_DIMS + 1)}


def _read_tensor_infos(r: Reader, n_tensors: int, shard: int) -> list[GGUFTensorInfo]:
    by_id = _types_by_id()
    infos: list[GGUFTensorInfo] = []
    seen: set[str] = set()
    for i in range(n_tensors):
        (n_name,) = _U64.unpack(r.take(8, f"tensor {i} name length"))
        if n_name >= GGML_MAX_NAME:  # checked before the name is read
            shown = f": {quote(r.take(80, f'tensor {i} name').decode('utf-8', 'replace'))}…" \
                if n_name <= r.remaining else ""
            raise r.fail(f"tensor {i} name is too long ({n_name} bytes >= {GGML_MAX_NAME}){shown}")
        raw = r.take(n_name, f"tensor {i} name")
        try:
            name = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise r.fail(f"tensor {i} name is not valid UTF-8: {raw[:40]!r}") from None
        # (names are under 64 bytes; r.fail escapes control characters in the whole message)
        if name in seen:
            raise r.fail(f"duplicate tensor name '{name}'")
        seen.add(name)
        (n_dims,) = _U32.unpack(r.take(4, f"tensor '{name}' n_dims"))
        if not 1 <= n_dims <= GGML_MAX_DIMS:
            raise r.fail(f"tensor '{name}' has {n_dims} dimensions (must be 1 to {GGML_MAX_DIMS})")
        shape: tuple[int, ...] = _DIMS[n_dims].unpack(r.take(8 * n_dims, f"tensor '{name}' dimensions"))
        n_el = 1
        for d in shape:
            if d <= 0:
                raise r.fail(f"tensor '{name}' has a dimension of {d} (shape {list(shape)})")
            n_el *= d
        if n_el > _INT64_MAX:
            raise r.fail(f"tensor '{name}' shape {list(shape)} overflows int64")
        type_id, offset = _TYPE_OFFSET.unpack(r.take(12, f"tensor '{name}' type and offset"))
        gt = by_id.get(type_id)
        if gt is None:
            raise r.fail(f"tensor '{name}' has unknown ggml type id {type_id}")
        if shape[0] % gt.block:
            raise r.fail(f"tensor '{name}' row of {shape[0]} elements is not a multiple of the {gt.name} "
                         f"block ({gt.block})")
        infos.append(GGUFTensorInfo(name, shape, gt, offset, gt.tensor_bytes(shape), shard))
    return infos


def _check_layout(r: Reader, infos: list[GGUFTensorInfo], alignment: int, data_offset: int) -> int:
    """Offsets as llama.cpp requires them: in order, each tensor padded to the alignment, and every
    tensor's bytes inside this file (for a split model: inside its own shard, whatever the other
    shards hold), so the tensor data never claims more bytes than the file has. Returns the size of
    the data section."""
    expected = 0
    for t in infos:
        if t.offset % alignment:
            raise r.fail(f"tensor {quote(t.name)} offset {t.offset} is not aligned to {alignment} bytes")
        if data_offset + t.offset + t.n_bytes > r.file_bytes:
            raise r.fail(f"tensor {quote(t.name)} data ({t.n_bytes} bytes at {data_offset + t.offset}) extends past "
                         f"the end of the file ({r.file_bytes} bytes): truncated?")
        if t.offset != expected:
            raise r.fail(f"tensor {quote(t.name)} has offset {t.offset}, expected {expected} (tensor data must "
                         f"follow in order, each padded to {alignment} bytes)")
        expected += (t.n_bytes + alignment - 1) // alignment * alignment
        if expected > r.budget.tensor_data_bytes:
            raise r.fail(f"tensor {quote(t.name)} takes the tensor data past "
                         f"{limits.MAX_TENSOR_DATA_BYTES / 2**40:g} TiB (a split model counts all its shards): "
                         "not a plausible model")
    r.budget.tensor_data_bytes -= expected
    return expected


def _version(r: Reader) -> int:
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


@record
class _One:
    shard: GGUFShard
    metadata: dict[str, Any]
    types: dict[str, str]
    tensors: list[GGUFTensorInfo]
    alignment: int


def _nonblocking(path: str, flags: int) -> int:
    """open()'s opener: a path that turns into a FIFO between the check and the open cannot hang the open."""
    return os.open(path, flags | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))


def _refuse_special(path: Path) -> None:
    """A FIFO, a device (/dev/zero, /dev/urandom) or a folder is refused before it is opened: reading one
    would block or never end."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # the open that follows reports it (no such file, permission) in its own words
    if not stat.S_ISREG(mode):
        kind = "a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "a device or special file"
        raise bad_input(str(path), f"is {kind}, not a GGUF file")


def _read_one(path: Path, shard: int = 0, budget: Budget | None = None) -> _One:
    label = str(path)
    budget = budget or Budget()
    try:
        _refuse_special(path)
        with open(path, "rb", opener=_nonblocking) as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise bad_input(label, "not a regular file (a GGUF is a file on disk)")
            note_input(st)
            file_bytes = st.st_size
            r = Reader(f, label, file_bytes, budget)
            version = _version(r)
            n_tensors = r.u64("tensor count")
            n_kv = r.u64("KV count")
            if n_tensors > limits.MAX_TENSORS:
                raise r.fail(f"tensor count {n_tensors} is absurd (limit {limits.MAX_TENSORS})")
            if n_tensors > budget.tensors:
                raise r.fail(f"tensor count {n_tensors} takes the split model past {limits.MAX_TENSORS} tensors")
            if n_kv > limits.MAX_KV:
                raise r.fail(f"KV count {n_kv} is absurd (limit {limits.MAX_KV})")
            # each KV pair takes at least 13 bytes, each tensor info at least 32
            if n_kv * 13 + n_tensors * 32 > r.remaining:
                raise r.fail(f"truncated: {n_kv} KV pairs and {n_tensors} tensor infos cannot fit in the "
                             f"{r.remaining} bytes left")
            metadata, types = read_kv(r, n_kv)
            alignment = DEFAULT_ALIGNMENT
            if "general.alignment" in metadata:
                alignment = metadata["general.alignment"]
                if types["general.alignment"] != "UINT32":
                    raise r.fail(f"general.alignment must be UINT32, not {printable(types['general.alignment'])}")
                if alignment == 0 or alignment & (alignment - 1):
                    raise r.fail(f"general.alignment {alignment} is not a power of 2")
            infos = _read_tensor_infos(r, n_tensors, shard)
            header_end = r.tell
    except OSError as exc:
        raise bad_input(label, f"cannot read: {exc.strerror or exc}") from None
    budget.header_bytes -= header_end
    budget.tensors -= n_tensors
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
        raise bad_input(label, f"{key} must be an integer, not {one.types.get(key)}")
    return v


def _inode(p: Path) -> tuple[int, int]:
    st = p.stat()
    return st.st_dev, st.st_ino


def _read_split(first: _One, path: Path, n_split: int, budget: Budget) -> list[_One]:
    m = _SPLIT_NAME.match(path.name)
    expected = f"-00001-of-{n_split:05d}.gguf"
    if m is None or int(m["no"]) != 1 or int(m["count"]) != n_split:
        raise bad_input(str(path), f"split.count is {n_split} but the name does not end in '{expected}'")
    shards = [first]
    inodes = {_inode(path): 1}
    for i in range(1, n_split):
        p = path.with_name(f"{m['prefix']}-{i + 1:05d}-of-{n_split:05d}.gguf")
        if not p.is_file():
            raise bad_input(str(path), f"shard {i + 1} of {n_split} is missing: {p}")
        same = inodes.setdefault(_inode(p), i + 1)
        if same != i + 1:
            raise bad_input(str(p), f"shard {i + 1} is the same file as shard {same} (a link?)")
        one = _read_one(p, i, budget)
        no = _int_key(one, "split.no", str(p))
        if no is None:
            raise bad_input(str(p), "missing key split.no")
        if no != i:
            raise bad_input(str(p), f"split.no is {no}, expected {i}")
        count = _int_key(one, "split.count", str(p))
        if count is not None and count != n_split:
            raise bad_input(str(p), f"split.count is {count}, but the first shard says {n_split}")
        shards.append(one)
    return shards


def read_gguf_header(path: str | os.PathLike[str]) -> GGUFHeader:
    """Read a GGUF file's header (all shards' headers for a split model, given its first shard)."""
    path = Path(path)
    label = str(path)
    if path.is_dir():
        raise bad_input(label, "is a folder, not a GGUF file")
    if not path.exists():
        raise bad_input(label, "file not found")
    budget = Budget()
    first = _read_one(path, 0, budget)
    n_split = _int_key(first, "split.count", label) or 1
    split_no = _int_key(first, "split.no", label) or 0
    if not 1 <= n_split <= limits.MAX_SHARDS:
        raise bad_input(label, f"split.count is {n_split} (must be 1 to {limits.MAX_SHARDS})")
    if not 0 <= split_no < n_split:
        raise bad_input(label, f"split.no is {split_no} but split.count is {n_split}")
    if split_no != 0:
        raise bad_input(label, f"this is shard {split_no + 1} of {n_split} of a split model; pass the first shard "
                        f"(…-00001-of-{n_split:05d}.gguf)")
    n_expected = _int_key(first, "split.tensors.count", label)
    if n_split > 1 and n_expected is not None and not 0 <= n_expected <= limits.MAX_TENSORS:
        raise bad_input(label, f"split.tensors.count is {n_expected} (limit {limits.MAX_TENSORS})")
    ones = _read_split(first, path, n_split, budget) if n_split > 1 else [first]
    tensors: list[GGUFTensorInfo] = []
    seen: set[str] = set()
    for one in ones:
        for t in one.tensors:
            if t.name in seen:
                raise bad_input(str(one.shard.path), f"tensor {quote(t.name)} is also in an earlier shard")
            seen.add(t.name)
            tensors.append(t)
    if n_split > 1 and n_expected is not None and n_expected != len(tensors):
        raise bad_input(label, f"split.tensors.count is {n_expected} but the {n_split} shards hold {len(tensors)}")
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
