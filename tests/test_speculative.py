"""Speculative decoding (--mtp, --draft): the drafter's memory on the main GPU, the speed-up model, the printed
llama.cpp command, and the published acceptance turned into a per-draft probability."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import LLAMA_THREADS, run_llama
from hypothesis import given
from hypothesis import strategies as st

from gemma_fit.api import check as api_check
from gemma_fit.base.units import MIB
from gemma_fit.engines.mtp import drafter_for, drafters_table
from gemma_fit.engines.speculative import draft_memory, per_draft_probability
from gemma_fit.hardware.select import hardware_of
from gemma_fit.memory.settings import RunSettings, Speculative
from gemma_fit.speed.speculative import tokens_per_step

CLI = [sys.executable, "-c", "from gemma_fit.cli.entry import main; main()"]


def check(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, "check", *args], capture_output=True, text=True, timeout=300, check=False)


def test_tokens_per_step_by_hand() -> None:
    assert tokens_per_step(0.0, 3) == 1.0
    assert tokens_per_step(0.5, 1) == pytest.approx(1.5)
    assert tokens_per_step(0.5, 3) == pytest.approx(1 + 0.5 + 0.25 + 0.125)
    assert tokens_per_step(1.0, 4) == 5.0


@given(st.floats(0.05, 0.98), st.integers(1, 12))
def test_per_draft_probability_inverts_the_accepted_share(p: float, k: int) -> None:
    share = p * (1 - p**k) / ((1 - p) * k)
    assert per_draft_probability(share, k) == pytest.approx(p, abs=1e-6)


def test_the_31b_drafter_counted_matches_its_published_file() -> None:
    """ggml-org's mtp-gemma-4-31B-it-Q8_0.gguf is 514,687,104 bytes; the tensors counted come within 0.1%."""
    row = next(r for r in drafters_table() if r["target"] == "gemma-4-31B")
    assert abs(row["counted_bytes"] / row["published_bytes"] - 1) < 0.001


def test_mtp_check_memory_speed_and_command() -> None:
    base = ("--model", "gemma-4-31B", "--gpu", "rtx-pro-6000", "--ctx", "16k", "--json")
    plain = json.loads(check(*base).stdout)
    proc = check(*base, "--mtp")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    dev, dev0 = doc["memory"]["devices"][0], plain["memory"]["devices"][0]
    assert dev["draft_bytes"] > 514_687_104 and dev0["draft_bytes"] == 0  # the file's weights and a compute buffer
    assert dev["total_bytes"] - dev0["total_bytes"] >= dev["draft_bytes"]
    assert dev["kv_cache_bytes"] == dev0["kv_cache_bytes"]  # the drafter reads the target's cache: none of its own
    spec = doc["performance"]["speculative"]
    assert set(spec) >= {"method", "draft_model", "draft_quant", "draft_max", "acceptance_rate", "acceptance_source",
                         "tokens_per_step", "speedup"}
    assert spec["method"] == "mtp" and spec["draft_max"] == 3 and "github.com/ggml-org/llama.cpp/pull/23398" in \
        spec["acceptance_source"]
    assert doc["performance"]["decode_tokens_per_s"] == pytest.approx(
        plain["performance"]["decode_tokens_per_s"] * spec["speedup"], rel=0.02)
    assert "-md mtp-gemma-4-31B-it-Q8_0.gguf --spec-type draft-mtp --spec-draft-n-max 3" in doc["llama_server_command"]


def test_the_gain_shrinks_as_requests_are_batched() -> None:
    """A memory-bound target (31B on Strix Halo): each verification's extra tokens cost more once the batch's
    arithmetic counts, and the drafter's steps grow with the batch."""
    proc = check("--model", "gemma-4-31B", "--gpu", "ryzen-ai-max-395-128gb", "--mtp", "--parallel", "16", "--ctx",
                 "32k", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)["performance"]["speculative"]["scaling"]
    gains = [r["speedup"] for r in rows]
    assert gains == sorted(gains, reverse=True) and gains[0] > gains[-1]


def test_draft_model_and_given_acceptance() -> None:
    proc = check("--model", "gemma-3-27b", "--gpu", "rtx-4090", "--draft", "gemma-3-270m:Q8_0", "--acceptance", "0.6",
                 "--draft-max", "2", "--ctx", "8k", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    spec = doc["performance"]["speculative"]
    assert (spec["draft_model"], spec["draft_quant"], spec["acceptance_rate"], spec["acceptance_source"]) == \
        ("gemma-3-270m", "Q8_0", 0.6, "given (--acceptance)")
    assert spec["tokens_per_step"] == pytest.approx(1 + 0.6 + 0.36, abs=1e-3)
    assert "-md gemma-3-270m-Q8_0.gguf --spec-type draft-simple --spec-draft-n-max 2" in doc["llama_server_command"]
    assert doc["memory"]["devices"][0]["draft_bytes"] > 250_000_000  # 270M at Q8_0 and its own KV cache


@pytest.mark.parametrize("args", [
    ("--model", "gemma-3-27b", "--mtp"),  # no MTP drafter for Gemma 3
    ("--model", "gemma-4-31B", "--mtp", "--draft", "gemma-4-E2B"),
    ("--model", "gemma-3-27b", "--draft", "gemma-2-2b"),  # another tokenizer
    ("--model", "gemma-3-1b", "--draft", "gemma-3-27b"),  # bigger than the target
    ("--model", "gemma-4-31B", "--mtp", "--draft-max", "0"),
    ("--model", "gemma-4-31B", "--mtp", "--acceptance", "1.5"),
    ("--model", "gemma-4-31B", "--draft-max", "4"),  # no drafter
    ("--model", "gemma-4-31B", "--draft", "gemma-4-E2B", "--engine", "vllm"),  # vLLM: --mtp only
    ("--model", "gemma-4-12B", "--mtp", "--engine", "vllm"),  # a nightly-only path
    ("--model", "gemma-4-31B", "--mtp", "--engine", "vllm", "--engine-version", "0.20.1"),
    ("--model", "gemma-4-31B", "--mtp", "--engine", "ollama", "--engine-version", "0.29.0"),
    ("--model", "gemma-4-31B", "--draft", "gemma-4-E2B", "--engine", "ollama"),
])
def test_speculative_bad_input_is_one_line(args: tuple[str, ...]) -> None:
    proc = check(*args, "--gpu", "rtx-4090")
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def _contexts(log: str) -> list[dict[str, float]]:
    """llama.cpp's buffer lines (MiB) per context it created, in order: model, KV, compute."""
    out: list[dict[str, float]] = []
    model = 0.0
    for line in log.splitlines():
        m = re.search(r"(\w+) (model|KV|compute) buffer size =\s+([\d.]+) MiB", line)
        if m is None:
            continue
        kind, mib = m.group(2), float(m.group(3))
        if kind == "model":
            if out and out[-1].get("compute"):
                model = 0.0
            model += mib if m.group(1) != "CPU_REPACK" else 0.0
            continue
        if kind == "KV" and (not out or out[-1].get("compute")):
            out.append({"model": model, "KV": 0.0, "compute": 0.0})
        out[-1][kind] += mib
    return out


@pytest.mark.llamacpp
def test_draft_memory_is_llama_cpps_own(llama_bin: Path, synth: Any) -> None:
    """llama-speculative-simple builds its draft context as llama-server does (common_base_params_to_speculative):
    zero-weight files of Gemma 3 1B (target) and 270M (draft) on the CPU; the draft's weights, KV cache and compute
    buffer are gemma-fit's estimate, and the target keeps logits for 1 + 3 outputs."""
    target, draft = synth("gemma-3-1b", "Q4_0"), synth("gemma-3-270m", "Q8_0")
    proc = run_llama(llama_bin, "llama-speculative-simple", "-m", str(target.path), "-md", str(draft.path),
                     "--spec-type", "draft-simple", "-c", "4096", "-n", "2", "-p", "aaaa", "-t", LLAMA_THREADS,
                     "-ngl", "0", "-ngld", "0", "--temp", "0", "--fit", "off", "-lv", "4")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    tgt, dft = _contexts(proc.stdout + proc.stderr)
    spec = Speculative("draft", "gemma-3-270m", "Q8_0", 3, 0.6, "given", "gemma-3-270m-Q8_0.gguf")
    mem = draft_memory(spec, RunSettings(n_ctx=4096), hardware_of(["cpu"]))
    assert mem.weights_bytes / MIB == pytest.approx(dft["model"], abs=0.01)
    assert mem.kv_cache_bytes / MIB == pytest.approx(dft["KV"], abs=0.01)
    assert mem.compute_bytes / MIB == pytest.approx(dft["compute"], rel=0.01)
    r = api_check("gemma-3-1b", ["cpu"], quant="Q4_0", settings=RunSettings(n_ctx=4096, speculative=Speculative(
        "draft", "gemma-3-270m", "Q8_0", 3, 0.6)))
    assert r.detail.settings.n_outputs_max == 4
    assert r.detail.estimate.host.compute_bytes / MIB == pytest.approx(tgt["compute"], rel=0.01)


def test_a_fast_small_target_is_told_the_drafter_does_not_pay() -> None:
    """Gemma 4 E2B on an RTX 4090 decodes a token in ~4 ms: llama.cpp's per-draft host work (fitted, ~4 ms) outweighs
    what the drafts save, so the answer says it does not pay."""
    proc = check("--model", "gemma-4-E2B", "--gpu", "rtx-4090", "--mtp", "--ctx", "8k", "--json")
    assert proc.returncode == 0, proc.stderr
    perf = json.loads(proc.stdout)["performance"]
    assert perf["speculative"]["pays"] is False and perf["speculative"]["speedup"] < 1
    assert any("does not pay" in n for n in perf["notes"])


def test_the_other_commands_take_the_drafter() -> None:
    """serve-plan, recommend and report take --mtp as check does; a model without a drafter is said so."""
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300, check=False)

    plan = run("serve-plan", "--model", "gemma-4-31B", "--gpu", "rtx-4090", "--parallel", "4", "--mtp", "--json")
    assert plan.returncode == 0, plan.stderr
    doc = json.loads(plan.stdout)
    assert doc["performance"]["speculative"]["method"] == "mtp" and "--spec-type draft-mtp" in doc["commands"][-1]
    rec = run("recommend", "--gpu", "rtx-4090", "--ctx", "8k", "--mtp", "--json")
    assert rec.returncode == 0, rec.stderr
    cands = json.loads(rec.stdout)["candidates"]
    assert cands and all(c["model"].startswith("gemma-4-") and "draft-mtp" in c["command"] for c in cands)
    rep = run("report", "--gpu", "rtx-4090", "--model", "gemma-3-27b", "--model", "gemma-4-31B", "--quant", "q4_k_m",
              "--ctx", "8k", "--mtp")
    assert rep.returncode == 0, rep.stderr
    assert "gemma-3-27b has no MTP drafter" in rep.stdout


def test_vllm_mtp_memory_speed_and_command() -> None:
    """vLLM loads the assistant in bfloat16 beside the target, shares the target's KV cache, and takes
    --speculative-config with the recipe's drafts (4 for the 31B)."""
    base = ("--model", "gemma-4-31B", "--gpu", "h200-sxm", "--engine", "vllm", "--ctx", "16k", "--json")
    plain, mtp = json.loads(check(*base).stdout), json.loads(check(*base, "--mtp").stdout)
    dev, dev0 = mtp["memory"]["devices"][0], plain["memory"]["devices"][0]
    assert dev["draft_bytes"] == drafter_for("gemma-4-31B").params * 2 and dev0["draft_bytes"] == 0  # bfloat16
    assert dev["weights_bytes"] == dev0["weights_bytes"]
    assert dev0["kv_cache_bytes"] - dev["kv_cache_bytes"] >= dev["draft_bytes"] - 2 * 2**20  # the pool gives it up
    config = '{"method": "mtp", "model": "google/gemma-4-31B-it-assistant", "num_speculative_tokens": 4}'
    assert mtp["command"].endswith(f"--speculative-config '{config}'")
    spec = mtp["performance"]["speculative"]
    assert spec["draft_quant"] == "bf16" and spec["draft_max"] == 4 and spec["speedup"] > 1


def test_ollama_mtp_is_a_modelfile_draft() -> None:
    """Ollama 0.30+ runs llama-server and hands a Modelfile's DRAFT to it as an MTP drafter: the same memory and speed
    as llama.cpp's, draft_num_predict 4 by default, and a command that creates the model with its DRAFT line."""
    proc = check("--model", "gemma-4-31B", "--gpu", "rtx-4090", "--engine", "ollama", "--mtp", "--json")
    assert proc.returncode in (0, 3), proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["memory"]["devices"][0]["draft_bytes"] > 514_687_104
    assert doc["performance"]["speculative"]["draft_max"] == 4
    assert "DRAFT ./mtp-gemma-4-31B-it-Q8_0.gguf" in doc["command"] and "draft_num_predict 4" in doc["command"]
    assert "ollama create " in doc["command"]


@pytest.mark.llamacpp
def test_mtp_drafter_memory_is_llama_cpps_own(llama_bin: Path, synth: Any, tmp_path: Path) -> None:
    """A zero-weight Gemma 4 E2B target and its assistant drafter (engines/mtp_file.py) on llama.cpp's CPU build:
    the drafter context shares the target's KV cache (no KV buffer of its own), and its compute buffer is
    gemma-fit's (the per-token figure of drafters.yaml beside the attention mask), its logits buffer one output."""
    from gemma_fit.engines.mtp_file import write_drafter_gguf
    from gemma_fit.model.catalog import resolve_model

    target = synth("gemma-4-E2B", "Q4_0")
    drafter = drafter_for("gemma-4-E2B")
    path = tmp_path / "mtp-gemma-4-E2B.gguf"
    write_drafter_gguf(drafter, resolve_model("gemma-4-E2B", ()).spec, path)
    proc = run_llama(llama_bin, "llama-speculative-simple", "-m", str(target.path), "-md", str(path), "--spec-type",
                     "draft-mtp", "-c", "4096", "-n", "1", "-p", "aaaa", "-t", LLAMA_THREADS, "-ngl", "0", "-ngld",
                     "0", "--temp", "0", "--fit", "off", "-lv", "4")
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-2000:]
    after = log[log.rindex("CPU_Mapped model buffer size"):]  # the drafter's context comes last
    assert "KV buffer size" not in after and "sharing with layer" in after
    compute = float(re.findall(r"CPU compute buffer size =\s+([\d.]+) MiB", after)[-1])
    output = float(re.findall(r"CPU  output buffer size =\s+([\d.]+) MiB", after)[-1])
    expected = drafter.compute_bytes(RunSettings(n_ctx=4096), 4096) / MIB
    assert compute + output == pytest.approx(expected, abs=0.01)


def test_on_several_gpus_the_drafter_is_pinned_where_it_is_counted() -> None:
    proc = check("--model", "gemma-4-31B", "--gpu", "rtx-3090", "--gpu", "rtx-3090", "--mtp", "--ctx", "16k", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["llama_server_command"].endswith("--spec-draft-device CUDA0")
    assert doc["memory"]["devices"][0]["draft_bytes"] > 0 and doc["memory"]["devices"][1]["draft_bytes"] == 0
