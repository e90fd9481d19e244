"""The header-only GGUF reader and the ModelSpec / TensorPlan it yields.

Round trips of every contract model through `gemma-fit synth`, split files, hostile files (each a
one-line BadInput naming the file), a fuzz test on a real header, and non-Gemma files written with
the gguf package. Nothing here times anything (a busy machine must not fail a test): "bounded time
and memory" is checked as what the reader does, deterministically: the bytes it reads (every file
it opens is wrapped and its reads counted), the Python memory it allocates (tracemalloc's peak),
and refusals that come before any per-layer work. benchmarks/bench_gguf_reader.py prints the times.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import resource
import struct
import subprocess
import sys
import tempfile
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFValueType, GGUFWriter
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from shared import PlainGGUFReader, SynthFiles
from test_model_db import CONTRACT_MODELS

from gemma_fit.base.errors import BadInput
from gemma_fit.gguf import from_file as mfg
from gemma_fit.gguf import limits as gguf_limits
from gemma_fit.gguf import parse as gguf_parse
from gemma_fit.gguf import reader as gguf_reader
from gemma_fit.gguf.from_file import is_mmproj, mmproj_bytes, model_from_gguf, plan_from_gguf, spec_from_gguf
from gemma_fit.gguf.layout import GGUF_FIXED_HEADER_BYTES, kv_bytes, pad, synth_metadata
from gemma_fit.gguf.reader import GGUFHeader, read_gguf_header
from gemma_fit.gguf.tensors import TensorPlan, build_plan
from gemma_fit.gguf.writer import write_synthetic_gguf
from gemma_fit.model.catalog import entry_spec, load_model_db
from gemma_fit.model.spec import ModelSpec

QUANTS = ("Q4_K_M", "Q8_0", "BF16", "IQ4_XS")


def _spec(model_id: str) -> ModelSpec:
    return entry_spec(load_model_db()[model_id.lower()])


def _fields(spec: ModelSpec) -> dict[str, Any]:
    return {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec) if f.name not in ("id", "name")}


def _tensors(plan: TensorPlan) -> list[tuple[str, tuple[int, ...], str]]:
    return [(t.name, t.shape, t.type.name) for t in plan.tensors]


CHUNK = gguf_parse._CHUNK  # the reader's read-ahead: no header read goes more than this past what it needs


class _CountingFile:
    """A file whose reads are counted (bytes and calls) into the shared tally."""

    def __init__(self, f: Any, tally: _Reads) -> None:
        self.f, self.tally = f, tally

    def read(self, n: int = -1) -> bytes:
        out = self.f.read(n)
        self.tally.bytes += len(out)
        self.tally.calls += 1
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self.f, name)

    def __enter__(self) -> _CountingFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.f.close()


@dataclasses.dataclass
class _Reads:
    bytes: int = 0
    calls: int = 0
    files: int = 0


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> _Reads:
    """Counts what the reader reads, over every file it opens (all shards)."""
    tally = _Reads()

    def counting_open(path: Any, mode: str = "r", *args: Any, **kwargs: Any) -> _CountingFile:
        assert mode == "rb"
        tally.files += 1
        return _CountingFile(open(path, mode, *args, **kwargs), tally)

    monkeypatch.setattr(gguf_reader, "open", counting_open, raising=False)
    return tally


def _peak_alloc(fn: Callable[[], Any]) -> int:
    """Peak bytes of Python memory allocated while fn runs (deterministic for a given input)."""
    tracemalloc.start()
    try:
        with contextlib.suppress(BadInput):
            fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _one_line(msg: str) -> None:
    """An error line that cannot drive a terminal: no newline, no C0/C1 control character, no DEL."""
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in msg), repr(msg)


def _bad(path: Path, match: str | None = None, names: Path | None = None) -> str:
    """Reading `path` fails with a one-line BadInput that names the file (or the shard `names`)."""
    with pytest.raises(BadInput) as exc:
        read_gguf_header(path)
    msg = str(exc.value)
    assert msg.startswith(f"{names or path}: "), msg
    _one_line(msg)
    if match is not None:
        assert match in msg, msg
    return msg


# --- round trips: every contract model, four quants -----------------------------------------------


@pytest.mark.parametrize("quant", QUANTS)
@pytest.mark.parametrize("model_id", CONTRACT_MODELS)
def test_round_trip_of_every_model(model_id: str, quant: str, synth: SynthFiles) -> None:
    """The file synth writes (once a session: the llama.cpp tests run on the same files) reads back whole."""
    spec = _spec(model_id)
    plan = build_plan(spec, quant)
    written = synth(model_id, quant)
    path, size = written.path, written.size  # size: what write_synthetic_gguf returned
    assert path.name == f"{model_id}-{quant}.gguf"
    h = read_gguf_header(path)
    assert h.file_bytes == size == h.shards[0].file_bytes
    assert h.version == 3 and h.alignment == 32 and len(h.shards) == 1
    assert h.metadata["general.architecture"] == spec.arch
    assert h.n_params == plan.n_params
    assert h.tensor_data_bytes == plan.tensor_data_bytes
    assert h.data_offset + h.shards[0].tensor_data_bytes == size
    got = spec_from_gguf(h)
    assert _fields(got) == _fields(spec)
    assert got.layers == spec.layers
    assert got.id == f"{model_id}-{quant}" and got.name == spec.name
    got_plan = plan_from_gguf(h, got)
    assert _tensors(got_plan) == _tensors(plan)
    assert got_plan.ftype == plan.ftype
    assert got_plan.tensor_data_bytes == plan.tensor_data_bytes
    by_name = {t.name: t for t in plan.tensors}
    for t in got_plan.tensors:
        want = by_name[t.name]
        if t.name.startswith("rope_freqs."):  # placed with the first full-attention layer, as llama.cpp does
            assert t.layer == next(x.index for x in spec.layers if not x.is_swa) and t.role == "layer"
        else:
            assert (t.layer, t.role) == (want.layer, want.role), t.name


def test_header_is_immutable(synth: SynthFiles) -> None:
    path = synth("gemma-3-270m", "Q8_0").path
    h = read_gguf_header(path)
    with pytest.raises(TypeError):
        h.metadata["general.name"] = "x"  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        h.version = 2  # type: ignore[misc]
    assert isinstance(h.metadata["tokenizer.ggml.tokens"], tuple)
    assert h.metadata_types["tokenizer.ggml.tokens"] == "ARRAY[STRING]"
    assert hash(h) == hash(read_gguf_header(path))
    assert h.tensor(h.tensors[3].name) is h.tensors[3] and h.tensor("nope") is None


def test_big_sparse_file_reads_only_the_header(synth: SynthFiles, reads: _Reads) -> None:
    path = synth("gemma-3-27b", "BF16").path
    assert path.stat().st_size > 50 * 2**30
    h = read_gguf_header(path)
    assert h.file_bytes == path.stat().st_size
    # the header and at most one read-ahead chunk of the 50 GB, in chunk-sized reads
    assert h.data_offset <= reads.bytes <= h.data_offset + CHUNK
    assert reads.calls <= h.data_offset // CHUNK + 2 and reads.files == 1


def test_path_with_spaces_and_shell_metacharacters(tmp_path: Path) -> None:
    folder = tmp_path / "dir with 'quotes' & spaces"
    folder.mkdir()
    path = folder / "a b;$(x).gguf"
    plan = build_plan(_spec("gemma-3-270m"), "Q4_K_M")
    write_synthetic_gguf(plan, path)
    h, spec, got = model_from_gguf(str(path))
    assert h.path == path
    assert spec.id == "a b;$(x)"
    assert _tensors(got) == _tensors(plan)
    _bad(folder / "missing;$(x).gguf", "file not found")


# --- split files ----------------------------------------------------------------------------------


def _write_header_file(path: Path, arch: str, kvs: list[tuple[str, Any, GGUFValueType, GGUFValueType | None]],
                       tensors: list[tuple[str, tuple[int, ...], int, int]]) -> int:
    """A GGUF with these KV pairs and tensor infos (name, ggml shape, type id, n_bytes), zero data."""
    w = GGUFWriter(path, arch=arch)
    for key, value, vtype, sub in kvs:
        w.add_key_value(key, value, vtype, sub)
    for name, shape, type_id, n_bytes in tensors:
        w.add_tensor_info(name, tuple(reversed(shape)), np.dtype(np.float32), n_bytes,
                          raw_dtype=GGMLQuantizationType(type_id))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    size = pad(path.stat().st_size) + sum(pad(n) for *_, n in tensors)
    with open(path, "r+b") as f:
        f.truncate(size)
    return size


def _split_keys(no: int, count: int, n_tensors: int) -> list[tuple[str, Any, GGUFValueType, None]]:
    return [("split.no", no, GGUFValueType.UINT16, None), ("split.count", count, GGUFValueType.UINT16, None),
            ("split.tensors.count", n_tensors, GGUFValueType.INT32, None)]


def _write_split(folder: Path, plan: TensorPlan, prefix: str = "model", n_split: int = 3,
                 tweak: Callable[[int, list[Any]], list[Any]] | None = None) -> list[Path]:
    """The plan's tensors spread over n_split shards named as llama-gguf-split names them."""
    meta = [(kv.key, kv.value, GGUFValueType(int(kv.vtype)), GGUFValueType(int(kv.subtype))
             if kv.subtype is not None else None) for kv in synth_metadata(plan) if kv.key != "general.architecture"]
    infos = [(t.name, t.shape, t.type.id, t.n_bytes) for t in plan.tensors]
    per = -(-len(infos) // n_split)
    paths = []
    for i in range(n_split):
        path = folder / f"{prefix}-{i + 1:05d}-of-{n_split:05d}.gguf"
        kvs = (meta if i == 0 else []) + _split_keys(i, n_split, len(infos))
        if tweak is not None:
            kvs = tweak(i, kvs)
        _write_header_file(path, plan.model.arch, kvs, infos[i * per:(i + 1) * per])
        paths.append(path)
    return paths


def test_split_file_merges_all_shards(tmp_path: Path) -> None:
    spec = _spec("gemma-3n-E2B")
    plan = build_plan(spec, "Q4_K_M")
    paths = _write_split(tmp_path, plan, prefix="a b;$(x)")
    h = read_gguf_header(paths[0])
    assert [s.path for s in h.shards] == paths
    assert h.file_bytes == sum(p.stat().st_size for p in paths)
    assert [(t.name, t.shape, t.ggml_type.name) for t in h.tensors] == _tensors(plan)
    assert sorted({t.shard for t in h.tensors}) == [0, 1, 2]
    for s in h.shards:
        assert s.data_offset + s.tensor_data_bytes == s.file_bytes
        assert s.n_tensors == sum(1 for t in h.tensors if h.shards[t.shard] is s)
    got = spec_from_gguf(h)
    assert _fields(got) == _fields(spec)
    assert got.id == "a b;$(x)"
    assert _tensors(plan_from_gguf(h, got)) == _tensors(plan)


def test_split_file_problems(tmp_path: Path) -> None:
    plan = build_plan(_spec("gemma-3-270m"), "Q8_0")
    a = tmp_path / "a"
    a.mkdir()
    paths = _write_split(a, plan)
    _bad(paths[1], "pass the first shard")
    paths[2].unlink()
    _bad(paths[0], "shard 3 of 3 is missing")

    def wrong_no(i: int, kvs: list[Any]) -> list[Any]:
        return [(k, 5 if k == "split.no" and i == 2 else v, t, s) for k, v, t, s in kvs]

    b = tmp_path / "b"
    b.mkdir()
    shards = _write_split(b, plan, tweak=wrong_no)
    _bad(shards[0], "split.no is 5, expected 2", names=shards[2])

    def wrong_count(i: int, kvs: list[Any]) -> list[Any]:
        return [(k, 7 if k == "split.tensors.count" and i == 0 else v, t, s) for k, v, t, s in kvs]

    c = tmp_path / "c"
    c.mkdir()
    _bad(_write_split(c, plan, tweak=wrong_count)[0], "split.tensors.count is 7")
    d = tmp_path / "d"
    d.mkdir()
    first = _write_split(d, plan)[0]
    renamed = first.with_name("model.gguf")
    first.rename(renamed)
    _bad(renamed, "does not end in '-00001-of-00003.gguf'")


def test_split_written_by_the_gguf_package(tmp_path: Path) -> None:
    """gguf.GGUFWriter's own splitting (the layout llama-gguf-split writes) reads back whole."""
    base = tmp_path / "tiny.gguf"
    w = GGUFWriter(base, arch="llama", split_max_tensors=5)
    _llama_keys(w)
    tensors = _llama_tensors(tied=False)
    for name, arr in tensors.items():
        w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    shards = sorted(tmp_path.glob("tiny-*-of-*.gguf"))
    assert len(shards) == 5  # 21 tensors, 5 a shard
    h = read_gguf_header(shards[0])
    assert [t.name for t in h.tensors] == list(tensors)
    assert spec_from_gguf(h).n_layer == 2


def _vocab_files() -> list[Path]:
    import build_llamacpp  # scripts/ is on sys.path (conftest.py)

    models = build_llamacpp.cache_root() / f"llama.cpp-{build_llamacpp.SDIST_VERSION}" / "src" / "models"
    return sorted(models.glob("ggml-vocab-*.gguf"))


def test_real_vocab_files(reads: _Reads) -> None:
    """llama.cpp's own vocabulary GGUFs (real tokenizer metadata of 19 model families, up to 15 MB of
    header): each reads whole, within every limit, each byte once; the small ones exactly as
    gguf.GGUFReader reads them (which takes seconds a file on the big ones). Skipped until the
    llama.cpp source is in the cache."""
    files = _vocab_files()
    if not files:
        pytest.skip("llama.cpp source not in the cache yet (scripts/build_llamacpp.py fetches it)")
    for path in files:
        before = reads.bytes
        h = read_gguf_header(path)
        assert reads.bytes - before == path.stat().st_size  # no byte read twice
        n_tokens = len(h.metadata["tokenizer.ggml.tokens"])
        assert n_tokens > 1000 and h.tensors == ()
        for key in ("tokenizer.ggml.token_type", "tokenizer.ggml.scores"):
            assert len(h.metadata.get(key, range(n_tokens))) == n_tokens, (path, key)
        if path.stat().st_size > 1_200_000:
            continue
        reader = PlainGGUFReader(path)  # gguf.GGUFReader, faster (see shared.py)
        fields = {k: f for k, f in reader.fields.items() if not k.startswith("GGUF.")}
        assert list(h.metadata) == list(fields), path
        for key, f in fields.items():
            want, got = f.contents(), h.metadata[key]
            if isinstance(got, tuple):
                got = list(got)
            if isinstance(want, float) or (isinstance(want, list) and want and isinstance(want[0], float)):
                assert np.allclose(np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64),
                                   rtol=1e-6, equal_nan=True), (path, key)
            else:
                assert got == want, (path, key)


# --- hostile files --------------------------------------------------------------------------------


def _s(x: str | bytes) -> bytes:
    b = x.encode() if isinstance(x, str) else x
    return struct.pack("<Q", len(b)) + b


def _kv(key: str | bytes, vtype: int, payload: bytes) -> bytes:
    return _s(key) + struct.pack("<I", vtype) + payload


def _ti(name: str | bytes, dims: list[int], type_id: int, offset: int, n_dims: int | None = None) -> bytes:
    n = len(dims) if n_dims is None else n_dims
    return _s(name) + struct.pack("<I", n) + struct.pack(f"<{len(dims)}q", *dims) + struct.pack("<iQ", type_id, offset)


ARCH_KV = _kv("general.architecture", 8, _s("llama"))
# tensor "a": F32 [8] = 32 bytes at 0; tensor "b": Q8_0 [32, 2] = 68 bytes at 32 (padded to 96)
GOOD_TIS = [_ti("a", [8], 0, 0), _ti("b", [32, 2], 8, 32)]


def _gguf(kvs: list[bytes] | None = None, tis: list[bytes] | None = None, data: int = 128, version: int = 3,
          magic: bytes = b"GGUF", n_tensors: int | None = None, n_kv: int | None = None, align: int = 32) -> bytes:
    kvs = [ARCH_KV] if kvs is None else kvs
    tis = GOOD_TIS if tis is None else tis
    nt = len(tis) if n_tensors is None else n_tensors
    nkv = len(kvs) if n_kv is None else n_kv
    head = magic + struct.pack("<IQQ", version, nt, nkv) + b"".join(kvs) + b"".join(tis)
    return head + b"\0" * (pad(len(head), align) - len(head) + data)


def _file(tmp_path: Path, data: bytes, name: str = "bad.gguf") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_small_valid_file_and_every_value_type(tmp_path: Path) -> None:
    kvs = [
        ARCH_KV,
        _kv("u8", 0, struct.pack("<B", 200)), _kv("i8", 1, struct.pack("<b", -5)),
        _kv("u16", 2, struct.pack("<H", 60000)), _kv("i16", 3, struct.pack("<h", -300)),
        _kv("u32", 4, struct.pack("<I", 4_000_000_000)), _kv("i32", 5, struct.pack("<i", -7)),
        _kv("f32", 6, struct.pack("<f", 0.5)), _kv("bool", 7, b"\x01"), _kv("str", 8, _s("héllo")),
        _kv("u64", 10, struct.pack("<Q", 2**64 - 1)), _kv("i64", 11, struct.pack("<q", -(2**63))),
        _kv("f64", 12, struct.pack("<d", 1e300)),
        _kv("arr_i32", 9, struct.pack("<IQ", 5, 3) + struct.pack("<3i", 1, -2, 3)),
        _kv("arr_bool", 9, struct.pack("<IQ", 7, 3) + b"\x01\x00\x02"),
        _kv("arr_str", 9, struct.pack("<IQ", 8, 4) + _s("a") + _s("") + _s("") + _s("bc")),
        _kv("arr_empty", 9, struct.pack("<IQ", 6, 0)),
        _kv("nested", 9, struct.pack("<IQ", 9, 2) + struct.pack("<IQ", 4, 2) + struct.pack("<2I", 1, 2)
            + struct.pack("<IQ", 8, 1) + _s("x")),
    ]
    h = read_gguf_header(_file(tmp_path, _gguf(kvs), "ok.gguf"))
    md = h.metadata
    assert (md["u8"], md["i8"], md["u16"], md["i16"], md["u32"], md["i32"]) == (200, -5, 60000, -300, 4_000_000_000, -7)
    assert (md["f32"], md["bool"], md["str"], md["u64"], md["i64"], md["f64"]) == (0.5, True, "héllo", 2**64 - 1,
                                                                                    -(2**63), 1e300)
    assert md["arr_i32"] == (1, -2, 3) and md["arr_bool"] == (True, False, True)
    assert md["arr_str"] == ("a", "", "", "bc") and md["arr_empty"] == ()
    assert md["nested"] == ((1, 2), ("x",))
    assert h.metadata_types["nested"] == "ARRAY[ARRAY]" and h.metadata_types["u16"] == "UINT16"
    assert [(t.name, t.shape, t.ggml_type.name, t.offset, t.n_bytes) for t in h.tensors] == [
        ("a", (8,), "F32", 0, 32), ("b", (32, 2), "Q8_0", 32, 68)]
    assert h.data_offset % 32 == 0 and h.file_bytes == h.data_offset + 128
    # version 2 reads the same; an explicit alignment moves the data section
    assert read_gguf_header(_file(tmp_path, _gguf(version=2), "v2.gguf")).version == 2
    align = _kv("general.alignment", 4, struct.pack("<I", 64))
    tis = [_ti("a", [8], 0, 0), _ti("b", [32, 2], 8, 64)]
    h64 = read_gguf_header(_file(tmp_path, _gguf([ARCH_KV, align], tis, data=192, align=64), "a64.gguf"))
    assert h64.alignment == 64 and h64.data_offset % 64 == 0


HOSTILE: dict[str, tuple[bytes, str]] = {
    "empty": (b"", "truncated"),
    "wrong magic": (_gguf(magic=b"GGML"), "not a GGUF file"),
    "version 99": (_gguf(version=99), "unsupported GGUF version 99"),
    "version 1": (_gguf(version=1), "unsupported GGUF version 1"),
    "version 0": (_gguf(version=0), "unsupported GGUF version 0"),
    "big endian": (_gguf(version=0x03000000), "big-endian"),
    "huge tensor count": (_gguf(n_tensors=2**40), "tensor count"),
    "tensor count near 2^64": (_gguf(n_tensors=2**64 - 1), "tensor count"),
    "huge kv count": (_gguf(n_kv=2**40), "KV count"),
    "kv count past the end": (_gguf(n_kv=60_000), "truncated"),
    "kv count over the limit": (_gguf(n_kv=65_537), "KV count 65537 is absurd (limit 65536)"),
    "tensor count past the end": (_gguf(n_tensors=60_000), "truncated"),
    "a million tensors": (_gguf(n_tensors=1_000_000), "tensor count 1000000 is absurd (limit 65536)"),
    "tensor count one over the limit": (_gguf(n_tensors=65_537), "tensor count 65537 is absurd"),
    "huge array length": (_gguf([ARCH_KV, _kv("x", 9, struct.pack("<IQ", 0, 2**62))]), "array of"),
    "array over the element limit": (_gguf([ARCH_KV, _kv("x", 9, struct.pack("<IQ", 0, 2**22 + 1))]),
                                     "array of 4194305 elements (limit 4194304)"),
    "array longer than the file": (_gguf([ARCH_KV, _kv("x", 9, struct.pack("<IQ", 4, 4_000_000))]), "truncated"),
    "string array longer than the file": (_gguf([ARCH_KV, _kv("x", 9, struct.pack("<IQ", 8, 4_000_000))]),
                                          "truncated"),
    "huge key length": (_gguf([struct.pack("<Q", 2**63) + b"k"]), "bytes long"),
    "key over 64 KiB": (_gguf([_kv("k" * 65_537, 4, b"\0" * 4)]), "is 65537 bytes long (limit 65536)"),
    "huge string value": (_gguf([ARCH_KV, _kv("x", 8, struct.pack("<Q", 200_000_000))]), "bytes long"),
    "string past the end": (_gguf([ARCH_KV, _kv("x", 8, struct.pack("<Q", 50_000_000))]), "truncated"),
    "unknown value type": (_gguf([ARCH_KV, _kv("x", 13, b"\0" * 8)]), "unknown GGUF value type 13"),
    "unknown array type": (_gguf([ARCH_KV, _kv("x", 9, struct.pack("<IQ", 77, 1))]), "unknown GGUF value type 77"),
    "deeply nested arrays": (_gguf([ARCH_KV, _kv("x", 9, struct.pack("<IQ", 9, 1) * 20)]), "nested"),
    "empty key": (_gguf([ARCH_KV, _kv("", 4, b"\0" * 4)]), "is empty"),
    "duplicate key": (_gguf([ARCH_KV, ARCH_KV]), "duplicate key"),
    "key not utf-8": (_gguf([ARCH_KV, _kv(b"\xff\xfe", 4, b"\0" * 4)]), "not valid UTF-8"),
    "alignment not a power of 2": (_gguf([ARCH_KV, _kv("general.alignment", 4, struct.pack("<I", 48))]),
                                   "power of 2"),
    "alignment zero": (_gguf([ARCH_KV, _kv("general.alignment", 4, struct.pack("<I", 0))]), "power of 2"),
    "alignment of the wrong type": (_gguf([ARCH_KV, _kv("general.alignment", 10, struct.pack("<Q", 32))]),
                                    "must be UINT32"),
    "five dimensions": (_gguf(tis=[_ti("a", [1, 1, 1, 1, 8], 0, 0)]), "5 dimensions"),
    "zero dimensions": (_gguf(tis=[_ti("a", [], 0, 0)]), "0 dimensions"),
    "n_dims 2^32-1": (_gguf(tis=[_ti("a", [8], 0, 0, n_dims=2**32 - 1)]), "dimensions"),
    "overflowing dims": (_gguf(tis=[_ti("a", [2**40, 2**40], 0, 0)]), "overflows int64"),
    "zero dim": (_gguf(tis=[_ti("a", [8, 0], 0, 0)]), "dimension of 0"),
    "negative dim": (_gguf(tis=[_ti("a", [-8], 0, 0)]), "dimension of -8"),
    "unknown type id": (_gguf(tis=[_ti("a", [8], 99, 0)]), "unknown ggml type id 99"),
    "removed type id": (_gguf(tis=[_ti("a", [8], 31, 0)]), "unknown ggml type id 31"),
    "negative type id": (_gguf(tis=[_ti("a", [8], -1, 0)]), "unknown ggml type id -1"),
    "row not a whole block": (_gguf(tis=[_ti("a", [16], 8, 0)]), "not a multiple of the Q8_0 block"),
    "unaligned offset": (_gguf(tis=[_ti("a", [8], 0, 0), _ti("b", [32, 2], 8, 33)]), "not aligned"),
    "offset out of range": (_gguf(tis=[_ti("a", [8], 0, 0), _ti("b", [32, 2], 8, 2**60)]), "past the end"),
    "offset leaves a gap": (_gguf(tis=[_ti("a", [8], 0, 0), _ti("b", [32, 2], 8, 64)], data=192), "expected 32"),
    "overlapping tensors": (_gguf(tis=[_ti("a", [8], 0, 0), _ti("b", [32, 2], 8, 0)]), "expected 32"),
    "tensor bigger than the file": (_gguf(tis=[_ti("a", [2**20, 2**20], 0, 0)]), "past the end"),
    "duplicate tensor names": (_gguf(tis=[_ti("a", [8], 0, 0), _ti("a", [8], 0, 32)], data=64), "duplicate tensor"),
    "tensor name too long": (_gguf(tis=[_ti("t" * 64, [8], 0, 0)]), "too long"),
    "tensor name 2^63 bytes long": (_gguf(tis=[struct.pack("<Q", 2**63) + b"t" * 100]), "too long"),
    # 4096 tensors of 2^61 F32 elements claim 3.8e22 bytes; the first already lies past the end of the file
    "tensors claiming 3.8e22 bytes": (_gguf(tis=[_ti(f"t{i}", [2**61], 0, i % 2 * 2**63) for i in range(4096)]),
                                      "tensor 't0' data (9223372036854775808 bytes at"),
    # strings from the file reach the message escaped: no byte of them can drive the terminal
    "escape bytes in a tensor name": (_gguf(tis=[_ti("\x1b]52;c;aGk=\x07", [8], 0, 0)] * 2, data=64),
                                      "duplicate tensor name '\\x1b]52;c;aGk=\\x07'"),
    "escape bytes in a key": (_gguf([ARCH_KV] + [_kv("\x1b[2J\x1b[H", 4, b"\0" * 4)] * 2),
                              "duplicate key '\\x1b[2J\\x1b[H'"),
    "C1 CSI in a key": (_gguf([ARCH_KV] + [_kv("a\u009b31mb", 4, b"\0" * 4)] * 2), "duplicate key 'a\\x9b31mb'"),
    "escape bytes in a long tensor name": (_gguf(tis=[_ti("\x1b[31m" * 20, [8], 0, 0)]), "'\\x1b[31m\\x1b[31m"),
    "escape bytes in a tensor past the end": (_gguf(tis=[_ti("a\rb\x08", [2**20], 0, 0)]),
                                              "tensor 'a\\x0db\\x08' data"),
    "data section missing": (_gguf(data=0), "past the end"),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_file(case: str, tmp_path: Path) -> None:
    data, match = HOSTILE[case]
    _bad(_file(tmp_path, data), match)


def test_not_a_file(tmp_path: Path) -> None:
    _bad(tmp_path, "folder")
    _bad(tmp_path / "nope.gguf", "file not found")


def _sparse(tmp_path: Path, data: bytes, size: int = 2**30, name: str = "sparse.gguf") -> Path:
    """`data` at the start of a sparse file of `size` bytes: no claim is refused as running past the end."""
    path = _file(tmp_path, data, name)
    os.truncate(path, size)
    return path


BEFORE_READING: dict[str, tuple[bytes, str]] = {
    "a million tensors": (_gguf(n_tensors=1_000_000), "tensor count 1000000 is absurd"),
    "2^40 KV pairs": (_gguf(n_kv=2**40), "KV count"),
    "an array of 2^22 + 1 UINT64": (_gguf([ARCH_KV, _kv("x", 9, struct.pack("<IQ", 10, 2**22 + 1))]), "array of"),
    "an array of 2^22 + 1 strings": (_gguf([ARCH_KV, _kv("x", 9, struct.pack("<IQ", 8, 2**22 + 1))]), "array of"),
    "a 65 MiB string": (_gguf([ARCH_KV, _kv("x", 8, struct.pack("<Q", 65 * 2**20))]), "bytes long"),
    "a 2^63-byte tensor name": (_gguf(tis=[struct.pack("<Q", 2**63)]), "too long"),
}


@pytest.mark.parametrize("case", list(BEFORE_READING))
def test_limits_are_checked_before_reading(case: str, tmp_path: Path, reads: _Reads) -> None:
    """In a 1 GiB (sparse) file every claim fits, so only the limits stop these, and they stop them
    before the claimed bytes are read or the claimed objects allocated: one read-ahead chunk at most,
    a few MiB of Python memory."""
    data, match = BEFORE_READING[case]
    path = _sparse(tmp_path, data)
    _bad(path, match)
    assert reads.bytes <= CHUNK and reads.calls <= 2
    assert _peak_alloc(lambda: read_gguf_header(path)) < 4 * CHUNK


def test_limit_boundaries(tmp_path: Path) -> None:
    """A header at the limits reads: 65,536 tensor infos, an array of 2^22 elements."""
    n = gguf_limits.MAX_TENSORS
    tis = [_ti(f"t{i}", [8], 0, 32 * i) for i in range(n)]
    h = read_gguf_header(_file(tmp_path, _gguf(tis=tis, data=32 * n), "many.gguf"))
    assert len(h.tensors) == n and h.tensors[-1].name == f"t{n - 1}"
    arr = _kv("x", 9, struct.pack("<IQ", 0, 2**22) + b"\1" * 2**22)
    h = read_gguf_header(_file(tmp_path, _gguf([ARCH_KV, arr]), "arr.gguf"))
    assert len(h.metadata["x"]) == 2**22


def test_array_elements_are_counted_over_the_header(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gguf_limits, "MAX_ARRAY_ELEMENTS", 100)
    arr = struct.pack("<IQ", 0, 60) + b"\0" * 60
    nested = struct.pack("<IQ", 9, 2) + (struct.pack("<IQ", 0, 30) + b"\0" * 30) * 2
    read_gguf_header(_file(tmp_path, _gguf([ARCH_KV, _kv("a", 9, arr)]), "one.gguf"))
    _bad(_file(tmp_path, _gguf([ARCH_KV, _kv("a", 9, arr), _kv("b", 9, arr)]), "two.gguf"),
         "'b': the header's arrays hold more than 100 elements in all")
    _bad(_file(tmp_path, _gguf([ARCH_KV, _kv("a", 9, arr), _kv("b", 9, nested)]), "nested.gguf"),
         "more than 100 elements in all")


def _light(i: int, kvs: list[Any]) -> list[Any]:
    """A shard's KV pairs without the 262k-token vocabulary (what a header-only test does not need)."""
    return [kv for kv in kvs if not kv[0].startswith("tokenizer.")]


def test_split_limits_count_all_shards(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tensors, header bytes and tensor data are limited over the whole split model, the shard count
    before any other shard is opened, and a shard cannot be another shard again (a link)."""
    plan = build_plan(_spec("gemma-3-270m"), "Q8_0")
    paths = _write_split(tmp_path, plan, tweak=_light)
    h = read_gguf_header(paths[0])
    per = max(s.n_tensors for s in h.shards)
    uncounted = tmp_path / "uncounted"
    uncounted.mkdir()
    no_count = _write_split(uncounted, plan, tweak=lambda i, kvs: [kv for kv in _light(i, kvs)
                                                                   if kv[0] != "split.tensors.count"])
    with monkeypatch.context() as m:
        m.setattr(gguf_limits, "MAX_TENSORS", per + 1)
        _bad(paths[0], f"split.tensors.count is {len(h.tensors)} (limit {per + 1})")  # before shard 2 is opened
        _bad(no_count[0], f"takes the split model past {per + 1} tensors", names=no_count[1])
    with monkeypatch.context() as m:
        m.setattr(gguf_limits, "MAX_HEADER_BYTES", h.shards[0].data_offset + 100)
        _bad(paths[0], "header larger than", names=paths[1])
    with monkeypatch.context() as m:
        m.setattr(gguf_limits, "MAX_TENSOR_DATA_BYTES", h.shards[0].tensor_data_bytes + 100)
        _bad(paths[0], "takes the tensor data past", names=paths[1])
    assert read_gguf_header(paths[0]) == h  # the limits are read per call: nothing left over

    many = tmp_path / "many"
    many.mkdir()
    first = many / "m-00001-of-02000.gguf"
    first.write_bytes(_gguf([ARCH_KV, _kv("split.count", 2, struct.pack("<H", 2000)),
                             _kv("split.no", 2, struct.pack("<H", 0))]))
    _bad(first, "split.count is 2000 (must be 1 to 1024)")

    links = tmp_path / "links"
    links.mkdir()
    shards = _write_split(links, plan, tweak=_light)
    shards[2].unlink()
    shards[2].symlink_to(shards[1].name)
    _bad(shards[0], "shard 3 is the same file as shard 2", names=shards[2])


def test_split_tensors_lie_in_their_own_shard(tmp_path: Path) -> None:
    """Shard 2 one byte short, shard 1 one byte long: the bytes add up, but a tensor of shard 2 lies
    past the end of shard 2, and that is refused, naming shard 2."""
    paths = _write_split(tmp_path, build_plan(_spec("gemma-3-270m"), "Q8_0"), tweak=_light)
    os.truncate(paths[1], paths[1].stat().st_size - 1)
    os.truncate(paths[0], paths[0].stat().st_size + 1)
    _bad(paths[0], "extends past the end of the file", names=paths[1])


def _layers_file(path: Path, arch: str, n_layer: int, tensor_layers: int | None = None,
                 extra: Callable[[GGUFWriter], None] | None = None, embd: bool = True,
                 names: tuple[str, ...] = (), ctx: int = 8192) -> Path:
    """A small dense file whose block_count is n_layer, with an attn_norm tensor in each of the first
    tensor_layers layers (all by default)."""
    w = GGUFWriter(path, arch=arch)
    w.add_uint32(f"{arch}.context_length", ctx)
    w.add_uint32(f"{arch}.embedding_length", N_EMBD)
    w.add_uint32(f"{arch}.block_count", n_layer)
    w.add_uint32(f"{arch}.feed_forward_length", N_FF)
    w.add_uint32(f"{arch}.attention.head_count", N_HEAD)
    w.add_uint32(f"{arch}.attention.head_count_kv", N_HEAD_KV)
    if arch == "gemma3":
        w.add_uint32(f"{arch}.attention.sliding_window", 512)
    if extra is not None:
        extra(w)
    if embd:
        w.add_tensor("token_embd.weight", np.zeros((N_VOCAB, N_EMBD), dtype=np.float16))
    w.add_tensor("output_norm.weight", np.zeros(N_EMBD, dtype=np.float32))
    for il in range(n_layer if tensor_layers is None else tensor_layers):
        w.add_tensor(f"blk.{il}.attn_norm.weight", np.zeros(N_EMBD, dtype=np.float32))
    for name in names:
        w.add_tensor(name, np.zeros(N_EMBD, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _spec_fails(path: Path, match: str) -> str:
    with pytest.raises(BadInput) as exc:
        spec_from_gguf(read_gguf_header(path))
    msg = str(exc.value)
    assert msg.startswith(f"{path}: ") and match in msg, msg
    _one_line(msg)
    return msg


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
@pytest.mark.parametrize(("n_layer", "tensor_layers"), [(10_000, None), (10_000, 2), (513, None), (0, 0)])
def test_block_count_is_refused_before_any_layer_work(arch: str, n_layer: int, tensor_layers: int | None,
                                                      tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """llama.cpp loads 1 to 512 layers (LLAMA_MAX_LAYERS); past that gemma-fit refuses the file before
    it builds a single layer (the plans, placements and speed all scale with layers)."""
    path = _layers_file(tmp_path / f"{arch}-{n_layer}.gguf", arch, n_layer, tensor_layers)

    def no_layers(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a layer was built")

    monkeypatch.setattr(mfg, "LayerSpec", no_layers)
    _spec_fails(path, f"{arch}.block_count is {n_layer} (llama.cpp loads 1 to 512 layers)")


def test_512_layers_read(tmp_path: Path) -> None:
    _, spec, plan = model_from_gguf(_layers_file(tmp_path / "deep.gguf", "llama", 512))
    assert spec.n_layer == 512 and len(plan.tensors) == 514
    assert plan.tensors[-1].layer == 511


def test_tensors_must_match_the_layers(tmp_path: Path) -> None:
    """What llama.cpp's loader refuses, and gemma-fit used to crash on (KeyError, IndexError)."""
    _spec_fails(_layers_file(tmp_path / "noembd.gguf", "llama", 2, embd=False), "missing tensor 'token_embd.weight'")
    _spec_fails(_layers_file(tmp_path / "extra.gguf", "llama", 2, names=("blk.7.attn_q.weight",)),
                "tensor 'blk.7.attn_q.weight' is for layer 7, but llama.block_count is 2")
    _spec_fails(_layers_file(tmp_path / "gap.gguf", "gemma3", 4, tensor_layers=2),
                "layer 2 has no tensors (gemma3.block_count is 4)")
    msg = _spec_fails(_layers_file(tmp_path / "esc.gguf", "llama", 2, names=("blk.9.\x1b]0;pwned\x07",)),
                      "tensor 'blk.9.\\x1b]0;pwned\\x07' is for layer 9")
    assert "\x1b" not in msg


@pytest.mark.parametrize(("n_expert", "n_used"), [(2048, 8), (8, 0), (8, 9)])
def test_expert_counts(n_expert: int, n_used: int, tmp_path: Path) -> None:
    def experts(w: GGUFWriter) -> None:
        w.add_uint32("llama.expert_count", n_expert)
        w.add_uint32("llama.expert_used_count", n_used)

    path = _layers_file(tmp_path / "moe.gguf", "llama", 2, extra=experts)
    _spec_fails(path, f"{n_expert} experts with {n_used} used a token (llama.cpp: at most 1024 experts")


def test_architecture_name_is_escaped(tmp_path: Path) -> None:
    evil = _kv("general.architecture", 8, _s("\x1b[2J\x1b]52;c;ZXZpbA==\x07llama"))
    path = _file(tmp_path, _gguf([evil]))
    msg = _spec_fails(path, "architecture '\\x1b[2J\\x1b]52;c;ZXZpbA==\\x07llama' is not supported")
    assert "\x1b" not in msg and "\x07" not in msg


# --- the corpus through the real command line, with resource limits ------------------------------

CLI = [sys.executable, "-c", "from gemma_fit.cli.entry import main; main()"]


def _limits() -> None:  # in the child: 2 GiB of address space, 60 s of CPU
    resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))
    resource.setrlimit(resource.RLIMIT_CPU, (60, 60))


def _cli_corpus(d: Path) -> dict[str, Path]:
    d.mkdir()
    split = d / "split"
    split.mkdir()
    shards = _write_split(split, build_plan(_spec("gemma-3-270m"), "Q8_0"), tweak=_light)
    os.truncate(shards[2], shards[2].stat().st_size - 1)
    return {
        "a million tensors": _sparse(d, _gguf(n_tensors=1_000_000), name="million.gguf"),
        "llama block_count 10000": _layers_file(d / "llama-10000.gguf", "llama", 10_000),
        "gemma3 block_count 10000": _layers_file(d / "gemma3-10000.gguf", "gemma3", 10_000, tensor_layers=2),
        "tensor data past the end": _file(d, _gguf(tis=[_ti(f"t{i}", [2**61], 0, i % 2 * 2**63)
                                                        for i in range(4096)]), "huge.gguf"),
        "a shard's tensor past its end": shards[0],
        "escape bytes in a tensor name": _file(d, _gguf(tis=[_ti("\x1b]52;c;aGk=\x07", [8], 0, 0)] * 2, data=64),
                                               "esc.gguf"),
        "escape bytes in the architecture": _file(d, _gguf([_kv("general.architecture", 8, _s("\x1b[31mx\x9b"))]),
                                                  "arch.gguf"),
        "no token embedding": _layers_file(d / "noembd.gguf", "llama", 2, embd=False),
        "an array of 5 M elements": _sparse(d, _gguf([ARCH_KV, _kv("x", 9, struct.pack("<IQ", 4, 5 * 2**20))]),
                                            name="arr.gguf"),
    }


def test_hostile_files_through_the_cli(tmp_path: Path) -> None:
    """`gemma-fit inspect FILE --gpu rtx-4090` on each: exit 2 and exactly one stderr line, `gemma-fit:
    error: ...`, with no control character, under 2 GiB of address space and 60 s of CPU (the timeout
    only guards against a hang)."""
    for case, path in _cli_corpus(tmp_path / "corpus").items():
        proc = subprocess.run([*CLI, "inspect", str(path), "--gpu", "rtx-4090"], capture_output=True, text=True,
                              preexec_fn=_limits, timeout=600, check=False)
        lines = proc.stderr.splitlines()
        assert proc.returncode == 2, (case, proc.returncode, proc.stderr[-2000:])
        assert len(lines) == 1 and lines[0].startswith("gemma-fit: error: "), (case, proc.stderr[-2000:])
        assert "internal error" not in lines[0] and "Traceback" not in proc.stderr, case
        _one_line(lines[0])


@pytest.fixture(scope="session")
def small_synth(synth: SynthFiles) -> tuple[Path, bytes, int, int]:
    """The gemma-3-270m Q4_K_M file: its path, header bytes, start of the tensor infos, data offset."""
    plan = build_plan(_spec("gemma-3-270m"), "Q4_K_M")
    path = synth("gemma-3-270m", "Q4_K_M").path
    h = read_gguf_header(path)
    with open(path, "rb") as f:
        header = f.read(h.data_offset)
    ti_start = GGUF_FIXED_HEADER_BYTES + sum(kv_bytes(kv) for kv in synth_metadata(plan))
    return path, header, ti_start, h.data_offset


def _truncation_points(ti_start: int, data_offset: int, size: int) -> Iterator[int]:
    yield from range(0, 40)
    yield from (41, 60, 100, 1000, 4096, 100_000, 1_000_000, 3_000_000, 5_000_000)
    yield from range(ti_start - 3, ti_start + 13)  # inside the first tensor info, field by field
    yield from range(ti_start + 13, data_offset, max(1, (data_offset - ti_start) // 15))
    yield from (data_offset - 1, data_offset, data_offset + 1, data_offset + 4096, size // 2, size - 1)


def test_truncated_anywhere(small_synth: tuple[Path, bytes, int, int], tmp_path: Path) -> None:
    path, header, ti_start, data_offset = small_synth
    size = path.stat().st_size
    out = tmp_path / "cut.gguf"
    points = sorted(set(_truncation_points(ti_start, data_offset, size)), reverse=True)
    assert len(points) > 80
    with open(out, "wb") as f:
        f.write(header)
        f.truncate(size)
    for n in points:  # cut the same file shorter and shorter
        os.truncate(out, n)
        msg = _bad(out)
        assert "truncated" in msg or "past the end" in msg, (n, msg)


# no deadline and no too_slow health check: both are wall-clock limits
@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_fuzz_mutated_header(small_synth: tuple[Path, bytes, int, int], data: st.DataObject) -> None:
    """Random byte changes in a real header: a one-line BadInput or a header, never anything else,
    and never more read than the header limit allows."""
    path, header, ti_start, data_offset = small_synth
    where = st.one_of(st.integers(0, 600), st.integers(ti_start, data_offset - 1), st.integers(0, data_offset - 1))
    edits = data.draw(st.lists(st.tuples(where, st.integers(0, 255)), min_size=1, max_size=6))
    buf = bytearray(header)
    for pos, byte in edits:
        buf[pos] = byte
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "fuzz.gguf"
        with open(out, "wb") as f:
            f.write(buf)
            f.truncate(path.stat().st_size)
        tally = _Reads()
        real_open = open
        gguf_reader.open = lambda p, m="rb", **kw: _CountingFile(real_open(p, m, **kw), tally)  # type: ignore[attr-defined]
        try:
            h = read_gguf_header(out)
            spec = spec_from_gguf(h)
            plan_from_gguf(h, spec)
        except BadInput as exc:
            assert str(exc).startswith(f"{out}: ")
            _one_line(str(exc))
        finally:
            del gguf_reader.open  # type: ignore[attr-defined]
        assert tally.bytes <= gguf_limits.MAX_HEADER_BYTES + CHUNK


# --- non-Gemma files ------------------------------------------------------------------------------

N_EMBD, N_FF, N_VOCAB, N_HEAD, N_HEAD_KV = 256, 512, 1000, 4, 2


def _llama_keys(w: GGUFWriter, arch: str = "llama") -> None:
    w.add_string("general.name", "Tiny Llama")
    w.add_uint32("general.file_type", 1)  # MOSTLY_F16
    w.add_uint32(f"{arch}.context_length", 8192)
    w.add_uint32(f"{arch}.embedding_length", N_EMBD)
    w.add_uint32(f"{arch}.block_count", 2)
    w.add_uint32(f"{arch}.feed_forward_length", N_FF)
    w.add_uint32(f"{arch}.attention.head_count", N_HEAD)
    w.add_uint32(f"{arch}.attention.head_count_kv", N_HEAD_KV)
    w.add_uint32(f"{arch}.rope.dimension_count", N_EMBD // N_HEAD)
    w.add_float32(f"{arch}.rope.freq_base", 500000.0)
    w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_array("tokenizer.ggml.tokens", [f"t{i}" for i in range(N_VOCAB)])


def _llama_tensors(tied: bool, bias: bool = False) -> dict[str, np.ndarray]:
    kv = N_EMBD // N_HEAD * N_HEAD_KV

    def m(rows: int, cols: int) -> np.ndarray:  # numpy shape is ggml's reversed: (ne1, ne0)
        return np.zeros((rows, cols), dtype=np.float16)

    def v(n: int) -> np.ndarray:
        return np.zeros(n, dtype=np.float32)

    t = {"token_embd.weight": m(N_VOCAB, N_EMBD), "output_norm.weight": v(N_EMBD)}
    if not tied:
        t["output.weight"] = m(N_VOCAB, N_EMBD)
    for i in range(2):
        t |= {f"blk.{i}.attn_norm.weight": v(N_EMBD), f"blk.{i}.attn_q.weight": m(N_EMBD, N_EMBD),
              f"blk.{i}.attn_k.weight": m(kv, N_EMBD), f"blk.{i}.attn_v.weight": m(kv, N_EMBD)}
        if bias:
            t |= {f"blk.{i}.attn_q.bias": v(N_EMBD), f"blk.{i}.attn_k.bias": v(kv), f"blk.{i}.attn_v.bias": v(kv)}
        t |= {f"blk.{i}.attn_output.weight": m(N_EMBD, N_EMBD), f"blk.{i}.ffn_norm.weight": v(N_EMBD),
              f"blk.{i}.ffn_gate.weight": m(N_FF, N_EMBD), f"blk.{i}.ffn_up.weight": m(N_FF, N_EMBD),
              f"blk.{i}.ffn_down.weight": m(N_EMBD, N_FF)}
    return t


def _write_dense(path: Path, arch: str, tied: bool, bias: bool = False) -> dict[str, np.ndarray]:
    w = GGUFWriter(path, arch=arch)
    _llama_keys(w, arch)
    tensors = _llama_tensors(tied, bias)
    for name, arr in tensors.items():
        w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return tensors


@pytest.mark.parametrize(("arch", "tied", "bias"), [("llama", False, False), ("llama", True, False),
                                                    ("qwen2", True, True), ("qwen3", False, False)])
def test_dense_non_gemma_file(arch: str, tied: bool, bias: bool, tmp_path: Path) -> None:
    path = tmp_path / f"tiny-{arch}.gguf"
    tensors = _write_dense(path, arch, tied, bias)
    h, spec, plan = model_from_gguf(path)
    assert h.file_bytes == path.stat().st_size
    assert spec.arch == arch and spec.id == f"tiny-{arch}" and spec.name == "Tiny Llama"
    assert (spec.n_embd, spec.n_vocab, spec.n_ctx_train, spec.n_layer, spec.n_swa) == (N_EMBD, N_VOCAB, 8192, 2, 0)
    assert spec.tied_embeddings is tied
    assert (spec.rope_theta, spec.rope_theta_swa, spec.rms_norm_eps) == (500000.0, 500000.0, 1e-5)
    assert (spec.n_expert, spec.n_embd_per_layer, spec.n_altup, spec.final_logit_softcap) == (0, 0, 0, 0.0)
    for i, layer in enumerate(spec.layers):
        assert (layer.index, layer.n_head, layer.n_head_kv, layer.head_dim, layer.n_ff) == (i, N_HEAD, N_HEAD_KV,
                                                                                              64, N_FF)
        assert layer.has_kv and layer.has_v_proj and not layer.is_swa and not layer.has_experts
    assert spec.n_layer_kv_from_start == 2 and spec.gqa_layer0 == 2 and not spec.has_swa
    assert plan.ftype.name == "F16"
    assert [t.name for t in plan.tensors] == list(tensors)
    assert plan.n_params == sum(a.size for a in tensors.values())
    f16 = {t.name: t.type.name for t in plan.tensors}
    assert f16["token_embd.weight"] == "F16" and f16["output_norm.weight"] == "F32"
    roles = {t.name: (t.layer, t.role) for t in plan.tensors}
    assert roles["token_embd.weight"] == (None, "input") and roles["output_norm.weight"] == (None, "output")
    assert roles["blk.1.ffn_down.weight"] == (1, "layer")
    if not tied:
        assert roles["output.weight"] == (None, "output")


def test_file_type_falls_back_to_the_common_tensor_type(tmp_path: Path) -> None:
    path = tmp_path / "noft.gguf"
    plan = build_plan(_spec("gemma-2-2b"), "Q4_K_M")
    meta = [(kv.key, kv.value, GGUFValueType(int(kv.vtype)), GGUFValueType(int(kv.subtype))
             if kv.subtype is not None else None)
            for kv in synth_metadata(plan) if kv.key not in ("general.architecture", "general.file_type")]
    _write_header_file(path, "gemma2", meta, [(t.name, t.shape, t.type.id, t.n_bytes) for t in plan.tensors])
    h = read_gguf_header(path)
    assert "general.file_type" not in h.metadata
    assert plan_from_gguf(h, spec_from_gguf(h)).ftype.name == "Q4_K_M"


def test_unsupported_architecture_and_mmproj(tmp_path: Path) -> None:
    path = tmp_path / "phi.gguf"
    w = GGUFWriter(path, arch="phi3")
    w.add_tensor("token_embd.weight", np.zeros((10, 32), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    h = read_gguf_header(path)
    assert not is_mmproj(h)
    with pytest.raises(BadInput, match="architecture 'phi3' is not supported .*gemma4.*llama"):
        spec_from_gguf(h)

    mm = tmp_path / "mmproj-model-f16.gguf"
    w = GGUFWriter(mm, arch="clip")
    w.add_tensor("v.patch_embd.weight", np.zeros((64, 3, 14, 14), dtype=np.float16))
    w.add_tensor("mm.input_projection.weight", np.zeros((64, 32), dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    h = read_gguf_header(mm)
    assert is_mmproj(h)
    assert mmproj_bytes(h) == (64 * 3 * 14 * 14 + 64 * 32) * 2
    assert h.tensors[0].shape == (14, 14, 3, 64)
    with pytest.raises(BadInput, match="mmproj"):
        spec_from_gguf(h)


def test_missing_required_key(tmp_path: Path) -> None:
    path = tmp_path / "nokey.gguf"
    plan = build_plan(_spec("gemma-3-1b"), "Q8_0")
    meta = [(kv.key, kv.value, GGUFValueType(int(kv.vtype)), GGUFValueType(int(kv.subtype))
             if kv.subtype is not None else None)
            for kv in synth_metadata(plan) if kv.key not in ("general.architecture", "gemma3.block_count")]
    _write_header_file(path, "gemma3", meta, [(t.name, t.shape, t.type.id, t.n_bytes) for t in plan.tensors])
    with pytest.raises(BadInput, match=r"nokey\.gguf: missing key gemma3\.block_count"):
        spec_from_gguf(read_gguf_header(path))


def test_header_type() -> None:
    assert {f.name for f in dataclasses.fields(GGUFHeader)} >= {
        "path", "version", "metadata", "tensors", "data_offset", "file_bytes", "shards"}


@pytest.mark.parametrize(("what", "ctx", "extra", "match"), [
    ("no context", 0, None, "context_length is 0 (gemma-fit plans for 1 to 16,777,216)"),
    ("a context past any model", 2**32 - 1, None, "context_length is 4,294,967,295"),
    ("a head of 2**32-1", 8192, ("attention.key_length", 2**32 - 1), "key_length is 4,294,967,295"),
    ("an SWA head of 2**32-1", 8192, ("attention.key_length_swa", 2**32 - 1), "key_length is 4,294,967,295"),
])
def test_sizes_a_plan_builds_on_are_within_a_configs_limits(what: str, ctx: int, extra: tuple[str, int] | None,
                                                             match: str, tmp_path: Path) -> None:
    """A hostile header's 0 or 2**32-1 is refused when the spec is read (a division by zero and a tensor of 2**32
    columns were internal errors further on), as config.json's sizes are (model.limits)."""
    add = (lambda w: w.add_uint32(f"gemma3.{extra[0]}", extra[1])) if extra else None
    _spec_fails(_layers_file(tmp_path / "f.gguf", "gemma3", 2, extra=add, ctx=ctx), match)
