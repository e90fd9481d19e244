"""hardware_db: every reference GPU loads and resolves; names, machine files, extra folders."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from gemma_fit.base.errors import BadInput, DatabaseError
from gemma_fit.cli.hardware import list_gpus
from gemma_fit.hardware.catalog import (
    GPUSpec,
    load_gpu_entries,
    load_gpus,
    load_hardware_db,
    match_device,
    name_key,
    pcie_link,
    resolve_gpu,
    storage_class,
)
from gemma_fit.hardware.machine_file import load_machine
from gemma_fit.hardware.spec import ids_named_by_prefix

GIB = 1024**3
MIB = 1024**2
REPO = Path(__file__).resolve().parent.parent
REFERENCE = REPO / "tests" / "data" / "gpu_facts.csv"  # the project's reference table (tests/data/README.md)


def _reference_rows() -> list[dict[str, str]]:
    with REFERENCE.open(encoding="utf-8") as f:
        return list(csv.DictReader(f))


ROWS = _reference_rows()
CONTRACT_IDS = ["a4000", "rtx-4090", "rtx-3060-12gb", "a100-80gb-sxm", "h100-sxm", "h200-sxm", "l4", "t4"]


def test_database_holds_every_reference_gpu() -> None:
    assert len(load_gpus()) >= 77
    assert len(ROWS) == 77


@pytest.mark.parametrize("row", ROWS, ids=[r["id"] for r in ROWS])
def test_reference_gpu_resolves_and_matches_its_row(row: dict[str, str]) -> None:
    several = ids_named_by_prefix(name_key(row["id"]), list(load_gpus()))
    if len(several) > 1:  # a chip sold in several memory sizes: the name alone is refused, with the list
        with pytest.raises(BadInput, match="sold in several configurations"):
            resolve_gpu(row["id"])
        spec = load_gpus()[load_hardware_db().names[name_key(row["id"])]]  # the configuration the row describes
        assert spec.id in several
    else:
        spec = resolve_gpu(row["id"])  # the reference table's id is an alias
    assert resolve_gpu(spec.id) == spec  # and the contract-style id resolves to the same GPU
    assert resolve_gpu(spec.id.upper()) == spec
    assert "-" not in spec.id or spec.id == spec.id.lower()
    assert not spec.id.startswith(("nvidia-", "amd-", "apple-", "intel-"))  # no vendor prefix
    assert spec.memory_bytes == round(float(row["vram_gib"]) * GIB)
    assert spec.memory_bandwidth_gbps == pytest.approx(float(row["mem_bandwidth_gbs"]))
    if row["fp16_tensor_tflops_dense"]:
        assert spec.fp16_tensor_tflops == pytest.approx(float(row["fp16_tensor_tflops_dense"]))
    else:
        assert spec.fp16_tensor_tflops is None
    assert spec.compute_capability == (row["compute_capability"] or None)
    assert spec.source == row["source_url"]
    assert spec.source.startswith(("https://", "http://"))
    assert 0.5 * spec.memory_bytes <= spec.usable_memory_bytes <= spec.memory_bytes


@pytest.mark.parametrize("gpu_id", CONTRACT_IDS)
def test_contract_ids_exist(gpu_id: str) -> None:
    assert resolve_gpu(gpu_id).id == gpu_id


@pytest.mark.parametrize("typed", ["RTX A4000", "NVIDIA RTX A4000", "rtx-a4000", "a4000", "A4000", "nvidia-rtx-a4000"])
def test_contract_names_are_one_gpu(typed: str) -> None:
    spec = resolve_gpu(typed)
    assert spec.id == "a4000"
    assert spec.memory_bytes == 16 * GIB  # not the 24 GB of the seed article
    assert spec.memory_bandwidth_gbps == 448
    assert spec.backend == "cuda" and spec.compute_capability == "8.6"


@pytest.mark.parametrize(
    ("typed", "expected"),
    [
        ("NVIDIA GeForce RTX 4090", "rtx-4090"), ("GeForce RTX 4090", "rtx-4090"), ("RTX 4090", "rtx-4090"),
        ("4090", "rtx-4090"), ("rtx4090", "rtx-4090"), ("NVIDIA H200", "h200-sxm"), ("H200", "h200-sxm"),
        ("H200 SXM 141GB", "h200-sxm"), ("Tesla T4", "t4"), ("NVIDIA L4", "l4"),
        ("NVIDIA A100-SXM4-80GB", "a100-80gb-sxm"), ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("RTX 3060", "rtx-3060-12gb"), ("rtx 4070 ti super", "rtx-4070-ti-super"),
        ("AMD Radeon RX 7900 XTX", "rx-7900-xtx"), ("Apple M4 Max 40c", "m4-max-128gb"), ("Intel Arc B580", "arc-b580"),
    ],
)
def test_people_and_nvml_names_resolve(typed: str, expected: str) -> None:
    assert resolve_gpu(typed).id == expected


def test_brief_aliases_are_listed() -> None:
    entries = load_gpu_entries()
    assert {"rtx-a4000", "RTX A4000", "NVIDIA RTX A4000"} <= set(entries["a4000"].aliases)
    assert {"NVIDIA GeForce RTX 4090", "GeForce RTX 4090", "RTX 4090", "4090"} <= set(entries["rtx-4090"].aliases)
    assert {"NVIDIA H200", "H200", "H200 SXM 141GB"} <= set(entries["h200-sxm"].aliases)


@pytest.mark.parametrize(("gpu_id", "mib"), [("rtx-4090", 24564), ("h100-sxm", 81559), ("h200-sxm", 143771),
                                             ("a4000", 16376), ("t4", 15360)])
def test_published_usable_memory(gpu_id: str, mib: int) -> None:
    assert resolve_gpu(gpu_id).usable_memory_bytes == mib * MIB


# Published clock and shader FP32 (TechPowerUp; Apple M2: metal-benchmarks): the speed model's inputs.
@pytest.mark.parametrize(("gpu_id", "mhz", "tflops"), [
    ("a4000", 1560, 19.17), ("rtx-4090", 2520, 82.58), ("p40", 1531, 11.76), ("t1000", 1395, 2.5),
    ("rx-6900-xt", 2250, 23.04), ("a100-80gb-sxm", 1410, 19.49), ("jetson-orin-nano-8gb", 625, 1.28),
    ("m2-max-96gb", 1398, 13.6),
])
def test_boost_clock_and_fp32_reach_the_spec(gpu_id: str, mhz: float, tflops: float) -> None:
    spec = resolve_gpu(gpu_id)
    assert (spec.boost_clock_mhz, spec.fp32_tflops) == (mhz, tflops)


def test_clock_and_fp32_are_given_except_where_unpublished() -> None:
    """Every GPU has both figures but the Apple M3, M4 and M5 parts, whose GPU clock Apple does not publish."""
    gpus = load_gpus()
    missing = {gid for gid, s in gpus.items() if s.boost_clock_mhz is None or s.fp32_tflops is None}
    assert missing == {gid for gid, s in gpus.items() if s.arch in ("apple-m3", "apple-m4", "apple-m5")}
    assert len(missing) >= 30


def test_every_entry_explains_usable_memory_and_has_sources() -> None:
    for entry in load_gpu_entries().values():
        assert entry.usable_note.strip()
        assert all(u.startswith("http") for u in [entry.source, *entry.sources])


def test_unknown_gpu_is_bad_input_with_suggestions() -> None:
    with pytest.raises(BadInput, match=r"GPU 'A100' is sold in several configurations: .*a100-80gb-sxm"):
        resolve_gpu("A100")  # never one of them picked silently
    with pytest.raises(BadInput, match="unknown GPU 'rtx-9090'"):
        resolve_gpu("rtx-9090")


def test_shared_driver_name_is_ambiguous_but_probe_matches_by_memory() -> None:
    with pytest.raises(BadInput, match="several configurations.*rtx-4060-ti-8gb.*rtx-4060-ti-16gb"):
        resolve_gpu("RTX 4060 Ti")
    assert match_device("NVIDIA GeForce RTX 4060 Ti", 16376 * MIB) == "rtx-4060-ti-16gb"
    assert match_device("NVIDIA GeForce RTX 4060 Ti", 8188 * MIB) == "rtx-4060-ti-8gb"
    assert match_device("NVIDIA T1000 8GB", 8 * GIB) is None  # the 8 GB T1000 is not in the database
    assert match_device("NVIDIA GeForce RTX 3060", 8 * GIB) is None  # the 8 GB 3060 neither


def test_name_key() -> None:
    assert name_key("NVIDIA GeForce RTX 4090") == name_key("rtx-4090") == name_key("RTX4090") == "rtx-4090"
    assert name_key("Intel(R) Arc(TM) A770 Graphics") == "arc-a-770-graphics"


def test_system_tables() -> None:
    assert {"sata-ssd", "nvme-gen3", "nvme-gen4", "nvme-gen5", "hdd"} <= set(load_hardware_db().storage)
    assert storage_class("NVMe-Gen4").sequential_read_gbps == pytest.approx(7.45)
    with pytest.raises(BadInput, match="unknown storage class"):
        storage_class("floppy")
    link = pcie_link(4, 16)
    assert link is not None and link.per_direction_gbps == pytest.approx(31.51)
    assert pcie_link(5, 16) is not None and pcie_link(3, 1) is not None and pcie_link(6, 8) is not None
    assert {"nvlink-3", "nvlink-4", "nvlink-5"} <= set(load_hardware_db().interconnects)
    assert {"ddr4-3200", "ddr5-5600", "lpddr5x-8533"} <= set(load_hardware_db().memory)


# --- extra folders ----------------------------------------------------------------------------

CUSTOM = """gpus:
  - id: my-card
    name: My Card 20GB
    vendor: nvidia
    aliases: [My Card]
    arch: ampere
    compute_capability: "8.6"
    backend: cuda
    memory_bytes: 21474836480
    usable_memory_bytes: 21474836480
    usable_note: nominal
    unified_memory: false
    memory_type: GDDR6
    bus_width_bits: 320
    memory_data_rate_gbps: 16
    memory_bandwidth_gbps: 640
    bf16_supported: true
    ecc: false
    form_factor: PCIe card
    source: https://example.com/my-card
"""


def test_extra_folder_adds_gpus(tmp_path: Path) -> None:
    (tmp_path / "mine.yaml").write_text(CUSTOM, encoding="utf-8")
    extra = (tmp_path,)
    assert resolve_gpu("my card", extra).memory_bytes == 20 * GIB
    assert "my-card" in load_gpus(extra) and "a4000" in load_gpus(extra)
    assert isinstance(load_gpus(extra)["my-card"], GPUSpec)


def test_bad_extra_folder_names_file_line_and_field(tmp_path: Path) -> None:
    bad = CUSTOM.replace("memory_bytes: 21474836480", "memory_bytes: 20")
    (tmp_path / "bad.yaml").write_text(bad, encoding="utf-8")
    with pytest.raises(DatabaseError, match=r"bad\.yaml:9: my-card\.memory_bytes: .*bytes.*GiB"):
        load_gpus((tmp_path,))
    with pytest.raises(BadInput, match="folder not found"):
        load_gpus((tmp_path / "missing",))


# --- machine files ----------------------------------------------------------------------------

MACHINE = """name: "my workstation"
gpus:
  - a4000
  - gpu: RTX 4090
    count: 2
    pcie_gen: 4
    pcie_lanes: 8
  - id: custom-npu
    name: Custom 8GB
    vendor: nvidia
    arch: ada
    compute_capability: "8.9"
    backend: cuda
    memory_bytes: 8589934592
    usable_memory_bytes: 8589934592
    usable_note: nominal
    unified_memory: false
    memory_type: GDDR6
    bf16_supported: true
    ecc: false
    form_factor: card
    source: https://example.com
ram_gb: 64
ram_type: DDR5
ram_speed_mts: 5600
ram_channels: 2
disk: nvme-gen4
"""


def test_machine_file_loads(tmp_path: Path) -> None:
    path = tmp_path / "box.yaml"
    path.write_text(MACHINE, encoding="utf-8")
    machine = load_machine(path)
    assert machine.label == "my workstation"
    assert [g.id for g in machine.gpus] == ["a4000", "rtx-4090", "rtx-4090", "custom-npu"]
    assert machine.attachments[1].pcie_gen == 4 and machine.attachments[1].pcie_lanes == 8
    assert machine.attachments[1].host_link_gbps == pytest.approx(15.75)
    assert machine.attachments[0].host_link_gbps == pytest.approx(31.51)  # A4000: its own Gen4 x16
    assert machine.host_capacity_bytes == 64 * GIB
    assert machine.ram_bandwidth_gbps == pytest.approx(89.6)
    assert machine.disk is not None and machine.disk.id == "nvme-gen4"


def test_minimal_machine_file(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text('name: "cpu box"\ngpus: []\nram_gb: 32\n', encoding="utf-8")
    machine = load_machine(path)
    assert machine.gpus == () and machine.host_capacity_bytes == 32 * GIB and machine.disk is None
    path.write_text('name: "cpu box"\ngpus: []\n', encoding="utf-8")  # no GPUs and no RAM: capacity unknown
    with pytest.raises(BadInput, match="no ram_gb"):
        load_machine(path)


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        ('name: x\ngpus: [a4000]\nram_gigs: 64\n',
         r"m\.yaml:3: ram_gigs: unknown key 'ram_gigs' \(did you mean 'ram_gb'\?\)"),
        ('name: x\ngpus:\n  - gpu: a4000\n    pcie_lanez: 8\n',
         r"m\.yaml:4: gpus\[0\]\.pcie_lanez: unknown key 'pcie_lanez'"),
        # a slot's key one level too high: where it goes, not "did you mean 'pcie_lanes'" (the same key)
        ('name: x\npcie_lanes: 8\ngpus: [a4000]\n',
         r"m\.yaml:2: pcie_lanes: unknown key 'pcie_lanes' here: it goes under gpu: or gpus:$"),
        ('name: x\ngpus: [a9999]\n', r"m\.yaml: gpus\[0\]: unknown GPU 'a9999'"),
        ('name: x\ngpus: [a4000]\ndisk: tape\n', r"m\.yaml: disk: unknown storage class 'tape'"),
        ('name: x\nram_gb: -4\n', r"m\.yaml:2: ram_gb: "),
        ('gpus: [a4000]\n', r"m\.yaml:1: name: missing required key 'name'"),
    ],
)
def test_bad_machine_file_names_the_problem(tmp_path: Path, text: str, pattern: str) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(BadInput, match=pattern):
        load_machine(path)


# --- list gpus --------------------------------------------------------------------------------


def _app() -> typer.Typer:
    app = typer.Typer()
    app.command("gpus")(list_gpus)
    app.command("noop")(lambda: None)  # two commands, so `gpus` stays a subcommand
    return app


def test_list_gpus_json_and_table() -> None:
    runner = CliRunner()
    result = runner.invoke(_app(), ["gpus", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert {r["id"] for r in rows} >= set(CONTRACT_IDS)
    table = runner.invoke(_app(), ["gpus"], env={"COLUMNS": "200"})
    assert table.exit_code == 0
    assert "a4000" in table.output and "rtx-4090" in table.output and "usable memory in GiB" in table.output


def test_list_gpus_keeps_every_id_whole_on_80_columns_and_in_a_pipe() -> None:
    """The ids are what a user types after --gpu: never cut with an ellipsis or wrapped."""
    ids = [e.id for e in load_gpus().values()]
    plain = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    for env in ({**plain, "COLUMNS": "80"}, plain):  # an 80-column terminal, then a pipe
        out = subprocess.run([sys.executable, "-m", "gemma_fit", "list", "gpus"], capture_output=True, text=True,
                             env=env, timeout=300).stdout
        first_cells = {line.split()[0] for line in out.splitlines() if line.strip()}
        assert set(ids) <= first_cells
        assert "…" not in out
