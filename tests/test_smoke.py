"""`gemma-fit smoke` runs llama.cpp for real (CPU build) and compares with the estimate.

Zero-weight files of Gemma 2, 3 and 4 (llama.cpp allocates exactly what real weights need); the
host-side terms (weights, KV cache, compute buffer, total) must agree within 5%.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

CLI = [sys.executable, "-c", "from gemma_fit.cli import main; main()"]


def smoke(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, "smoke", *args], capture_output=True, text=True, timeout=timeout, check=False)


@pytest.mark.llamacpp
@pytest.mark.parametrize(("model", "ctx"), [("gemma-2-2b", 4096), ("gemma-3-1b", 8192), ("gemma-4-E4B", 4096)])
def test_smoke_host_terms_agree_within_5pct(model: str, ctx: int, llama_bin: Path) -> None:
    proc = smoke("--model", model, "--quant", "Q4_0", "--synthetic", "--ctx", str(ctx), "--llama-bin", str(llama_bin),
                 "--threads", "2", "--prompt-tokens", "64", "--n-predict", "4", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    assert doc["schema"] == "gemma-fit.smoke/1"
    for term in ("total", "weights", "kv_cache", "compute"):
        assert abs(doc["error_pct"][term]) <= 5.0, (term, doc["error_pct"])
    measured = doc["measured"]
    assert measured["decode_tokens_per_s"] > 0 and measured["prefill_tokens_per_s"] > 0
    assert measured["host"]["peak_rss_bytes"] > measured["host"]["kv_cache_bytes"]


def test_missing_llama_cpp_is_bad_input(tmp_path: Path) -> None:
    proc = smoke("--model", "270m", "--synthetic", "--llama-bin", str(tmp_path))
    assert proc.returncode == 2
    assert "llama-completion not found" in proc.stderr and "Traceback" not in proc.stderr


def _fake_llama(folder: Path, body: str) -> Path:
    exe = folder / "llama-completion"
    exe.write_text(f"#!{sys.executable}\n{body}\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return folder


def test_crashing_llama_cpp_is_reported_with_its_last_lines(tmp_path: Path) -> None:
    body = "import sys\nprint('loading...')\nprint('CUDA error: out of memory')\nsys.exit(134)"
    bin_dir = _fake_llama(tmp_path, body)
    proc = smoke("--model", "270m", "--synthetic", "--llama-bin", str(bin_dir))
    assert proc.returncode == 5
    assert "ran out of memory" in proc.stderr and "CUDA error: out of memory" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_model_path_is_passed_without_a_shell(tmp_path: Path) -> None:
    """The fake llama.cpp echoes its argv: a file name with spaces and shell metacharacters arrives intact."""
    seen = tmp_path / "argv.json"
    body = (f"import json, sys\njson.dump(sys.argv, open({str(seen)!r}, 'w'))\n"
            "print('load_tensors:          CPU model buffer size =   100.00 MiB')\n"
            "print('llama_kv_cache:        CPU KV buffer size =     8.00 MiB')\n"
            "print('sched_reserve:        CPU compute buffer size =   500.00 MiB')")
    bin_dir = _fake_llama(tmp_path, body)
    weird = tmp_path / "my model; $(touch pwned) `x`.gguf"
    subprocess.run([*CLI, "synth", str(weird), "--model", "270m", "--quant", "Q8_0"], check=True, capture_output=True)
    proc = smoke("--gguf", str(weird), "--llama-bin", str(bin_dir), "--json")
    assert proc.returncode == 0, proc.stderr
    argv = json.loads(seen.read_text())
    assert argv[argv.index("-m") + 1] == str(weird)
    assert not (Path.cwd() / "pwned").exists() and not (tmp_path / "pwned").exists()


def test_needs_a_file_or_a_synthetic_model() -> None:
    proc = smoke("--model", "270m")
    assert proc.returncode == 2 and "--gguf FILE, or --model ID --synthetic" in proc.stderr


def test_record_appends_one_json_line_per_run(tmp_path: Path) -> None:
    body = ("print('load_tensors:          CPU model buffer size =   100.00 MiB')\n"
            "print('sched_reserve:        CPU compute buffer size =   500.00 MiB')")
    bin_dir = _fake_llama(tmp_path, body)
    store = tmp_path / "records.jsonl"
    env = dict(os.environ, GEMMA_FIT_SMOKE_RECORDS=str(store))
    for _ in range(2):
        args = ["smoke", "--model", "270m", "--synthetic", "--llama-bin", str(bin_dir), "--record"]
        proc = subprocess.run([*CLI, *args], capture_output=True, text=True, env=env, timeout=120)
        assert proc.returncode == 0, proc.stderr
    lines = store.read_text().splitlines()
    assert len(lines) == 2 and json.loads(lines[0])["schema"] == "gemma-fit.smoke/1"
