"""Jetson power modes (hardware_db/power_modes.yaml, hardware.power): what a module delivers in each nvpmodel mode."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gemma_fit.base.errors import BadInput
from gemma_fit.hardware.flags import MachineFlags, power_modes
from gemma_fit.hardware.select import hardware_of

CLI = [sys.executable, "-c", "from gemma_fit.cli.entry import main; main()"]


def _hw(gpu: str, mode: str | None = None):  # noqa: ANN202 - a Hardware
    return hardware_of([gpu], None, (), MachineFlags(power_mode=mode) if mode else None)


def test_without_a_mode_the_answer_names_the_modes_its_figures_are_and_the_one_a_module_boots_in() -> None:
    (note,) = [n for n in _hw("jetson-agx-orin-64gb").notes if "power mode" in n]
    assert "are power mode MAXN (sudo nvpmodel -m 0)" in note
    assert "boots in MODE_30W (nvpmodel -m 2): --power-mode MODE_30W" in note
    assert not any("power mode" in n for n in _hw("rtx-4090").notes)


def test_a_mode_scales_matrix_throughput_by_clock_and_tpcs_and_bandwidth_by_the_memory_clock() -> None:
    maxn, thirty = _hw("jetson-agx-orin-64gb").gpus[0], _hw("jetson-agx-orin-64gb", "MODE_30W")
    g = thirty.gpus[0]
    # nvpmodel_p3701_0000.conf MODE_30W: GPU MAX_FREQ 612 MHz, TPC_PG_MASK 240 (4 of 8 TPCs on), EMC uncapped
    exponent = power_modes()["jetson-agx-orin-64gb"].matrix_exponent
    assert g.int8_tensor_tops == pytest.approx(maxn.int8_tensor_tops * (612 / 1300 * 4 / 8) ** exponent, rel=1e-3)
    assert g.memory_bandwidth_gbps == maxn.memory_bandwidth_gbps and g.boost_clock_mhz == 612
    assert thirty.cpu_cores == 8 and any("sudo nvpmodel -m 2" in n for n in thirty.notes)
    fifteen = _hw("jetson-agx-orin-64gb", "15w").gpus[0]  # EMC capped at 2133 MHz
    assert fifteen.memory_bandwidth_gbps == pytest.approx(204.8 * 2133 / 3200, abs=0.05)


@pytest.mark.parametrize(("typed", "name"), [("MAXN", "MAXN_SUPER"), ("maxn_super", "MAXN_SUPER"), ("25w", "25W"),
                                             ("1", "25W")])
def test_modes_are_found_as_nvpmodel_names_them_or_by_id(typed: str, name: str) -> None:
    modes = power_modes()["jetson-orin-nano-super"]
    found = modes.find(typed)
    assert found is not None and found.name == name


def test_prefill_follows_the_clocks_as_far_as_published_pairs_show() -> None:
    """One published pair (DeepSeek-R1-Distill-Qwen-32B Q4_K_M, llama-bench pp512 on an AGX Orin 64GB): MAXN 201.73,
    MODE_30W 128.64 tok/s, 1.57x for 4.25x the clocks x TPCs. The fitted exponent gives Gemma 3 27B about that."""
    from gemma_fit.hardware.power import fit_matrix_exponent

    assert fit_matrix_exponent([]) == 1.0 and fit_matrix_exponent([(4.0, 2.0)]) == pytest.approx(0.5)
    assert 0.2 < power_modes()["jetson-agx-orin-64gb"].matrix_exponent < 0.5
    from gemma_fit.gguf.tensors import build_plan
    from gemma_fit.jobs.bench import predicted
    from gemma_fit.jobs.bench_parse import Measurement
    from gemma_fit.model.catalog import resolve_model

    resolved = resolve_model("gemma-3-27b", ())
    plan = build_plan(resolved.spec, "Q4_K_M")
    pp = Measurement("pp512", "prefill", 512, 0, 0, 1, 1.0)
    maxn, thirty = (predicted(pp, _hw("jetson-agx-orin-64gb", m), resolved, plan, None) for m in ("MAXN", "MODE_30W"))
    assert 1.3 < maxn / thirty < 1.8


def test_decode_between_two_modes_moves_as_published() -> None:
    """smolhub's Orin Nano Super sweep (https://www.smolhub.com/posts/jetson-nano-super-benchmark-non-reasoning/):
    "25W ... delivers 36-47 % more output tok/s than 15W" over eight small models (llama.cpp CUDA, -ngl 99). The
    15W conf caps the memory controller at 2133 MHz and the GPU at 612 MHz; 25W at 3199 and 918."""
    from gemma_fit.gguf.tensors import build_plan
    from gemma_fit.jobs.bench import predicted
    from gemma_fit.jobs.bench_parse import Measurement
    from gemma_fit.model.catalog import resolve_model

    resolved = resolve_model("gemma-3-1b", ())
    plan = build_plan(resolved.spec, "Q4_K_M")
    tg = Measurement("tg256", "decode", 0, 256, 0, 1, 1.0)
    fast, slow = (predicted(tg, _hw("jetson-orin-nano-super", m), resolved, plan, None) for m in ("25W", "15W"))
    assert 1.3 < fast / slow < 1.55


@pytest.mark.parametrize(("gpu", "mode", "says"), [
    ("rtx-4090", "15W", "only Jetson modules"),
    ("jetson-orin-nano-super", "7W", "modes are 15W, 25W, MAXN_SUPER"),
    ("jetson-orin-nx-8gb", "MAXN_SUPER", "no published figure"),
    ("jetson-orin-nano-super", "\x1b[31m", "modes are"),
])
def test_a_mode_a_module_does_not_have_is_bad_input(gpu: str, mode: str, says: str) -> None:
    with pytest.raises(BadInput, match=says) as err:
        _hw(gpu, mode)
    assert "\x1b" not in str(err.value)


def test_check_takes_power_mode_and_says_so() -> None:
    proc = subprocess.run([*CLI, "check", "--gpu", "jetson-agx-orin-64gb", "--model", "gemma-3-1b", "--quant",
                           "Q4_K_M", "--power-mode", "MODE_15W", "--json"], capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    notes = json.loads(proc.stdout)["hardware"]["notes"]
    assert any("MODE_15W (sudo nvpmodel -m 1)" in n for n in notes)
    bad = subprocess.run([*CLI, "check", "--gpu", "a4000", "--model", "9b", "--power-mode", "30W"],
                         capture_output=True, text=True, timeout=300, check=False)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1


def test_a_power_modes_entry_for_an_unknown_gpu_fails_validation(tmp_path: Path) -> None:
    from gemma_fit.jobs.validate import validate_paths

    db = Path(__file__).resolve().parents[1] / "hardware_db"
    text = (db / "power_modes.yaml").read_text()
    (tmp_path / "modes.yaml").write_text(text.replace("- id: jetson-agx-orin-64gb", "- id: jetson-agx-orin-99gb"))
    problems = validate_paths([tmp_path / "modes.yaml", db / "gpus"])
    assert any("jetson-agx-orin-99gb" in str(p) for p in problems)


def test_a_report_applies_the_mode_where_a_module_has_it() -> None:
    from gemma_fit.jobs.report import hardware_configs

    configs = hardware_configs([["a4000"], ["jetson-agx-orin-64gb"], ["jetson-orin-nano-super"]], [],
                               machine=MachineFlags(power_mode="MODE_30W"))
    labels = {c.key: c.hardware for c in configs}
    assert labels["jetson-agx-orin-64gb"].label.endswith(" at MODE_30W")
    assert any("not a mode of RTX A4000" in n for n in labels["a4000"].notes)
    assert labels["jetson-orin-nano-super"].gpus == _hw("jetson-orin-nano-super").gpus  # its own figures
    with pytest.raises(BadInput, match="only Jetson modules"):
        hardware_configs([["a4000"]], [], machine=MachineFlags(power_mode="MODE_30W"))
