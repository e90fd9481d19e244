"""The built-in hardware database as plain frozen specs, validated once and then kept as a snapshot.

What a cold `check` reads of hardware_db: GPU specs and the names that resolve to them, storage
classes, PCIe rates. hardware.catalog validates the YAML (pydantic) only when the snapshot is built,
or when the user adds databases of their own.
"""

from __future__ import annotations

from gemma_fit.base.record import record
from gemma_fit.base.text import has_unsafe
from gemma_fit.db.snapshot import snapshot
from gemma_fit.hardware.power import PowerModes
from gemma_fit.hardware.spec import CPUSpec, GPUSpec, PcieRate, StorageSpec, cpu_key, ids_named_by_prefix, name_key


@record
class HardwareSnapshot:
    gpus: dict[str, GPUSpec]  # id -> spec
    gpu_names: dict[str, str]  # name_key of an id or alias -> id
    gpu_device_names: dict[str, tuple[str, ...]]  # name_key of a driver-reported name -> ids
    storage: dict[str, StorageSpec]
    pcie: dict[str, PcieRate]  # "pcie-4-x16" -> rates
    cpus: dict[str, CPUSpec]  # id -> spec
    cpu_names: dict[str, str]  # cpu_key of an id, name, alias or unique model number -> id
    power_modes: dict[str, PowerModes]  # Jetson GPU id -> its nvpmodel modes

    def gpu(self, name: str) -> GPUSpec | None:
        """The GPU an id, alias or unambiguous driver name means; None when unknown or ambiguous
        (hardware.catalog then answers, with its suggestions)."""
        if has_unsafe(name):  # a bidi or zero-width mark: refused by hardware.catalog, never matched loosely
            return None
        key = name_key(name.strip())
        if key in self.gpus:
            return self.gpus[key]
        ids = self.gpu_device_names.get(key, ())
        if len(ids) == 1:  # the name the driver reports for this one card
            return self.gpus[ids[0]]
        if len(ids_named_by_prefix(key, list(self.gpus))) > 1:
            return None  # a chip sold in several configurations: hardware.catalog lists them
        return self.gpus[self.gpu_names[key]] if key in self.gpu_names else None

    def cpu(self, name: str) -> CPUSpec | None:
        cid = None if has_unsafe(name) else self.cpu_names.get(cpu_key(name))
        return self.cpus[cid] if cid else None


def _build() -> HardwareSnapshot:
    from gemma_fit.hardware.catalog import cpu_spec, load_hardware_db, power_modes_table, spec_from_entry, storage_spec

    hw = load_hardware_db()
    return HardwareSnapshot(
        gpus={gid: spec_from_entry(e) for gid, e in hw.gpus.items()},
        gpu_names=dict(hw.names),
        gpu_device_names=dict(hw.device_names),
        storage={sid: storage_spec(e) for sid, e in hw.storage.items()},
        pcie={lid: PcieRate(e.per_direction_gbps, e.measured_gbps) for lid, e in hw.interconnects.items()
              if e.kind == "pcie"},
        cpus={cid: cpu_spec(e) for cid, e in hw.cpus.items()},
        cpu_names=dict(hw.cpu_names),
        power_modes=power_modes_table(hw.power_modes),
    )


def known_hardware() -> HardwareSnapshot:
    """The built-in GPUs, storage classes and PCIe rates (from the cache when it matches)."""
    return snapshot("hardware", HardwareSnapshot, _build)
