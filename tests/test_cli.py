"""The command line as users and CI script it: contract names, JSON keys, exit statuses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

CLI = [sys.executable, "-c", "from gemma_fit.cli.entry import main; main()"]


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300, cwd=cwd, check=False)


def test_check_json_model_block() -> None:
    proc = run("check", "--gpu", "a4000", "--model", "9b", "--quant", "q5_k_m", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["schema"] == "gemma-fit.check/1"
    model = doc["model"]
    assert model["id"] == "gemma-2-9b" and model["quant"] == "Q5_K_M" and model["arch"] == "gemma2"
    assert isinstance(model["n_params"], int) and isinstance(model["file_size_bytes"], int)
    assert model["n_params"] == 9_241_705_984


def test_check_terminal_says_which_model_the_alias_chose() -> None:
    proc = run("check", "--gpu", "h100-sxm", "--model", "27b")
    assert "gemma-3-27b" in proc.stdout and "newest" in proc.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["check", "--gpu", "a4000", "--model", "gemma-99b"], "unknown model"),
        (["check", "--gpu", "a4000", "--model", "9b", "--quant", "Q9_K"], "unknown quant"),
        (["check", "--gpu", "a4000", "--model", "/nonexistent/config.json"], "config file not found"),
        (["check", "--gpu", "nosuch-gpu", "--model", "9b"], "unknown GPU"),
        (["check", "--gpu", "a4000", "--model", "9b", "--ctx", "-1"], "--ctx -1 is impossible"),
        (["check", "--gpu", "a4000", "--model", "9b", "--ctx", "999999999"], "is impossible"),
        (["check", "--gpu", "a4000", "--model", "9b", "-ngl", "-2"], "--n-gpu-layers -2 is impossible"),
        (["check", "--gpu", "a4000", "--model", "9b", "-ngl", "lots"], "must be a number"),
        (["check", "--gpu", "a4000", "--model", "9b", "-ctv", "q8_0", "-fa", "off"], "needs flash attention"),
        (["check", "--gpu", "a4000", "--model", "9b", "-ctk", "q3_k"], "not a llama.cpp cache type"),
        (["check", "--gpu", "a4000", "--model", "9b", "--parallel", "0"], "--parallel 0 is impossible"),
        (["check", "--model", "9b"], "--gpu is required"),
        (["synth", "/nonexistent-dir/x.gguf", "--model", "9b"], "does not exist"),
        (["check", "--bogus-flag"], "No such option"),
    ],
)
def test_bad_input_exits_2_with_one_line(args: list[str], message: str) -> None:
    proc = run(*args)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "Traceback" not in proc.stderr


def test_malformed_model_db_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("id: [\n")
    proc = run("--model-db", str(tmp_path), "list", "models")
    assert proc.returncode == 2
    assert "bad.yaml" in proc.stderr and "malformed YAML" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_list_models_and_quants_json() -> None:
    models = json.loads(run("list", "models", "--json").stdout)
    assert len(models) == 17 and {"id", "arch", "n_params"} <= set(models[0])
    quants = json.loads(run("list", "quants", "--json").stdout)
    assert [q["quant"] for q in quants][:3] == ["Q2_K", "Q3_K_S", "Q3_K_M"]


def test_synth_cli_writes_file(tmp_path: Path) -> None:
    out = tmp_path / "tiny.gguf"
    proc = run("synth", str(out), "--model", "270m", "--quant", "q8_0")
    assert proc.returncode == 0, proc.stderr
    assert out.stat().st_size > 200 * 2**20


def test_an_unset_context_is_the_engines_own_default() -> None:
    ollama = json.loads(run("check", "--gpu", "rtx-3090", "--model", "gemma-3-27b", "--engine", "ollama",
                            "--json").stdout)
    assert ollama["settings"]["n_ctx"] == 32768  # Ollama's rule for 24 GB, not gemma-fit's 4096
    assert any("num_ctx 32768 (by VRAM)" in r for r in ollama["reasons"])
    vllm = json.loads(run("check", "--gpu", "h100-sxm", "--model", "gemma-3-27b", "--engine", "vllm", "--quant",
                          "fp8", "--json").stdout)
    assert "--max-model-len 131072" in vllm["command"]  # vLLM's: the model's full context
    llama = json.loads(run("check", "--gpu", "rtx-3090", "--model", "gemma-3-27b", "--json").stdout)
    s = llama["settings"]  # llama-server's: the trained context lowered by --fit to what 24 GB hold, 4 slots
    assert 4096 < s["n_ctx"] < 131072 and s["n_parallel"] == 4 and s["kv_unified"]
    assert s["defaults_from"] == "llama-server 0c1e570"
    asked = json.loads(run("check", "--gpu", "rtx-3090", "--model", "gemma-3-27b", "--parallel", "1", "--json").stdout)
    assert asked["settings"]["n_ctx"] == 4096  # --parallel given: llama.cpp's -c as gemma-fit answers for it


@pytest.mark.parametrize(("args", "status"), [(["--version"], 0), (["check", "--gpu", "nope", "--model", "9b"], 2)])
def test_the_program_exits_fast_but_keeps_exit_handlers_and_statuses(args: list[str], status: int) -> None:
    """`run` (the installed script) skips the interpreter's teardown: exit handlers still run, output is flushed
    and the status is main's."""
    code = ("import atexit, sys\natexit.register(lambda: print('handler ran', file=sys.stderr))\n"
            "from gemma_fit.cli.entry import run\nrun()")
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300)
    assert proc.returncode == status
    assert proc.stderr.endswith("handler ran\n")
    assert ("gemma-fit 0." in proc.stdout) == (status == 0)
