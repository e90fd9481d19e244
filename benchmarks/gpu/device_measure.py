#!/usr/bin/env python3
"""On the GPU machine: write gemma-fit's zero-weight GGUFs (standard library only), run llama.cpp's
llama-bench on each with -v, sample the process's device memory with nvidia-smi, and store llama.cpp's
buffer lines, the NVML peak and the speeds beside gemma-fit's estimate in $OUT/results.json.

    python3 benchmarks/gpu/device_measure.py --plans benchmarks/gpu/plans.json --bin llama-cuda-sm90 --out $OUT
Test here (CPU) with --dry-run: writes the files and checks them against gemma-fit's own writer.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

ALIGN = 32


def _str(s: str) -> bytes:
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def _placeholder(key: str, n: int) -> list:
    """The same placeholder vocabulary gemma-fit writes (gemma_fit/gguf_layout.py)."""
    control = ["<pad>", "<eos>", "<bos>", "<unk>"]
    if key == "tokenizer.ggml.tokens":
        tokens = control + [f"<0x{b:02X}>" for b in range(256)]
        return (tokens + [f"<unused{i}>" for i in range(n - len(tokens))])[:n]
    if key == "tokenizer.ggml.scores":
        return [0.0] * n
    kinds = [3] * len(control) + [6] * 256
    return (kinds + [5] * (n - len(kinds)))[:n]


def _value(vtype: int, value: object, sub: int | None) -> bytes:
    if vtype == 8:
        return _str(str(value))
    if vtype == 9:
        assert sub is not None and isinstance(value, list)
        head = struct.pack("<I", sub) + struct.pack("<Q", len(value))
        if sub == 8:
            return head + b"".join(_str(v) for v in value)
        return head + struct.pack("<" + _SCALAR[sub][1] * len(value), *value)
    return struct.pack(_SCALAR[vtype], value)


def write_gguf(plan: dict, path: Path) -> int:
    """GGUF v3: header, KV pairs, tensor infos, padding; tensor data left as a sparse hole."""
    out = bytearray(b"GGUF" + struct.pack("<I", 3) + struct.pack("<Q", len(plan["tensors"]))
                    + struct.pack("<Q", len(plan["kvs"])))
    for kv in plan["kvs"]:
        value = kv["value"]
        if isinstance(value, dict) and "placeholder" in value:
            value = _placeholder(kv["key"], value["placeholder"])
        out += _str(kv["key"]) + struct.pack("<I", kv["type"]) + _value(kv["type"], value, kv["sub"])
    offset = 0
    for t in plan["tensors"]:
        out += _str(t["name"]) + struct.pack("<I", len(t["shape"]))
        out += b"".join(struct.pack("<Q", d) for d in t["shape"])
        out += struct.pack("<I", t["type"]) + struct.pack("<Q", offset)
        offset += (t["bytes"] + ALIGN - 1) // ALIGN * ALIGN
    header = (len(out) + ALIGN - 1) // ALIGN * ALIGN
    with open(path, "wb") as f:
        f.write(bytes(out))
        f.truncate(header + offset)
    return header + offset


class NvidiaSmiPeak:
    """Peak used memory of the GPUs while llama.cpp runs (nvidia-smi, every 50 ms)."""

    def __init__(self) -> None:
        self.peak = 0
        self.baseline = self._used()
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _used(self) -> int:
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True, timeout=5).stdout
            return sum(int(x) for x in out.split()) * 1024 * 1024
        except (OSError, ValueError, subprocess.SubprocessError):
            return 0

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._used())
            self._stop.wait(0.05)

    def __enter__(self) -> NvidiaSmiPeak:
        self._t.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._t.join(2)


BUF = re.compile(r"(\S+)\s+(model|KV|compute|output) buffer size\s*=\s*([\d.]+) MiB")


def run_bench(bin_dir: Path, gguf: Path, ctx: int, timeout: int) -> dict:
    # llama-bench's context is depth + prompt + generated tokens: a depth of ctx - 640 makes n_ctx = ctx,
    # so the NVML peak is that of a full-length context (tg128 then runs at that depth)
    args = [str(bin_dir / "llama-bench"), "-m", str(gguf), "-ngl", "99", "-fa", "1", "-p", "512", "-n", "128",
            "-d", str(max(0, ctx - 640)), "-r", "1", "-o", "json", "-v"]
    env = dict(os.environ, LD_LIBRARY_PATH=os.pathsep.join([str(bin_dir), os.environ.get("LD_LIBRARY_PATH", "")]))
    fit = subprocess.run([str(bin_dir / "llama-fit-params"), "-m", str(gguf), "-c", str(ctx), "-ngl", "99", "-v"],
                         capture_output=True, text=True, env=env, timeout=timeout)
    with NvidiaSmiPeak() as smi:
        proc = subprocess.run(args, capture_output=True, text=True, env=env, timeout=timeout)
    buffers: dict[str, dict[str, float]] = {}
    for line in (fit.stdout + fit.stderr).splitlines():
        m = BUF.search(line)
        if m:
            buffers.setdefault(m.group(1), {})[m.group(2)] = float(m.group(3))
    try:
        bench = json.loads(proc.stdout)
    except json.JSONDecodeError:
        bench = None
    return {"ctx": ctx, "fit_params_buffers_mib": buffers, "bench": bench, "smi_peak_bytes": smi.peak,
            "smi_baseline_bytes": smi.baseline, "returncode": proc.returncode,
            "log_tail": (proc.stderr or "")[-3000:], "fit_tail": (fit.stderr or "")[-3000:]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--plans", type=Path, required=True)
    ap.add_argument("--bin", type=Path, default=Path("llama-cuda-sm90"))
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "out")))
    ap.add_argument("--work", type=Path, default=Path("/tmp/gemma-fit-gguf"))
    ap.add_argument("--timeout", type=int, default=240)
    ap.add_argument("--dry-run", action="store_true", help="only write the files (CPU check)")
    a = ap.parse_args()
    a.work.mkdir(parents=True, exist_ok=True)
    a.out.mkdir(parents=True, exist_ok=True)
    results = []
    for plan in json.loads(a.plans.read_text()):
        path = a.work / f"{plan['model']}-{plan['quant']}.gguf"
        size = write_gguf(plan, path)
        entry = {"model": plan["model"], "quant": plan["quant"], "file_bytes": size, "runs": []}
        if not a.dry_run:
            for ctx in plan["contexts"]:
                t = time.time()
                run = run_bench(a.bin, path, ctx, a.timeout)
                run["estimate"] = plan["estimates"][str(ctx)]
                run["seconds"] = round(time.time() - t, 1)
                entry["runs"].append(run)
                print(f"{plan['model']} ctx {ctx}: rc {run['returncode']} in {run['seconds']} s", flush=True)
            path.unlink()
        results.append(entry)
        (a.out / "results.json").write_text(json.dumps(results, indent=1))
    print(f"wrote {a.out / 'results.json'}")


if __name__ == "__main__":
    sys.exit(main())
