#!/usr/bin/env python3
"""On the GPU machine: llama-server throughput at 1, 4, 16 and 64 concurrent requests (and, where PyTorch and
transformers are installed, `generate` at the same batch sizes), on gemma-fit's zero-weight GGUFs.
Standard library only for the llama-server part; results in $OUT/serving.json.

    python3 benchmarks/gpu/serving_measure.py --plans benchmarks/gpu/plans.json --bin llama-cuda-sm90 --out $OUT

Each request is a fixed prompt of --prompt token ids and exactly --gen generated tokens (ignore_eos), all N sent
at once to `llama-server -np N -c N x (prompt + gen + 64)`, as `vllm bench serve --max-concurrency N` with
random fixed lengths does. Recorded per N: wall time of the round, each response's timings (prompt_ms,
predicted_ms, predicted_n), the aggregate output tokens/s (all tokens / wall) and the NVML peak.
Test here (CPU build of llama-server) with --models gemma-3-1b --concurrency 1,2 --prompt 32 --gen 8.
Compare with gemma-fit's prediction here: python benchmarks/gpu/serving_measure.py --compare serving.json
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from device_measure import NvidiaSmiPeak, write_gguf  # noqa: E402

TOKEN = 300  # an <unusedN> id of the placeholder vocabulary: a prompt of exact length, no tokenizer needed
CONTEXT_PAD = 64  # per slot, past prompt + generated tokens


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _post(url: str, body: dict, timeout: float) -> dict:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:  # noqa: S310 - localhost only
        return json.loads(r.read())


def _wait_ready(port: int, proc: subprocess.Popen, timeout: float) -> None:
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"llama-server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:  # noqa: S310
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise TimeoutError("llama-server did not become ready")


def one_round(bin_dir: Path, gguf: Path, n: int, prompt: int, gen: int, timeout: float) -> dict:
    port = _free_port()
    ctx = n * (prompt + gen + CONTEXT_PAD)
    args = [str(bin_dir / "llama-server"), "-m", str(gguf), "-c", str(ctx), "-np", str(n), "-ngl", "99", "-fa", "on",
            "--host", "127.0.0.1", "--port", str(port), "--no-webui"]
    env = dict(os.environ, LD_LIBRARY_PATH=os.pathsep.join([str(bin_dir), os.environ.get("LD_LIBRARY_PATH", "")]))
    log = open(Path(os.environ.get("TMPDIR", "/tmp")) / f"llama-server-{port}.log", "w")  # noqa: SIM115
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        _wait_ready(port, proc, timeout)
        body = {"prompt": [TOKEN] * prompt, "n_predict": gen, "ignore_eos": True, "cache_prompt": False,
                "temperature": 0.0}
        _post(f"http://127.0.0.1:{port}/completion", {**body, "n_predict": 2}, timeout)  # warm-up
        results: list[dict] = [{} for _ in range(n)]

        def worker(i: int) -> None:
            try:
                results[i] = _post(f"http://127.0.0.1:{port}/completion", body, timeout)
            except Exception as exc:  # noqa: BLE001 - recorded, not raised: the round still reports
                results[i] = {"error": str(exc)}

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
        with NvidiaSmiPeak() as smi:
            t0 = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            wall = time.perf_counter() - t0
        timings = [r.get("timings", {}) for r in results]
        generated = sum(int(t.get("predicted_n", 0)) for t in timings)
        return {"concurrency": n, "prompt_tokens": prompt, "output_tokens": gen, "ctx": ctx, "wall_s": round(wall, 4),
                "aggregate_output_tps": round(generated / wall, 2) if wall else None,
                "timings": timings, "errors": [r["error"] for r in results if "error" in r],
                "smi_peak_bytes": smi.peak, "smi_baseline_bytes": smi.baseline}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def transformers_rounds(plan: dict, batches: list[int], prompt: int, gen: int) -> list[dict]:
    """generate() at each batch size on a randomly initialised Gemma 3 text model of the plan's shape (no weights
    to download: the speed of bf16 matrices does not depend on their values). Skipped without torch + CUDA."""
    try:
        import torch
        from transformers import AutoModelForCausalLM, Gemma3TextConfig
    except ImportError as exc:
        return [{"skipped": f"no torch/transformers: {exc}"}]
    if not torch.cuda.is_available():
        return [{"skipped": "no CUDA device"}]
    kv = {e["key"]: e["value"] for e in plan["kvs"]}
    arch = kv["general.architecture"]
    if arch != "gemma3":
        return [{"skipped": f"only gemma3 configs are built here, not {arch}"}]
    g = lambda k: kv[f"{arch}.{k}"]  # noqa: E731
    cfg = Gemma3TextConfig(hidden_size=g("embedding_length"), intermediate_size=g("feed_forward_length"),
                           num_hidden_layers=g("block_count"), num_attention_heads=g("attention.head_count"),
                           num_key_value_heads=g("attention.head_count_kv"), head_dim=g("attention.key_length"),
                           sliding_window=g("attention.sliding_window"), vocab_size=262144)
    with torch.device("cuda"):  # initialised on the GPU: a 27B model's random init on the CPU takes minutes
        model = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.bfloat16).eval()
    out = []
    for b in batches:
        ids = torch.full((b, prompt), TOKEN, dtype=torch.long, device="cuda")
        with torch.no_grad():
            model.generate(ids, max_new_tokens=2, min_new_tokens=2, do_sample=False)  # warm-up
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            model.generate(ids, max_new_tokens=1, min_new_tokens=1, do_sample=False)
            torch.cuda.synchronize()
            t1 = time.perf_counter()
            model.generate(ids, max_new_tokens=gen, min_new_tokens=gen, do_sample=False)
            torch.cuda.synchronize()
            t2 = time.perf_counter()
        decode_s = (t2 - t1) - (t1 - t0)
        out.append({"batch": b, "prefill_s": round(t1 - t0, 4), "generate_s": round(t2 - t1, 4),
                    "decode_tokens_per_s": round(b * (gen - 1) / decode_s, 2) if decode_s > 0 else None,
                    "peak_allocated_bytes": int(torch.cuda.max_memory_allocated())})
        torch.cuda.reset_peak_memory_stats()
    del model
    torch.cuda.empty_cache()
    return out


def compare(path: Path) -> None:
    """Here, with gemma-fit installed: each measured round beside gemma-fit's llama.cpp prediction."""
    from gemma_fit.api import RunSettings, Traffic, check, to_json

    for entry in json.loads(path.read_text()):
        for r in entry.get("llama_server", []):
            if "concurrency" not in r:
                continue
            doc = to_json(check(entry["model"], "h200-sxm", quant=entry["quant"], prompt_tokens=r["prompt_tokens"],
                                settings=RunSettings(n_ctx=r["ctx"], n_parallel=r["concurrency"], flash_attn="on"),
                                traffic=Traffic(r["output_tokens"])))
            pred = doc["performance"]["aggregate_tokens_per_s"]
            meas = r["aggregate_output_tps"]
            print(f"{entry['model']:16s} {entry['quant']:7s} N={r['concurrency']:3d} measured {meas:9.1f} tok/s, "
                  f"predicted {pred:9.1f} ({(pred / meas - 1) * 100:+.1f}%)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--plans", type=Path, default=Path(__file__).resolve().parent / "plans.json")
    ap.add_argument("--bin", type=Path, default=Path("llama-cuda-sm90"))
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "out")))
    ap.add_argument("--work", type=Path, default=Path("/tmp/gemma-fit-gguf"))
    ap.add_argument("--models", default="gemma-3-1b,gemma-3-12b,gemma-3-27b,gemma-4-26B-A4B")
    ap.add_argument("--concurrency", default="1,4,16,64")
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--transformers", action="store_true", help="also time transformers' generate (gemma3 only)")
    ap.add_argument("--compare", type=Path, help="here: print a results file beside gemma-fit's prediction")
    a = ap.parse_args()
    if a.compare:
        compare(a.compare)
        return
    wanted = a.models.split(",")
    ns = [int(x) for x in a.concurrency.split(",")]
    a.work.mkdir(parents=True, exist_ok=True)
    a.out.mkdir(parents=True, exist_ok=True)
    results = []
    for plan in json.loads(a.plans.read_text()):
        if plan["model"] not in wanted:
            continue
        path = a.work / f"{plan['model']}-{plan['quant']}.gguf"
        write_gguf(plan, path)
        entry: dict = {"model": plan["model"], "quant": plan["quant"], "llama_server": []}
        for n in ns:
            t = time.time()
            try:
                entry["llama_server"].append(one_round(a.bin, path, n, a.prompt, a.gen, a.timeout))
            except Exception as exc:  # noqa: BLE001 - the next round still runs
                entry["llama_server"].append({"concurrency": None, "n": n, "error": str(exc)})
            print(f"{plan['model']} N={n}: {time.time() - t:.1f} s", flush=True)
            (a.out / "serving.json").write_text(json.dumps(results + [entry], indent=1))
        if a.transformers:
            entry["transformers"] = transformers_rounds(plan, ns, a.prompt, a.gen)
        path.unlink()
        results.append(entry)
        (a.out / "serving.json").write_text(json.dumps(results, indent=1))
    print(f"wrote {a.out / 'serving.json'}")


if __name__ == "__main__":
    sys.exit(main())
