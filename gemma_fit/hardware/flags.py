"""The machine said on the command line instead of in a file: --ram, --ram-type, --ram-channels,
--cpu, --cores, --threads, --disk and --reserve on `check` and `report`.

Each flag replaces what the hardware would otherwise assume or probe (this machine's RAM and drive for
--gpu cpu / local, nothing for a GPU named by id) and says so in the hardware's notes, which every
answer shows. Bad values are one line of BadInput.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from gemma_fit.base.errors import BadInput
from gemma_fit.base.ranges import check_optional
from gemma_fit.base.record import record
from gemma_fit.base.text import printable
from gemma_fit.hardware.power import PowerModes, with_power_mode
from gemma_fit.hardware.snapshot import known_hardware
from gemma_fit.hardware.spec import GIB, NUMA_MODES, CPUSpec, Hardware

DEFAULT_CHANNELS = 2  # a desktop or laptop: two 64-bit channels
THIS_CPU = "CPU: this machine's"  # how the notes name a probed CPU


@record
class MachineFlags:
    ram_gb: float | None = None  # GiB, as a machine file's ram_gb
    ram_type: str | None = None  # "ddr5-6000", "lpddr5x-8000"
    ram_channels: int | None = None
    cores: int | None = None
    threads: int | None = None
    disk: str | None = None  # a storage class id
    reserve_gib: float | None = None  # kept free on each GPU (a display, other processes)
    cpu: str | None = None  # a CPU name or id from hardware_db/cpus.yaml
    sockets: int | None = None  # CPU sockets; --cpu, --cores and --ram-channels are per socket
    numa: str | None = None  # llama.cpp's --numa mode (NUMA_MODES)
    power_mode: str | None = None  # a Jetson's nvpmodel mode (hardware_db/power_modes.yaml)
    vulkan_driver: str | None = None  # an AMD GPU's Vulkan driver: radv (Mesa's, the default) or amdvlk

    def given(self) -> bool:
        return any(v is not None for v in vars(self).values())


NO_NUMA = "none"  # --numa none: llama.cpp run without --numa, the default the help states

_RAM_TYPE = re.compile(r"^(ddr4|ddr5|lpddr4x?|lpddr5x?)-([0-9]{3,5})$")


def _ram_bandwidth(flags: MachineFlags, extra: tuple[Path, ...]) -> tuple[float, str] | None:
    if flags.ram_type is None:
        if flags.ram_channels is not None:
            raise BadInput("--ram-channels needs --ram-type (e.g. --ram-type ddr5-6000)")
        return None
    m = _RAM_TYPE.match(flags.ram_type.strip().lower())
    if m is None:
        raise BadInput(f"--ram-type {flags.ram_type}: give the type and speed, e.g. ddr5-6000, ddr4-3200, "
                       "lpddr5x-8000")
    kind, speed = m.group(1), int(m.group(2))
    if not 800 <= speed <= 12_000:
        raise BadInput(f"--ram-type {flags.ram_type}: {speed} MT/s is impossible (800 to 12,000)")
    channels = flags.ram_channels if flags.ram_channels is not None else DEFAULT_CHANNELS
    from gemma_fit.hardware.catalog import memory_speed

    known = memory_speed(kind, speed, extra)
    per_channel = known.per_channel_gbps if known else speed * 8 / 1000  # 64-bit channel: 8 bytes a transfer
    how = "" if flags.ram_channels is not None else f", {DEFAULT_CHANNELS} channels assumed (--ram-channels)"
    bw = round(per_channel * channels, 2)
    return bw, f"system memory {kind.upper()}-{speed} x {channels} channels = {bw:g} GB/s (given{how})"


def _check_counts(flags: MachineFlags) -> None:
    check_optional("--ram", flags.ram_gb)
    check_optional("--cores", flags.cores)
    check_optional("--threads", flags.threads)
    check_optional("--reserve", flags.reserve_gib)
    check_optional("--ram-channels", flags.ram_channels)
    check_optional("--sockets", flags.sockets)
    if flags.numa is not None and flags.numa not in (*NUMA_MODES, NO_NUMA):
        from gemma_fit.base.suggest import did_you_mean
        from gemma_fit.base.text import printable

        raise BadInput(f"--numa {printable(flags.numa, 40)}: llama.cpp takes {', '.join(NUMA_MODES)} (or {NO_NUMA}: "
                       f"no --numa){did_you_mean(flags.numa, (*NUMA_MODES, NO_NUMA))}")


def _reserved(hw: Hardware, reserve_gib: float) -> Hardware:
    reserve = round(reserve_gib * GIB)
    gpus = []
    for g in hw.gpus:
        if reserve >= g.usable_memory_bytes:
            raise BadInput(f"--reserve {reserve_gib:g} GiB leaves nothing of {g.name}'s "
                           f"{g.usable_memory_bytes / GIB:.1f} GiB")
        gpus.append(replace(g, usable_memory_bytes=g.usable_memory_bytes - reserve))
    note = f"--reserve: {reserve_gib:g} GiB kept free on each GPU"
    return replace(hw, gpus=tuple(gpus), notes=(*hw.notes, note))


def _cpu(name: str, extra: tuple[Path, ...]) -> CPUSpec:
    known = known_hardware().cpu(name) if not extra else None
    if known is not None:
        return known
    from gemma_fit.hardware.catalog import resolve_cpu

    return resolve_cpu(name, extra)


def numa_note(sockets: int, numa: str | None) -> str:
    if numa is None:
        return (f"CPU: {sockets} sockets without --numa: the weights sit in one node's memory and the other "
                "sockets' threads read it across the socket link, so decode is counted at one socket's memory "
                "bandwidth (--numa distribute, after dropping the page cache, can use every socket's)")
    if numa == "distribute":
        return (f"CPU: --numa distribute over {sockets} sockets: decode counted at every socket's memory bandwidth, "
                "which needs the model's pages spread over the nodes (drop the page cache before the first run: "
                "echo 3 > /proc/sys/vm/drop_caches)")
    return f"CPU: --numa {numa}: one socket's cores and memory"


def power_modes(extra: tuple[Path, ...] = ()) -> dict[str, PowerModes]:
    """Every Jetson module's power modes, keyed by GPU id (the snapshot's, without extra folders)."""
    if not extra:
        return known_hardware().power_modes
    from gemma_fit.hardware.catalog import load_hardware_db, power_modes_table

    return power_modes_table(load_hardware_db(extra).power_modes)


VULKAN_DRIVERS = ("radv", "amdvlk")  # Mesa's RADV, what distributions ship, and AMD's AMDVLK (discontinued 2025)


def with_vulkan_driver(hw: Hardware, driver: str | None) -> Hardware:
    """AMD GPUs run through Vulkan on this driver (--vulkan-driver): AMDVLK's speed figures are its own."""
    if driver is None:
        return hw
    chosen = driver.strip().lower()
    if chosen not in VULKAN_DRIVERS:
        raise BadInput(f"--vulkan-driver {printable(driver, 40)}: give radv (Mesa's, the default) or amdvlk (AMD's)")
    amd = [g for g in hw.gpus if g.vendor == "amd" and g.backend == "vulkan"]
    if not amd:
        raise BadInput(f"--vulkan-driver {chosen}: needs an AMD GPU run through Vulkan "
                       "(--backend vulkan)")
    value = None if chosen == "radv" else chosen
    gpus = tuple(replace(g, vulkan_driver=value) if g in amd else g for g in hw.gpus)
    note = (f"Vulkan on AMD's {chosen.upper()} driver (--vulkan-driver): its own published speed figures where it has "
            "them" if value else "Vulkan on Mesa's RADV driver (--vulkan-driver)")
    return replace(hw, gpus=gpus, notes=(*hw.notes, note))


def with_machine_flags(hw: Hardware, flags: MachineFlags, extra: tuple[Path, ...] = ()) -> Hardware:
    """The hardware with what the flags say in place of what was assumed or probed."""
    hw = with_vulkan_driver(with_power_mode(hw, flags.power_mode, power_modes(extra)), flags.vulkan_driver)
    if not flags.given():
        return hw
    _check_counts(flags)
    notes = list(hw.notes)
    host = hw.host_capacity_bytes
    if flags.ram_gb is not None:
        host = round(flags.ram_gb * GIB)
        notes = [n for n in notes if "RAM" not in n]  # what was probed or assumed no longer holds
        notes.append(f"--ram: {flags.ram_gb:g} GiB of system memory, as given")
    bandwidth = _ram_bandwidth(flags, extra)
    ram_bw = hw.ram_bandwidth_gbps
    if bandwidth is not None:
        ram_bw, note = bandwidth
        notes.append(note)
    disk = hw.disk
    if flags.disk is not None:
        from gemma_fit.hardware.catalog import storage_class

        disk = storage_class(flags.disk.strip().lower(), extra)
        notes = [n for n in notes if not n.startswith("load time")]
        notes.append(f"--disk: {disk.name}, as given")
    cpu = _cpu(flags.cpu, extra) if flags.cpu is not None else hw.cpu
    if flags.cpu is not None or flags.cores or flags.threads:
        notes = [n for n in notes if not n.startswith(THIS_CPU)]  # the probed CPU no longer holds
    if flags.cpu is not None and cpu is not None:
        notes.append(f"--cpu: {cpu.name}, {cpu.cores} cores, {cpu.isa.upper()} ({cpu.source})")
    # --cpu names one socket of another machine: this one's probed sockets no longer hold
    sockets = flags.sockets or (1 if flags.cpu is not None else hw.cpu_sockets)
    numa = None if flags.numa == NO_NUMA else flags.numa or hw.numa
    default_threads = cpu.default_threads if flags.cpu is not None and cpu else hw.cpu_cores
    # llama.cpp's default -t counts the physical cores of every socket; --numa isolate or numactl keeps one node's.
    # --cpu and --cores are one socket's; a probed count is already the whole machine's.
    one_node = numa in ("isolate", "numactl")
    named = flags.cpu is not None or flags.cores is not None
    per_node = flags.cores or default_threads
    if not named and per_node and sockets > 1:
        per_node = max(1, per_node // sockets)
    spread = sockets > 1 and per_node is not None and not one_node
    cores = flags.threads or (per_node * sockets if spread and per_node else per_node)
    both = f" ({per_node} per socket x {sockets} sockets)" if spread and sockets > 1 else ""
    if flags.threads or flags.cores:
        notes.append(f"CPU: {cores} threads, as given" if flags.threads else f"CPU: {cores} cores, as given{both}")
    elif flags.cpu is not None:
        notes.append(f"CPU: llama.cpp's default -t {cores}{both} (its physical performance cores; --threads to "
                     "change)")
    if sockets > 1 or numa:
        notes.append(numa_note(sockets, numa))
    label = hw.label
    if flags.ram_gb is not None and not hw.gpus and hw.source is None:  # --gpu cpu: no longer this machine's RAM
        label = f"CPU only ({flags.ram_gb:g} GiB RAM)"
    # the command states -t where the answer is for other threads than llama.cpp's default would take
    threads_flag = flags.threads or (cores if one_node and sockets > 1 else None) or hw.threads_flag
    out = replace(hw, label=label, host_capacity_bytes=host, disk=disk, cpu_cores=cores,
                  ram_bandwidth_gbps=ram_bw, notes=tuple(notes), cpu=cpu, cpu_sockets=sockets, numa=numa,
                  threads_flag=threads_flag)
    return _reserved(out, flags.reserve_gib) if flags.reserve_gib else out
