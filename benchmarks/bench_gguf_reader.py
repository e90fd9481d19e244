#!/usr/bin/env python3
"""How fast is the GGUF header reader on real and hostile files? Prints figures; it is a benchmark,
not a test (tests/test_gguf_reader.py checks the same cases deterministically: bytes read, memory
allocated, refusals before per-layer work).

Each figure is the best of `--repeat` runs (default 3) of the library call in this process, in
seconds; `cli_*` figures are one fresh `gemma-fit inspect FILE --gpu rtx-4090` process each, imports
included. Targets (a 2-core cloud VM): a refused hostile file under 0.1 s in the library and under
1 s through the CLI; a real header (262k-token vocabulary) under 1 s; a 50 GB sparse file's header
under 2 s; a model at the layer limit (512 layers) through the whole `inspect --gpu` under 5 s.

    python benchmarks/bench_gguf_reader.py
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGUFWriter

from gemma_fit.base.errors import BadInput
from gemma_fit.gguf.from_file import model_from_gguf
from gemma_fit.gguf.layout import pad
from gemma_fit.gguf.limits import MAX_TENSORS
from gemma_fit.gguf.reader import read_gguf_header
from gemma_fit.gguf.tensors import build_plan
from gemma_fit.gguf.writer import write_synthetic_gguf
from gemma_fit.model.catalog import entry_spec, load_model_db

CLI = [sys.executable, "-c", "from gemma_fit.cli.entry import main; main()"]


def _s(x: str) -> bytes:
    b = x.encode()
    return struct.pack("<Q", len(b)) + b


def _kv(key: str, vtype: int, payload: bytes) -> bytes:
    return _s(key) + struct.pack("<I", vtype) + payload


def _ti(name: str, dims: list[int], type_id: int, offset: int) -> bytes:
    return _s(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}q", *dims) + struct.pack(
        "<iQ", type_id, offset)


ARCH = _kv("general.architecture", 8, _s("llama"))


def _raw(path: Path, kvs: list[bytes], tis: list[bytes], n_tensors: int | None = None, data: int = 0,
         size: int | None = None) -> Path:
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tis) if n_tensors is None else n_tensors, len(kvs))
    head += b"".join(kvs) + b"".join(tis)
    path.write_bytes(head + b"\0" * (pad(len(head)) - len(head) + data))
    if size is not None:
        os.truncate(path, size)
    return path


def _layers(path: Path, arch: str, n_layer: int, n_embd: int = 256, tensor_layers: int | None = None,
            swa: bool = True) -> Path:
    w = GGUFWriter(path, arch=arch)
    for key, value in (("context_length", 8192), ("embedding_length", n_embd), ("block_count", n_layer),
                       ("feed_forward_length", 2 * n_embd), ("attention.head_count", 4),
                       ("attention.head_count_kv", 2)):
        w.add_uint32(f"{arch}.{key}", value)
    if arch == "gemma3" and swa:
        w.add_uint32(f"{arch}.attention.sliding_window", 512)
    w.add_uint32("general.file_type", 1)
    w.add_tensor("token_embd.weight", np.zeros((1000, n_embd), dtype=np.float16))
    w.add_tensor("output_norm.weight", np.zeros(n_embd, dtype=np.float32))
    for il in range(n_layer if tensor_layers is None else tensor_layers):
        w.add_tensor(f"blk.{il}.attn_norm.weight", np.zeros(n_embd, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _best(fn: Callable[[], Any], repeat: int) -> tuple[float, str]:
    """(best seconds, what happened: 'ok' or the error's text after the file name)."""
    best, outcome = float("inf"), ""
    for _ in range(repeat):
        t = time.perf_counter()
        try:
            fn()
            outcome = "ok"
        except BadInput as exc:
            outcome = "refused: " + str(exc).split(": ", 1)[-1][:90]
        best = min(best, time.perf_counter() - t)
    return round(best, 4), outcome


def _cli(path: Path) -> tuple[float, str]:
    t = time.perf_counter()
    proc = subprocess.run([*CLI, "inspect", str(path), "--gpu", "rtx-4090", "--json"], capture_output=True, text=True,
                          check=False)
    return round(time.perf_counter() - t, 3), f"exit {proc.returncode}"


def _vocab_files() -> list[Path]:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
    try:
        import build_llamacpp
    except ImportError:
        return []
    models = build_llamacpp.cache_root() / f"llama.cpp-{build_llamacpp.SDIST_VERSION}" / "src" / "models"
    return sorted(models.glob("ggml-vocab-*.gguf"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    r = args.repeat
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        specs = load_model_db()
        small = d / "gemma-3-270m.gguf"
        write_synthetic_gguf(build_plan(entry_spec(specs["gemma-3-270m"]), "Q4_K_M"), small)
        big = d / "gemma-3-27b.gguf"
        write_synthetic_gguf(build_plan(entry_spec(specs["gemma-3-27b"]), "BF16"), big)
        header, model = read_gguf_header, model_from_gguf
        many = [_ti(f"t{i}", [8], 0, 32 * i) for i in range(MAX_TENSORS)]
        million = [_ti(f"t{i}", [8], 0, 32 * i) for i in range(1_000_000)]
        paths = {
            "llama-512": _layers(d / "llama-512.gguf", "llama", 512),
            "million-claim": _raw(d / "million-claim.gguf", [ARCH], [], n_tensors=1_000_000, size=2**30),
            "llama-10000": _layers(d / "llama-10000.gguf", "llama", 10_000),
            "gemma3-10000": _layers(d / "gemma3-10000.gguf", "gemma3", 10_000, tensor_layers=2),
        }
        files: dict[str, tuple[Path, Callable[[Path], Any]]] = {
            # real layouts
            "gemma-3-270m Q4_K_M header (262k-token vocabulary)": (small, header),
            "gemma-3-27b BF16, 54 GB sparse file": (big, header),
            # at the limits: accepted
            f"{MAX_TENSORS} tensor infos (the limit)": (_raw(d / "many.gguf", [ARCH], many, data=32 * MAX_TENSORS),
                                                        header),
            "an array of 2^22 UINT8 (the limit)": (
                _raw(d / "arr.gguf", [ARCH, _kv("x", 9, struct.pack("<IQ", 0, 2**22) + b"\1" * 2**22)], []), header),
            "llama, 512 layers (the limit): spec and plan": (paths["llama-512"], model),
            # hostile: refused
            "a million tensors claimed, 1 GiB sparse file": (paths["million-claim"], header),
            "a million real tensor infos": (_raw(d / "million.gguf", [ARCH], million, data=32 * 1_000_000), header),
            "an array of 2^22 + 1 strings claimed, 1 GiB sparse": (
                _raw(d / "strs.gguf", [ARCH, _kv("x", 9, struct.pack("<IQ", 8, 2**22 + 1))], [], size=2**30), header),
            "tensors claiming 3.8e22 bytes": (
                _raw(d / "huge.gguf", [ARCH], [_ti(f"t{i}", [2**61], 0, i % 2 * 2**63) for i in range(4096)]), header),
            "llama block_count 10000 (all layers' tensors)": (paths["llama-10000"], model),
            "gemma3 block_count 10000 (2 layers' tensors)": (paths["gemma3-10000"], model),
        }
        lib = {}
        for label, (path, fn) in files.items():
            seconds, outcome = _best(lambda p=path, f=fn: f(p), r)  # type: ignore[misc]
            lib[label] = {"s": seconds, "outcome": outcome}
        out["library"] = lib
        vocab = _vocab_files()
        if vocab:
            times = [_best(lambda p=p: read_gguf_header(p), r)[0] for p in vocab]  # type: ignore[misc]
            out["llama.cpp vocab files"] = {"files": len(vocab), "max_s": max(times), "total_s": round(sum(times), 3)}
        deep = _layers(d / "llama-512-4096.gguf", "llama", 512, n_embd=4096)  # offload search and quant advice
        deep_gemma = _layers(d / "gemma3-512-8192.gguf", "gemma3", 512, n_embd=8192, swa=False)
        out["cli inspect --gpu rtx-4090 (s, exit status)"] = {
            "gemma-3-270m": _cli(small),
            "llama 512 layers": _cli(paths["llama-512"]),
            "llama 512 layers x 4096 (does not fit: offload and advice)": _cli(deep),
            "gemma3 512 layers x 8192, no SWA (does not fit: offload and advice)": _cli(deep_gemma),
            "a million tensors claimed (refused)": _cli(paths["million-claim"]),
            "llama block_count 10000 (refused)": _cli(paths["llama-10000"]),
            "gemma3 block_count 10000 (refused)": _cli(paths["gemma3-10000"]),
        }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
