"""The power-mode schema (hardware_db/power_modes.yaml): a Jetson module's nvpmodel modes as NVIDIA's .conf files
set them (CPU cores online and clock caps, GPU TPCs and clock cap, memory controller cap), and the clocks its
hardware_db entry's figures are for. A cap of null is the conf's -1 (no cap): the module runs at `uncapped`."""

from __future__ import annotations

from pydantic import Field, model_validator
from pydantic_core import PydanticCustomError

from gemma_fit.db.schema import Strict
from gemma_fit.hardware.schema import SLUG, URL

MHZ = Field(ge=10, le=10_000)  # a clock in MHz: 1e-300 made a prefill of 0 tok/s and an infinite TTFT


class Clocks(Strict):
    """GPU and memory-controller (EMC) clocks in MHz, and the GPU's active TPCs, where a source gives them."""

    gpu_mhz: float | None = MHZ
    emc_mhz: float | None = MHZ
    tpcs: int | None = Field(default=None, ge=1, le=64)
    source: str | None = Field(default=None, pattern=URL)
    note: str = ""


class PowerModeEntry(Strict):
    """One nvpmodel mode: `sudo nvpmodel -m <nvpmodel_id>` selects it; `nvpmodel -q` prints its name."""

    name: str = Field(pattern=r"^[A-Za-z0-9_]+$")
    nvpmodel_id: int = Field(ge=0, le=32)
    cpu_cores: int = Field(ge=1, le=64)
    cpu_max_mhz: float | None = MHZ
    gpu_max_mhz: float | None = MHZ
    gpu_tpcs: int = Field(ge=1, le=64)  # worked out from the conf's TPC_PG_MASK (each set bit gates a TPC)
    emc_max_mhz: float | None = MHZ
    quote: str = Field(min_length=1)  # the conf's lines, as read


class ModeRun(Strict):
    """A published llama-bench figure of one model in one mode: runs of a model in two modes show how speed
    follows the mode's clocks."""

    mode: str = Field(min_length=1)
    model: str = Field(min_length=1)
    test: str = Field(pattern=r"^(pp|tg)[0-9]+$")
    tokens_per_s: float = Field(gt=0, le=1e6)
    source: str = Field(pattern=URL)


class PowerModesEntry(Strict):
    """A module's modes; `id` is its GPU id in hardware_db/gpus."""

    id: str = Field(pattern=SLUG)
    source: str = Field(pattern=URL)  # the nvpmodel .conf the modes are read from
    default_mode: int = Field(ge=0, le=32)  # the conf's PM_CONFIG DEFAULT: the mode a new module boots in
    rated: Clocks  # the clocks and TPCs the GPU entry's bandwidth and TFLOPS figures are for
    uncapped: Clocks  # what a mode without a cap runs at (jetson_clocks --show, a soak test)
    modes: list[PowerModeEntry] = Field(min_length=1)
    measured: list[ModeRun] = []

    @model_validator(mode="after")
    def _consistent(self) -> PowerModesEntry:
        ids = [m.nvpmodel_id for m in self.modes]
        names = [m.name.upper() for m in self.modes]
        if len(set(ids)) != len(ids) or len(set(names)) != len(names):
            raise PydanticCustomError("power_modes", "two modes share an nvpmodel id or a name")
        if self.default_mode not in ids:
            raise PydanticCustomError("power_modes", "default_mode {d} is none of the modes' ids",
                                      {"d": self.default_mode})
        if self.rated.gpu_mhz is None or self.rated.emc_mhz is None or self.rated.tpcs is None:
            raise PydanticCustomError("power_modes", "rated needs gpu_mhz, emc_mhz and tpcs")
        unknown = [r.mode for r in self.measured if r.mode.upper() not in names]
        if unknown:
            raise PydanticCustomError("power_modes", "measured in {m}, none of the modes", {"m": unknown[0]})
        return self


class PowerModesFile(Strict):
    power_modes: list[PowerModesEntry] = Field(min_length=1)
