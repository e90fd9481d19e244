"""Jetson power modes: a module runs at the clocks its nvpmodel mode allows (hardware_db/power_modes.yaml).

The GPU entry's figures are for its `rated` clocks. In a mode, memory bandwidth scales with the memory controller's
(EMC) clock, llama.cpp's default threads with the CPU cores online, each per-kernel cost with the GPU clock
(speed.calibration), and the matrix rate with the GPU clock times the TPCs left on (TPC power gating) raised to
`matrix_exponent`: published llama-bench runs of one model in two modes show prefill moving far less than the
clocks (an AGX Orin in MODE_30W has 24% of MAXN's clocks x TPCs and kept 64% of its pp512), and the exponent is
fitted on those pairs (hardware_db/power_modes.yaml `measured`).
Without --power-mode the answer keeps the entry's figures and says which mode those are and which mode a new
module boots in: `nvpmodel -q` prints the mode a machine is in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from gemma_fit.base.errors import BadInput
from gemma_fit.base.record import record
from gemma_fit.base.text import printable
from gemma_fit.hardware.spec import GPUSpec, Hardware


@record
class PowerMode:
    name: str
    nvpmodel_id: int
    cpu_cores: int
    gpu_max_mhz: float | None  # None: no cap
    gpu_tpcs: int
    emc_max_mhz: float | None


@record
class PowerModes:
    """One module's modes and the clocks its GPU entry's figures are for."""

    gpu_id: str
    source: str
    default_mode: int
    rated_gpu_mhz: float
    rated_emc_mhz: float
    rated_tpcs: int
    uncapped_gpu_mhz: float | None  # what a mode without a GPU cap runs at; None: not published
    uncapped_emc_mhz: float | None
    modes: tuple[PowerMode, ...]
    matrix_exponent: float = 1.0  # prefill's matrix rate follows (clock x TPCs) ** this (fit_matrix_exponent)

    def compute_share(self, mode: PowerMode) -> float | None:
        """The mode's GPU clock x TPCs over the rated ones; None where its clock is not known."""
        clocks = self.clocks(mode)
        return clocks[0] / self.rated_gpu_mhz * mode.gpu_tpcs / self.rated_tpcs if clocks else None

    def find(self, name: str) -> PowerMode | None:
        """A mode by its name (any case; `30w` finds MODE_30W, `maxn` a super module's MAXN_SUPER) or its nvpmodel
        id."""
        key = name.strip().upper()
        for candidates in ((key, f"MODE_{key}"), (f"{key}_SUPER",)):
            for m in self.modes:
                if m.name.upper() in candidates or (key == str(m.nvpmodel_id) and len(candidates) == 2):
                    return m
        return None

    def clocks(self, mode: PowerMode) -> tuple[float, float] | None:
        """(GPU MHz, EMC MHz) the mode runs at; None where a limit it leaves open has no published figure."""
        gpu = _capped(mode.gpu_max_mhz, self.uncapped_gpu_mhz)
        emc = _capped(mode.emc_max_mhz, self.uncapped_emc_mhz)
        return (gpu, emc) if gpu is not None and emc is not None else None

    def matching(self) -> PowerMode | None:
        """The mode that runs at exactly the entry's figures, if one does."""
        for m in self.modes:
            if self.clocks(m) == (self.rated_gpu_mhz, self.rated_emc_mhz) and m.gpu_tpcs == self.rated_tpcs:
                return m
        return None


def _capped(cap: float | None, uncapped: float | None) -> float | None:
    if cap is None:
        return uncapped
    return min(cap, uncapped) if uncapped is not None else cap


def in_mode(g: GPUSpec, modes: PowerModes, mode: PowerMode) -> tuple[GPUSpec, str]:
    """The GPU at a mode's clocks, and the note that says so."""
    clocks = modes.clocks(mode)
    if clocks is None:
        raise BadInput(f"--power-mode {mode.name}: {g.name} runs it without a clock cap and no published figure "
                       f"gives the clock it reaches; modelled modes: {', '.join(_modelled(modes))}")
    gpu_mhz, emc_mhz = clocks
    share = gpu_mhz / modes.rated_gpu_mhz * mode.gpu_tpcs / modes.rated_tpcs
    compute = share**modes.matrix_exponent
    memory = emc_mhz / modes.rated_emc_mhz

    def scaled(x: float | None, by: float) -> float | None:
        return round(x * by, 3) if x is not None else None

    bandwidth = round(g.memory_bandwidth_gbps * memory, 1) if g.memory_bandwidth_gbps else None
    out = replace(g, memory_bandwidth_gbps=bandwidth,
                  fp16_tensor_tflops=scaled(g.fp16_tensor_tflops, compute),
                  int8_tensor_tops=scaled(g.int8_tensor_tops, compute), fp32_tflops=scaled(g.fp32_tflops, compute),
                  boost_clock_mhz=gpu_mhz)
    kept = ("the rated clocks" if share == 1 else f"{share:.0%} of the rated clocks x TPCs; prefill runs at "
            f"{compute:.0%} of the rated rate, as published runs in two modes scale")
    note = (f"{g.name}: power mode {mode.name} (sudo nvpmodel -m {mode.nvpmodel_id}): GPU {gpu_mhz:g} MHz with "
            f"{mode.gpu_tpcs} of {modes.rated_tpcs} TPCs ({kept}), memory at {emc_mhz:g} MHz "
            f"({out.memory_bandwidth_gbps:g} GB/s), {mode.cpu_cores} CPU cores online (hardware_db/power_modes.yaml)")
    return out, note


def _modelled(modes: PowerModes) -> list[str]:
    return [m.name for m in modes.modes if modes.clocks(m) is not None]


def _default_note(g: GPUSpec, modes: PowerModes) -> str:
    same = modes.matching()
    boot = next(m for m in modes.modes if m.nvpmodel_id == modes.default_mode)
    what = (f"power mode {same.name} (sudo nvpmodel -m {same.nvpmodel_id})" if same is not None
            else "clocks no JetPack 6.2 power mode runs at exactly")
    other = "" if same is not None and same == boot else (
        f"; a new module boots in {boot.name} (nvpmodel -m {boot.nvpmodel_id}): --power-mode {boot.name} answers "
        "for it")
    return (f"{g.name}: the database's figures, GPU {modes.rated_gpu_mhz:g} MHz x {modes.rated_tpcs} TPCs and "
            f"{g.memory_bandwidth_gbps:g} GB/s, are {what}{other} (`nvpmodel -q` prints yours; modes: "
            f"{', '.join(_modelled(modes))})")


def with_power_mode(hw: Hardware, name: str | None, table: Mapping[str, PowerModes]) -> Hardware:
    """The hardware with its Jetson GPU(s) at power mode `name`; without one, a note on the mode its figures are."""
    jetsons = [g for g in hw.gpus if g.id in table]
    if name is None:
        return replace(hw, notes=(*hw.notes, _default_note(jetsons[0], table[jetsons[0].id]))) if jetsons else hw
    if not jetsons:
        names = ", ".join(dict.fromkeys(g.name for g in hw.gpus)) or "a CPU-only machine"
        raise BadInput(f"--power-mode {printable(name, 40)}: only Jetson modules have nvpmodel power modes "
                       f"({names} has none; Jetson AGX Thor's are not modelled yet)")
    gpus, notes, cores = [], list(hw.notes), hw.cpu_cores
    for g in hw.gpus:
        modes = table.get(g.id)
        if modes is None:
            gpus.append(g)
            continue
        mode = modes.find(name)
        if mode is None:
            raise BadInput(f"--power-mode {printable(name, 40)}: {g.name}'s modes are "
                           f"{', '.join(m.name for m in modes.modes)} (nvpmodel -q prints the one it is in; others "
                           "are not modelled)")
        g, note = in_mode(g, modes, mode)
        gpus.append(g)
        if note not in notes:
            notes.append(note)
        cores = min(cores, mode.cpu_cores) if cores else mode.cpu_cores
    mode_names = dict.fromkeys(m.name for m in (table[g.id].find(name) for g in jetsons) if m is not None)
    return replace(hw, label=f"{hw.label} at {', '.join(mode_names)}", gpus=tuple(gpus), notes=tuple(notes),
                   cpu_cores=cores)


def fit_matrix_exponent(pairs: list[tuple[float, float]]) -> float:
    """The exponent e with speed ratio = (clock x TPC ratio) ** e, median over pairs of (compute ratio, prefill speed
    ratio) of one model in two modes; 1 (the clocks alone) without any pair."""
    import math
    import statistics

    values = [math.log(speed) / math.log(share) for share, speed in pairs if share > 0 and share != 1 and speed > 0]
    return round(statistics.median(values), 3) if values else 1.0
