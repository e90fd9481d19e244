"""The machine file (`--hardware FILE.yaml`): read with bounds, validated strictly, resolved against the
hardware database (gemma_fit.hardware.catalog)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gemma_fit.base.errors import BadInput
from gemma_fit.db.files import read_text, shown
from gemma_fit.db.yaml_files import parse_yaml
from gemma_fit.db.yaml_lines import format_validation, line_of
from gemma_fit.hardware.catalog import (
    find_gpu_entry,
    memory_speed,
    pcie_link,
    resolve_cpu,
    spec_from_entry,
    storage_class,
)
from gemma_fit.hardware.schema import (
    GIB,
    MAX_GPUS,
    NO_CAPACITY,
    GPUEntry,
    GPUSlot,
    MachineFile,
    UserGPUEntry,
    gpu_item_count,
    too_many_gpus,
)
from gemma_fit.hardware.spec import GPUAttachment, GPUSpec, Hardware, as_seen_by_software


def _attachment(entry: GPUEntry, slot: GPUSlot | None, extra_dirs: tuple[Path, ...]) -> GPUAttachment:
    gen = entry.pcie_gen
    if slot is not None and slot.pcie_gen is not None:
        gen = min(slot.pcie_gen, gen) if gen is not None else slot.pcie_gen
    lanes = entry.pcie_lanes
    if slot is not None and slot.pcie_lanes is not None:
        lanes = min(slot.pcie_lanes, lanes) if lanes is not None else slot.pcie_lanes
    link = pcie_link(gen, lanes, extra_dirs) if gen is not None and lanes is not None else None
    nvlink = slot.nvlink if slot is not None and slot.nvlink is not None else "SXM" in entry.form_factor
    return GPUAttachment(gen, lanes, link.per_direction_gbps if link else None, bool(nvlink and entry.nvlink_gbps))


def _machine_gpus(parsed: MachineFile, extra_dirs: tuple[Path, ...], where: str,
                  ) -> tuple[tuple[GPUSpec, ...], tuple[GPUAttachment, ...]]:
    specs: list[GPUSpec] = []
    links: list[GPUAttachment] = []
    for i, item in enumerate(parsed.gpus):
        slot = item if isinstance(item, GPUSlot) else None
        gpu = slot.gpu if slot is not None else item
        try:
            entry = gpu if isinstance(gpu, GPUEntry) else find_gpu_entry(str(gpu), extra_dirs)
        except BadInput as exc:
            raise BadInput(f"{where}: gpus[{i}]: {exc}") from None
        for _ in range(slot.count if slot is not None else 1):
            for device in as_seen_by_software(spec_from_entry(entry)):  # an MI250X is two devices
                specs.append(device)
                links.append(_attachment(entry, slot, extra_dirs))
    return tuple(specs), tuple(links)


def _ram_bandwidth(parsed: MachineFile, extra_dirs: tuple[Path, ...]) -> float | None:
    if not (parsed.ram_type and parsed.ram_speed_mts and parsed.ram_channels):
        return None
    known = memory_speed(parsed.ram_type, parsed.ram_speed_mts, extra_dirs)
    per_channel = known.per_channel_gbps if known else parsed.ram_speed_mts * 8 / 1000
    return round(per_channel * parsed.ram_channels, 2)


# A machine file is a few lines written by hand; 1 MiB holds 16 full GPU specs many times over.
MAX_MACHINE_BYTES = 1024 * 1024
MAX_MACHINE_NODES = 100_000  # values after following YAML aliases


def _one_line(message: str) -> str:
    """A message on one line whatever the file held (a key or id with a newline in it)."""
    return "".join(c if c >= " " and c != "\x7f" else ascii(c)[1:-1] for c in message)


def _where(path: Path, root: Any, key: str) -> str:
    line = line_of(root, (key,)) if root is not None else None
    return f"{shown(path)}:{line}: {key}" if line else f"{shown(path)}: {key}"


def _precheck(path: Path, data: dict[Any, Any], root: Any) -> None:
    """What must be refused before any work: more GPUs than llama.cpp can use (a file listing 100,000
    of them hung the estimate), and a machine with neither GPUs nor RAM (no capacity to check)."""
    if "nodes" in data:
        raise BadInput(f"{shown(path)}: a cluster file (nodes:), several machines: plan it with gemma-fit serve-plan "
                       f"--hardware {shown(path)} (llama.cpp RPC, or --engine vllm on Ray)")
    raw_gpus = data.get("gpus")
    if isinstance(raw_gpus, list):
        n = sum(gpu_item_count(item) for item in raw_gpus[: MAX_GPUS + 1])
        if len(raw_gpus) > MAX_GPUS or n > MAX_GPUS:
            total = n if len(raw_gpus) <= MAX_GPUS else len(raw_gpus)
            raise BadInput(f"{_where(path, root, 'gpus')}: {too_many_gpus(total)}")
    if not raw_gpus and data.get("ram_gb") is None:
        where = _where(path, root, "gpus") if "gpus" in data else shown(path)
        raise BadInput(f"{where}: {NO_CAPACITY}")


def load_machine(path: Path, extra_dirs: tuple[Path, ...] = ()) -> Hardware:
    """The `--hardware FILE.yaml` machine; BadInput naming file, line and field on any problem.

    The file is read with bounds (regular files only, at most MAX_MACHINE_BYTES, UTF-8, no repeated
    keys, aliases expanding to at most MAX_MACHINE_NODES values) and validated strictly.
    """
    try:
        return _load_machine(path, extra_dirs)
    except BadInput as exc:
        raise type(exc)(_one_line(str(exc))) from None


def _load_machine(path: Path, extra_dirs: tuple[Path, ...]) -> Hardware:
    text = read_text(path, MAX_MACHINE_BYTES)
    data, root = parse_yaml(text, path, unique_keys=True, max_nodes=MAX_MACHINE_NODES)
    if not isinstance(data, dict):
        raise BadInput(f"{shown(path)}: expected a mapping (name:, gpus:, ram_gb:, disk:)")
    _precheck(path, data, root)
    try:
        parsed = MachineFile.model_validate(data, strict=True)
    except ValidationError as exc:
        lines = format_validation(Path(shown(path)), exc, data, root,
                                  models=[MachineFile, GPUSlot, UserGPUEntry, GPUEntry])
        more = f" (+{len(lines) - 1} more)" if len(lines) > 1 else ""
        raise BadInput(lines[0] + more) from None
    gpus, links = _machine_gpus(parsed, extra_dirs, shown(path))
    devices = len(gpus)
    if devices > MAX_GPUS:
        raise BadInput(f"{_where(path, root, 'gpus')}: these GPUs are {devices} devices to software (a card "
                       f"such as the MI250X is two); llama.cpp uses at most {MAX_GPUS} in one process")
    try:
        disk = storage_class(parsed.disk, extra_dirs) if parsed.disk else None
    except BadInput as exc:
        raise BadInput(f"{shown(path)}: disk: {exc}") from None
    if parsed.cpu:
        # looked up as --cpu is: an unknown name would silently mean an AVX2 x86 CPU's speed
        try:
            resolve_cpu(parsed.cpu, extra_dirs, otherwise="or leave cpu: out (ram_type:, ram_speed_mts: and "
                        "ram_channels: give the memory speed)")
        except BadInput as exc:
            raise BadInput(f"{_where(path, root, 'cpu')}: {exc}") from None
    ram = int(parsed.ram_gb * GIB) if parsed.ram_gb is not None else None
    return Hardware(parsed.name, gpus, ram, attachments=links, disk=disk,
                    ram_bandwidth_gbps=_ram_bandwidth(parsed, extra_dirs), cpu_name=parsed.cpu, source=path)
