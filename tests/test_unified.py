"""Unified memory (Apple Silicon, Jetson, Strix Halo, DGX Spark): one pool for the GPU side and the host
side, the GPU's own ceiling inside it, and the setting that raises that ceiling. Worked examples per
platform; the pool arithmetic is checked term by term against the estimate's own parts."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from gemma_fit import RunSettings, check, to_json
from gemma_fit.hardware.select import select_hardware
from gemma_fit.memory.unified import GIB, gpu_ceiling, platform, pool_capacity

MIB = 1024**2


def _pool(result):  # type: ignore[no-untyped-def]
    pool = result.detail.estimate.unified_pool
    assert pool is not None
    return pool


def test_the_pool_is_the_gpu_side_plus_the_host_side() -> None:
    r = check("gemma-3-12b", "jetson-orin-nano-super")
    est = r.detail.estimate
    pool = _pool(r)
    assert pool.gpu_bytes == est.devices[0].total_bytes
    assert pool.host_bytes == est.host.total_bytes
    assert pool.total_bytes == pool.gpu_bytes + pool.host_bytes
    assert est.host.capacity_bytes is None  # no second pool
    assert pool.total_bytes > 9 * GIB  # 9.1 GiB on an 8 GB board: the example
    assert r.verdict == "no-go" and "unified memory" in r.reasons[0]
    assert "host_ram" not in r.detail.fit.unchecked  # the memory is known: it is the pool


def test_jetson_pool_is_what_linux_sees_less_its_reserve() -> None:
    gpu = select_hardware(["jetson-orin-nano-super"], None, ()).gpus[0]
    p = platform(gpu)
    assert p is not None and p.id == "l4t" and p.os_sees_usable and not p.gpu_ceiling_usable
    assert pool_capacity(gpu) == gpu.usable_memory_bytes - p.reserve_bytes
    assert gpu_ceiling(gpu) == pool_capacity(gpu)  # CUDA draws on the whole pool


def test_a_small_model_on_jetson_counts_the_host_side_against_the_same_memory() -> None:
    r = check("gemma-3n-E4B", "jetson-orin-nano-super")
    pool = _pool(r)
    device_room = r.detail.estimate.devices[0].headroom_bytes
    assert pool.headroom_bytes < device_room  # the host side's 2 GiB is no longer "to spare"
    assert r.verdict in ("tight", "go")
    assert to_json(r)["memory"]["unified_pool"]["headroom_bytes"] == pool.headroom_bytes


def test_mac_metal_limit_binds_and_the_sysctl_is_advised() -> None:
    r = check("gemma-3-27b", "m4-max-64gb", quant="BF16")
    pool = _pool(r)
    gpu = r.hardware.gpus[0]
    assert gpu.memory_bytes == 64 * GIB and pool.gpu_limit_bytes == 48 * GIB  # 3/4 of 64 GB
    assert pool.capacity_bytes == 64 * GIB - platform(gpu).reserve_bytes  # type: ignore[union-attr]
    assert r.verdict == "offload"
    lever = r.detail.fit.suggestion or ""
    assert "sudo sysctl iogpu.wired_limit_mb=" in lever
    mib = int(lever.split("iogpu.wired_limit_mb=")[1].split()[0])
    full = check("gemma-3-27b", "m4-max-64gb", quant="BF16", settings=RunSettings(n_gpu_layers=63))
    assert mib * MIB >= _pool(full).gpu_bytes + GIB  # every layer on the GPU, with llama.cpp's margin
    assert mib * MIB <= pool.capacity_bytes


def test_mac_with_room_has_no_lever() -> None:
    r = check("gemma-3-27b", "m4-max-64gb")
    assert r.verdict == "go" and "sysctl" not in " ".join(r.reasons)
    assert _pool(r).headroom_bytes > 0


def test_strix_halo_gtt_limit_and_its_lever() -> None:
    r = check("gemma-3-27b", "ryzen-ai-max-395-64gb", quant="BF16")
    pool = _pool(r)
    assert pool.gpu_limit_bytes == 32 * GIB  # GTT: half of RAM by default
    assert "ttm pages_limit=" in (r.detail.fit.suggestion or "")


def test_dgx_spark_gpu_draws_on_the_whole_pool() -> None:
    r = check("gemma-3-27b", "dgx-spark", quant="BF16")
    pool = _pool(r)
    assert pool.gpu_limit_bytes == pool.capacity_bytes
    assert r.verdict == "go"


def test_the_pool_is_never_go_when_it_cannot_hold_the_model() -> None:
    for gpu in ("jetson-orin-nano-super", "m1-8gb", "m4-16gb", "ryzen-ai-max-395-32gb"):
        for model, quant in (("gemma-3-27b", "Q4_K_M"), ("gemma-3-12b", "Q8_0")):
            r = check(model, gpu, quant=quant)
            pool = _pool(r)
            if pool.total_bytes > pool.capacity_bytes:
                assert r.verdict == "no-go", (gpu, model)


def test_discrete_gpus_have_no_pool() -> None:
    r = check("9b", "a4000")
    assert r.detail.estimate.unified_pool is None
    assert "unified_pool" not in to_json(r)["memory"]


@pytest.mark.parametrize("gpu", ["m4-max-64gb", "jetson-orin-nano-super"])
def test_terminal_shows_one_pool(gpu: str) -> None:
    env = {**os.environ, "COLUMNS": "200"}  # one line per table row
    done = subprocess.run([sys.executable, "-m", "gemma_fit", "check", "--gpu", gpu, "--model", "gemma-3-12b"],
                          capture_output=True, text=True, timeout=300, check=False, env=env)
    assert "unified memory" in done.stdout and "host side (same memory)" in done.stdout
    assert "host RAM not checked" not in done.stdout


def test_json_pool_keys_follow_the_contract() -> None:
    done = subprocess.run([sys.executable, "-m", "gemma_fit", "check", "--gpu", "m4-max-64gb", "--model",
                           "gemma-3-27b", "--json"], capture_output=True, text=True, timeout=300, check=False)
    pool = json.loads(done.stdout)["memory"]["unified_pool"]
    assert {"capacity_bytes", "gpu_limit_bytes", "total_bytes", "headroom_bytes"} <= set(pool)
    assert pool["headroom_bytes"] == pool["capacity_bytes"] - pool["total_bytes"]


def test_html_shows_one_pool(tmp_path) -> None:  # type: ignore[no-untyped-def]
    page = tmp_path / "mac.html"
    done = subprocess.run([sys.executable, "-m", "gemma_fit", "check", "--gpu", "m4-max-64gb", "--model",
                           "gemma-3-27b", "--quant", "BF16", "--html", str(page)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 3, done.stderr  # offload: the Metal limit keeps 6 layers off the GPU
    html = page.read_text(encoding="utf-8")
    assert "unified memory (GPU side + host side)" in html and "host side (same memory)" in html
    assert "iogpu.wired_limit_mb=" in html


def test_an_8gb_mac_runs_gemma_3_4b_q8_0_at_4k_entirely_on_the_gpu() -> None:
    """Metal uses the mapped model file in place: the GPU side's weights and the host side's (the input embedding)
    are one set of pages, counted once in the pool; macOS keeps its measured wired memory, not a 4 GiB budget."""
    r = check("gemma-3-4b", "m1-8gb", quant="Q8_0", settings=RunSettings(n_ctx=4096))
    pool = _pool(r)
    plan = r.detail.plan
    assert r.detail.fit.n_gpu_layers == plan.model.n_layer + 1 and r.verdict in ("go", "tight")
    est = r.detail.estimate
    both = est.devices[0].weights_bytes + est.host.weights_bytes
    assert pool.shared_bytes == both - plan.tensor_data_bytes > 0  # together they map the file's data once
    assert pool.total_bytes == pool.gpu_bytes + pool.host_bytes - pool.shared_bytes
    assert pool.platform.reserve_measured and pool.platform.reserve_bytes < 4 * GIB


def test_weights_are_counted_twice_where_the_gpu_copies_them() -> None:
    for gpu in ("jetson-orin-nano-super", "dgx-spark", "ryzen-ai-max-395-128gb"):  # CUDA and ROCm copy the weights
        assert _pool(check("gemma-3-4b", gpu)).shared_bytes == 0
    moved = check("gemma-3-4b", "m1-8gb", quant="Q4_K_M", settings=RunSettings(n_ctx=4096, cpu_moe=False,
                                                                               override_tensor=("ffn_down=CPU",)))
    assert _pool(moved).shared_bytes == 0  # an override buffer is a copy of its own


def test_llama_cpp_s_fit_plans_against_metal_s_working_set_not_the_pool() -> None:
    """Metal reports recommendedMaxWorkingSetSize as the device's total; llama.cpp's --fit keeps its 1 GiB of that,
    so on an 8 GB Mac (pool 4.65 GiB, working set 5.33 GiB) it sees 0.68 GiB more than the estimate's ceiling."""
    from gemma_fit.memory.unified import fit_view_extra_bytes

    m1 = select_hardware(["m1-8gb"], None, ()).gpus
    assert fit_view_extra_bytes(m1) == m1[0].usable_memory_bytes - gpu_ceiling(m1[0]) > 600 * MIB
    assert fit_view_extra_bytes(select_hardware(["jetson-orin-nano-super"], None, ()).gpus) == 0
    assert fit_view_extra_bytes(select_hardware(["rtx-4090"], None, ()).gpus) == 0
