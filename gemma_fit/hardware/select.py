"""From what the user typed (--gpu, --hardware) to the devices and host the estimate runs on."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from gemma_fit.base.errors import BadInput
from gemma_fit.hardware.calibration_store import with_local_calibration
from gemma_fit.hardware.flags import THIS_CPU, MachineFlags, numa_note, with_machine_flags
from gemma_fit.hardware.snapshot import known_hardware
from gemma_fit.hardware.spec import BACKENDS, MAX_GPUS, CPUSpec, GPUSpec, Hardware, StorageSpec, as_seen_by_software


def _local(extra: tuple[Path, ...]) -> tuple[tuple[GPUSpec, ...], tuple[str, ...]]:
    from gemma_fit.hardware.probe import local_gpus, other_gpus, probe_gpus

    gpus = local_gpus(extra_dirs=extra)
    if gpus:
        return gpus, ("--gpu local: capacity is each GPU's free memory now",)
    others, found = other_gpus(extra)
    if others:
        return others, ("--gpu local: " + "; ".join(found),)
    notes = tuple(probe_gpus(extra_dirs=extra).get("notes") or ("no NVIDIA GPU found",)) + found
    raise BadInput(f"--gpu local: no usable GPU on this machine ({'; '.join(notes)})")


def select_hardware(gpu_names: list[str], hardware_file: Path | None, extra: tuple[Path, ...]) -> Hardware:
    if hardware_file is not None:
        if gpu_names:
            raise BadInput("give either --gpu or --hardware, not both")
        from gemma_fit.hardware.machine_file import load_machine

        machine = load_machine(hardware_file, extra)
        cpu = _named_cpu(machine.cpu_name, extra)
        return replace(machine, cpu_cores=cpu.default_threads if cpu else None, cpu=cpu)
    if not gpu_names:
        raise BadInput("--gpu is required (a GPU id such as a4000, 'local', or 'cpu'; see gemma-fit list gpus)")
    if len(gpu_names) > MAX_GPUS:
        raise BadInput(f"--gpu given {len(gpu_names):,} times: llama.cpp uses at most {MAX_GPUS} devices in one "
                       "process (GGML_CUDA_MAX_DEVICES, llama_max_devices())")
    names = [n.strip() for n in gpu_names]
    if any(n.lower() == "cpu" for n in names):
        if len(names) > 1:
            raise BadInput("--gpu cpu means no accelerator; it cannot be combined with GPUs")
        ram = _total_ram()
        disk, disk_note = _local_disk(extra)
        cpu = _this_cpu(extra)
        threads = _threads(cpu)
        return Hardware("CPU only (this machine's RAM)", (), ram,
                        notes=("--gpu cpu: capacity is this machine's total RAM", disk_note, _cpu_note(cpu, threads)),
                        disk=disk, cpu_cores=threads, cpu=cpu, cpu_sockets=cpu.sockets if cpu else 1)
    gpus: list[GPUSpec] = []
    notes: tuple[str, ...] = ()
    disk = None
    host: int | None = None  # GPUs by id: this machine's RAM is not theirs, so it is unknown (and not checked)
    for name in names:
        if name.lower() == "local":
            local, notes = _local(extra)
            gpus.extend(local)
            disk, disk_note = _local_disk(extra)
            host = _total_ram()
            notes = (*notes, "--gpu local: host RAM capacity is this machine's total RAM", disk_note)
        else:
            gpus.extend(as_seen_by_software(_gpu(name, extra)))  # an MI250X is two devices to llama.cpp
    if len(gpus) > MAX_GPUS:
        raise BadInput(f"{len(gpus)} GPUs in one machine: gemma-fit plans at most {MAX_GPUS} (llama.cpp's device "
                       "limit; an HGX node has 8 or 16): several machines are a cluster file")
    _one_unified_machine(gpus)
    label = " + ".join(g.name for g in gpus)
    # --gpu local: this machine's CPU runs the CPU layers; a Mac's: the chip's own CPU, where the database has it
    cpu = _this_cpu(extra) if host is not None else _apple_cpu(gpus, extra)
    return Hardware(label, tuple(gpus), host, notes=notes, disk=disk, cpu_cores=_threads(cpu) if cpu else None, cpu=cpu,
                    cpu_sockets=cpu.sockets if cpu else 1)


_APPLE_CHIP = re.compile(r"^(?:Apple\s+)?(M\d+(?:\s+(?:Pro|Max|Ultra))?)\b")


def _apple_cpu(gpus: list[GPUSpec], extra: tuple[Path, ...]) -> CPUSpec | None:
    """The CPU of an Apple chip named as a GPU ("M1 Max 64GB (32-core GPU)": hardware_db/cpus.yaml's apple-m1-max):
    its cores, clock and performance cores (llama.cpp's default -t on a Mac) for the layers left on the CPU."""
    if len(gpus) != 1 or gpus[0].unified_platform != "macos":
        return None
    m = _APPLE_CHIP.match(gpus[0].name)
    return _named_cpu(f"apple {m.group(1).lower()}", extra) if m else None


SEALED_PLATFORMS = ("macos", "l4t", "dgx-os")  # unified_platform values of machines with no slot for a GPU


def _one_unified_machine(gpus: list[GPUSpec]) -> None:
    """A unified-memory GPU is a whole machine (a Mac, a Jetson, a DGX Spark, a Strix Halo box): two of them are two
    machines, which one llama.cpp process cannot span (a discrete card beside one, an eGPU, can be)."""
    unified = [g.id for g in gpus if g.unified_memory]
    sealed = [g for g in gpus if g.unified_memory and g.unified_platform in SEALED_PLATFORMS]
    if sealed and len(gpus) > 1:  # a Mac, a Jetson, a DGX Spark take no other GPU (a Strix Halo box an eGPU can)
        raise BadInput(f"{sealed[0].id} is a whole machine that takes no other GPU: check it on its own, or describe "
                       "several machines in a cluster file (gemma-fit serve-plan --hardware CLUSTER.yaml: llama.cpp "
                       "RPC)")
    if len(unified) > 1:
        raise BadInput(f"{' and '.join(unified)} are {len(unified)} machines (each a unified-memory system), not one: "
                       "one llama.cpp process runs on one; for several, describe them in a cluster file "
                       "(gemma-fit serve-plan --hardware CLUSTER.yaml: llama.cpp RPC)")


def _total_ram() -> int:
    import psutil  # only for --gpu cpu / local: a check for a named GPU never loads it

    return int(psutil.virtual_memory().total)


def _this_cpu(extra: tuple[Path, ...]) -> CPUSpec | None:
    from gemma_fit.hardware.probe_cpu import local_cpu

    return local_cpu(lambda name: _named_cpu(name, extra))


def _cpu_note(cpu: CPUSpec | None, threads: int | None) -> str:
    what = f"{cpu.name} ({cpu.isa.upper()})" if cpu else "CPU"
    on = f" on {cpu.sockets} sockets" if cpu and cpu.sockets > 1 else ""
    note = f"{THIS_CPU} {what}, {threads or '?'} threads{on} (--cpu or --cores for another)"
    return f"{note}; {numa_note(cpu.sockets, None)}" if cpu and cpu.sockets > 1 else note


def _named_cpu(name: str | None, extra: tuple[Path, ...]) -> CPUSpec | None:
    """The database's CPU of that name, or None (a machine file's cpu is checked against it when read)."""
    if not name:
        return None
    if not extra:
        return known_hardware().cpu(name)
    from gemma_fit.hardware.catalog import find_cpu

    return find_cpu(name, extra)


def _threads(cpu: CPUSpec | None) -> int | None:
    """llama.cpp's default thread count on this machine: its physical cores (psutil where the probe
    gave none)."""
    if cpu is not None and cpu.default_threads:
        return cpu.default_threads
    import psutil

    return psutil.cpu_count(logical=False) or psutil.cpu_count(logical=True)


def _gpu(name: str, extra: tuple[Path, ...]) -> GPUSpec:
    """A GPU by id, alias or driver name: the built-in snapshot first; hardware_db for extra databases
    and for names it does not know (it explains, with suggestions)."""
    spec = known_hardware().gpu(name) if not extra else None
    if spec is None:
        from gemma_fit.hardware.catalog import resolve_gpu

        spec = resolve_gpu(name, extra)
    return spec


def _local_disk(extra: tuple[Path, ...]) -> tuple[StorageSpec | None, str]:
    """The drive of the current folder (where models are usually run from), for the load time."""
    from gemma_fit.hardware.probe import disk_for_path

    storage, how = disk_for_path(Path.cwd())
    if storage is None:
        return None, f"load time: {how}; an NVMe Gen4 disk assumed"
    known = known_hardware().storage.get(storage) if not extra else None
    if known is None:
        from gemma_fit.hardware.catalog import storage_class

        known = storage_class(storage, extra)
    return known, f"load time from this machine's drive: {how}"


def with_backend(hw: Hardware, backend: str | None) -> Hardware:
    """The same machine with llama.cpp built for another backend (--backend vulkan on an NVIDIA, AMD or
    Intel card): memory overhead, compute-buffer rules and speed calibration follow the backend."""
    if backend is None:
        return hw
    chosen = backend.strip().lower()
    if not hw.gpus:
        raise BadInput(f"--backend {backend}: there is no GPU to run it on")
    for g in hw.gpus:
        allowed = sorted(BACKENDS.get(g.vendor, ()))
        if chosen not in allowed:
            raise BadInput(f"--backend {backend}: llama.cpp has no such backend for {g.name} "
                           f"(use {' or '.join(allowed)})")
    if all(g.backend == chosen for g in hw.gpus):
        return hw
    gpus = tuple(replace(g, backend=chosen) for g in hw.gpus)
    return replace(hw, gpus=gpus, notes=(*hw.notes, f"llama.cpp built with its {chosen} backend (--backend)"))



def hardware_of(hardware: Hardware | str | Sequence[str] | Path, backend: str | None = None,
                extra: tuple[Path, ...] = (), machine: MachineFlags | None = None) -> Hardware:
    """The hardware an answer is for: as given, or selected from GPU names (a str, or several) or a machine file,
    with --backend and the machine flags applied, and the speed calibration saved on this machine for exactly this
    hardware (gemma-fit bench --save) attached."""
    if isinstance(hardware, Hardware):
        hw = hardware
    elif isinstance(hardware, Path):
        hw = select_hardware([], hardware, extra)
    else:
        hw = select_hardware([hardware] if isinstance(hardware, str) else list(hardware), None, extra)
    return with_local_calibration(with_machine_flags(with_backend(hw, backend), machine or MachineFlags(), extra))
