"""What each engine does with its own defaults, by version: `check` with neither --ctx nor --parallel answers for
llama-server's fitted trained context and auto slots (llama.cpp 0c1e570, model_db/llamacpp/server_defaults.yaml),
Ollama's v0.30+ flash attention and batch, and says which version an answer is for."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gemma_fit.engines.llamacpp_defaults import server_defaults
from gemma_fit.engines.ollama import auto_num_batch
from gemma_fit.hardware.catalog import load_gpus

CLI = [sys.executable, "-c", "from gemma_fit.cli.entry import main; main()"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300, check=False)


def check_json(*args: str) -> dict[str, Any]:
    proc = run("check", *args, "--json")
    assert proc.returncode in (0, 3, 4), proc.stderr
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


def test_no_ctx_and_no_parallel_is_what_llama_server_does_by_itself() -> None:
    doc = check_json("--gpu", "rtx-4090", "--model", "gemma-3-4b")
    s = doc["settings"]
    assert (s["n_ctx"], s["n_parallel"], s["kv_unified"]) == (131072, 4, True)  # trained context, 4 slots, one cache
    assert s["defaults_from"] == "llama-server 0c1e570" and s["engine_version"] == "llama.cpp 0c1e570"
    cmd = shlex.split(doc["llama_server_command"])
    assert cmd[cmd.index("-c") + 1] == "131072" and cmd[cmd.index("-np") + 1] == "4" and "--kv-unified" in cmd
    assert any("llama-server 0c1e570 does by itself" in r for r in doc["reasons"])


def test_the_fit_lowers_the_trained_context_to_what_memory_holds() -> None:
    s = check_json("--gpu", "rtx-4060", "--model", "gemma-3-12b")["settings"]
    assert 4096 <= s["n_ctx"] < 131072 and s["n_ctx"] % 256 == 0


def test_a_context_or_parallel_given_keeps_the_answer_as_asked() -> None:
    for args in (("--ctx", "8192"), ("--parallel", "2")):
        s = check_json("--gpu", "rtx-4090", "--model", "gemma-3-4b", *args)["settings"]
        assert "defaults_from" not in s and s["engine_version"] == "llama.cpp 0c1e570"
        assert not s["kv_unified"]


@pytest.mark.parametrize(("version", "n_ctx", "n_parallel", "fa"), [
    ("b5000", 4096, 1, None), ("6890", 4096, 1, "on"), ("b7000", 4096, 4, "on"), ("b7407", 131072, 4, "on"),
])
def test_an_older_llama_cpp_answers_with_its_own_defaults(version: str, n_ctx: int, n_parallel: int,
                                                         fa: str | None) -> None:
    doc = check_json("--gpu", "rtx-4090", "--model", "gemma-3-4b", "--engine-version", version)
    s = doc["settings"]
    assert (s["n_ctx"], s["n_parallel"]) == (n_ctx, n_parallel)
    assert s["defaults_from"] == f"llama-server b{version.lstrip('b')}"
    cmd = shlex.split(doc["llama_server_command"])
    if fa is None:  # before b6325 -fa was a bare switch, and flash attention was off by default
        assert "-fa" not in cmd
    else:
        assert cmd[cmd.index("-fa") + 1] == fa


def test_a_version_without_rules_is_one_line_and_exit_2() -> None:
    for args in (("--engine-version", "latest"), ("--engine", "vllm", "--engine-version", "0.7.0"),
                 ("--engine", "ollama", "--engine-version", "0.9.0"),
                 ("--engine", "transformers", "--engine-version", "4.50")):
        proc = run("check", "--gpu", "a4000", "--model", "9b", *args)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--engine-version" in proc.stderr


def test_the_defaults_table_is_ordered_and_sourced() -> None:
    assert server_defaults(None)[1].fit and server_defaults("b7406")[1].n_ctx == 4096
    assert server_defaults("b6924")[1].n_parallel == 1 and server_defaults("b6925")[1].kv_unified


def test_ollama_leaves_flash_attention_to_llama_server_and_picks_num_batch_by_context() -> None:
    doc = check_json("--gpu", "rtx-4090", "--model", "gemma-2-9b", "--engine", "ollama")
    assert "OLLAMA_FLASH_ATTENTION" not in doc["command"]
    assert doc["ollama"]["num_batch"] == 1024  # its 8,192-token context: 1,024
    gpu = load_gpus(())["rtx-4060"]
    assert [auto_num_batch(n, True, gpu) for n in (4096, 8192, 65536)] == [512, 1024, 2048]
    assert auto_num_batch(8192, False, gpu) == 256  # CUDA without flash attention on an 8 GB card


def _terminal(*args: str) -> str:
    proc = subprocess.run([*CLI, "check", *args], capture_output=True, text=True, timeout=300, check=False,
                          env={**__import__("os").environ, "COLUMNS": "80"})
    assert proc.returncode in (0, 3, 4), proc.stderr
    return proc.stdout


def test_commands_paste_from_the_terminal_as_printed(tmp_path: Any) -> None:
    """Copied from the terminal as a user copies them: the shell line parses as a shell would, the Python snippet
    compiles, and a local config.json is loaded from its folder (not a made-up google/<folder> repository)."""
    folder = tmp_path / "my model"
    folder.mkdir()
    (folder / "config.json").write_text(Path("tests/data/gemma-3-4b-it.config.json").read_text())
    out = _terminal("--gpu", "a4000", "--model", str(folder / "config.json"), "--engine", "transformers")
    snippet = out.split("run it (Python):\n", 1)[1]
    compile(snippet, "<pasted>", "exec")  # a SyntaxError fails the test
    assert f"from_pretrained({json.dumps(str(folder))}" in snippet
    for engine in ("vllm", "llama.cpp", "ollama"):
        line = next(x for x in _terminal("--gpu", "a4000", "--model", str(folder / "config.json"), "--engine",
                                         engine).splitlines() if x.startswith("  run it: "))
        words = shlex.split(line.removeprefix("  run it: "))
        if engine == "vllm":
            assert words[:3] == ["vllm", "serve", str(folder)]


def test_the_installed_llama_server_s_version_is_the_one_answered_for(tmp_path: Any) -> None:
    """Without --engine-version, a llama-server on PATH is asked its version (`version: N (commit)` on stderr)."""
    import os

    fake = tmp_path / "llama-server"
    fake.write_text("#!/bin/sh\necho 'version: 6000 (abc1234)' >&2\necho 'built with cc' >&2\n")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"}
    env.pop("GEMMA_FIT_NO_ENGINE_PROBE", None)
    proc = subprocess.run([*CLI, "check", "--gpu", "rtx-4090", "--model", "gemma-3-4b", "--json"], capture_output=True,
                          text=True, timeout=300, env=env, check=False)
    s = json.loads(proc.stdout)["settings"]
    assert s["engine_version"] == "llama.cpp b6000" and (s["n_ctx"], s["n_parallel"]) == (4096, 1)
    asked = subprocess.run([*CLI, "check", "--gpu", "rtx-4090", "--model", "gemma-3-4b", "--engine-version", "0c1e570",
                            "--json"], capture_output=True, text=True, timeout=300, env=env, check=False)
    assert json.loads(asked.stdout)["settings"]["n_parallel"] == 4  # --engine-version wins over the installed one


@pytest.mark.parametrize(("version", "util", "dtype"), [("0.9.0", 0.9, "fp16"), ("0.19.1", 0.9, "fp32"),
                                                        (None, 0.92, "fp32")])
def test_vllm_defaults_by_release(version: str | None, util: float, dtype: str) -> None:
    """gpu_memory_utilization 0.92 from 0.20.0 (0.9 before); Gemma 3 on a T4 in float32 from 0.9.1 (float16 before)."""
    doc = check_json("--gpu", "t4", "--model", "gemma-3-4b", "--engine", "vllm",
                     *(("--engine-version", version) if version else ()))
    assert doc["model"]["quant"] == dtype and f"--gpu-memory-utilization {util:g}" in doc["command"]
    assert doc["settings"]["engine_version"] == f"vLLM {version or '0.33.0'}"


@pytest.mark.parametrize(("version", "num_ctx", "fa", "num_batch"), [
    ("0.12.0", 4096, "OLLAMA_FLASH_ATTENTION=0", 512),  # before tiers by VRAM and gemma3's flash attention
    ("0.20.4", 32768, "OLLAMA_FLASH_ATTENTION=1", 512),  # gemma3 on by default since 0.12.6
    ("0.33.0", 32768, None, 1024),  # llama-server's auto, num_batch by context
])
def test_ollama_defaults_by_release(version: str, num_ctx: int, fa: str | None, num_batch: int) -> None:
    doc = check_json("--gpu", "rtx-4090", "--model", "gemma-3-12b", "--engine", "ollama", "--engine-version", version)
    assert doc["ollama"]["num_ctx"] == num_ctx and doc["ollama"]["num_batch"] == num_batch
    assert (fa in doc["command"]) if fa else "OLLAMA_FLASH_ATTENTION" not in doc["command"]


def test_vllm_before_the_hybrid_kv_cache_manager_plans_sliding_layers_at_full_length() -> None:
    """Before the hybrid KV cache manager, vLLM's V1 planned a sliding-window layer's KV cache as a full-attention
    one's: Gemma 3 12B's 40 sliding layers (of 48) then hold whole requests, so the pool holds several times fewer
    32k-token requests; the answer says which rule it used."""
    new = check_json("--gpu", "a40", "--model", "gemma-3-12b", "--engine", "vllm", "--ctx", "32768")
    old = check_json("--gpu", "a40", "--model", "gemma-3-12b", "--engine", "vllm", "--ctx", "32768",
                     "--engine-version", "0.9.0")
    assert new["vllm"]["max_concurrency"] > 3 * old["vllm"]["max_concurrency"] > 0
    assert any("hybrid KV cache manager)" in r for r in new["reasons"])
    assert any(r.startswith("vLLM 0.9.0 plans the sliding-window layers' KV cache at the full request length")
               for r in old["reasons"])
