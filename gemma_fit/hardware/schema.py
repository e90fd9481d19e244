"""The hardware database schema (hardware_db/) and the machine file (`--hardware FILE.yaml`).

Units are in the field names: `_bytes` are integer bytes, `_gbps` decimal GB/s (10^9 bytes per
second; `memory_data_rate_gbps` is per pin, in Gbit/s), `_tflops` 10^12 operations per second,
`_w` watts, `_mts` mega-transfers per second. Hard limits (impossible values, wrong units) are
checked here so that a bad entry never loads; cross-field physics (bandwidth = bus x data rate,
TFLOPS per architecture) is checked by `gemma_fit.jobs.validate`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Discriminator,
    Field,
    StringConstraints,
    Tag,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from gemma_fit.base.ranges import range_problem
from gemma_fit.db.schema import Strict, StrictInput
from gemma_fit.hardware.spec import (  # noqa: F401 - re-exported: the schema and its limits
    BACKENDS,
    GIB,
    MAX_GPUS,
    MAX_GPUS_PER_CONTEXT,
    MAX_HOST_RAM_BYTES,
    MAX_RAM_GIB,
    MIN_RAM_GIB,
    TIB,
)

SLUG = r"^[a-z0-9]+(-[a-z0-9]+)*$"
URL = r"^https?://\S+$"



def _no_controls(value: str) -> str:
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise PydanticCustomError("control_characters", "must be one line of text, without control characters")
    return value


_TEXT = AfterValidator(_no_controls)
# Free text printed on one line: stripped, 1 to N characters, no control characters.
Line64 = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=64), _TEXT]
Line100 = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=100), _TEXT]
Line200 = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200), _TEXT]


def _whole_number(value: Any) -> Any:
    """Literal[1, 2, ...] accepts True and 4.0 even in strict mode: refuse them before it does."""
    if isinstance(value, bool | float):
        raise PydanticCustomError("int_type", "Input should be a whole number (1, 2, 4, 8 or 16), not {value}",
                                  {"value": repr(value)})
    return value


def ranged(name: str) -> AfterValidator:
    """A number through base.ranges' one table (RANGES[name]), its message the range's own."""
    def check(value: float) -> float:
        problem = range_problem(name, value)
        if problem is not None:  # the text goes in as a value: a brace in it is not a template field
            raise PydanticCustomError("out_of_range", "{problem}", {"problem": problem})
        return value

    return AfterValidator(check)


Vendor = Literal["nvidia", "amd", "apple", "intel"]
Backend = Literal["cuda", "rocm", "metal", "vulkan", "sycl"]
Arch = Literal[
    "maxwell", "pascal", "volta", "turing", "ampere", "ada", "hopper", "blackwell",
    "gcn5", "rdna1", "rdna2", "rdna3", "rdna4", "cdna", "cdna2", "cdna3", "cdna4",
    "apple-m1", "apple-m2", "apple-m3", "apple-m4", "apple-m5",
    "xe-hpg", "xe2-hpg", "xe-hpc",
]
PcieLanes = Annotated[Literal[1, 2, 4, 8, 16], BeforeValidator(_whole_number)]

MemoryBytes = Annotated[int, Field(ge=GIB, le=2 * TIB, description="bytes, 1 GiB to 2 TiB")]
# Every rate, bandwidth, clock and power of a GPU spec is checked against base.ranges' table (the database's and a
# machine file's alike): its floors refuse 1e-300 and denormals, which divide into inf further down.
BandwidthGBps = Annotated[float, ranged("memory_bandwidth_gbps")]
DataRateGbps = Annotated[float, ranged("memory_data_rate_gbps")]
Fp16Tflops = Annotated[float, ranged("fp16_tensor_tflops")]
Int8Tops = Annotated[float, ranged("int8_tensor_tops")]
ClockMHz = Annotated[float, ranged("boost_clock_mhz")]
Fp32Tflops = Annotated[float, ranged("fp32_tflops")]
TdpW = Annotated[float, ranged("tdp_w")]
NvlinkGBps = Annotated[float, ranged("nvlink_gbps")]




class GPUEntry(Strict):
    """One accelerator (a GPU, or the GPU side of an SoC) in hardware_db/gpus/*.yaml."""

    id: str = Field(pattern=SLUG)
    name: str = Field(min_length=1)
    vendor: Vendor
    aliases: list[str] = []
    device_names: list[str] = []  # exact names drivers report (NVML, Metal, SYCL); may be shared by variants
    arch: Arch
    chip: str | None = None
    compute_capability: str | None = Field(default=None, pattern=r"^(\d+\.\d+|gfx[0-9a-f]+)$")
    backend: Backend
    memory_bytes: MemoryBytes
    usable_memory_bytes: MemoryBytes
    usable_note: str = Field(min_length=1)
    cuda_total_bytes: MemoryBytes | None = None  # what CUDA (cudaMemGetInfo / deviceQuery) reports, where published
    unified_memory: bool
    # unified memory: the platform whose reserve and GPU ceiling apply (model_db/llamacpp/unified_memory.yaml)
    unified_platform: Literal["macos", "l4t", "dgx-os", "amd-uma"] | None = None
    logical_devices: int = Field(default=1, ge=1, le=8)  # e.g. MI250X: two GCDs, two devices to software
    memory_type: str
    bus_width_bits: int | None = Field(default=None, ge=16, le=16_384)
    memory_data_rate_gbps: DataRateGbps | None = None
    memory_bandwidth_gbps: BandwidthGBps | None = None
    fp16_tensor_tflops: Fp16Tflops | None = None
    int8_tensor_tops: Int8Tops | None = None
    boost_clock_mhz: ClockMHz | None = None  # reference boost clock (TechPowerUp's), MHz
    fp32_tflops: Fp32Tflops | None = None  # non-tensor FP32, shaders x 2 x boost clock, dense
    gpu_cores: int | None = Field(default=None, ge=1, le=1024)  # Apple GPU cores (the largest bin the entry covers)
    bf16_supported: bool
    # GeForce cards: FP16/BF16 tensor math with FP32 accumulation at half the FP16-accumulate rate (NVIDIA's
    # architecture whitepapers list both rates); llama.cpp's BF16 GEMMs accumulate in FP32
    fp32_accumulate_half_rate: bool = False
    tdp_w: TdpW | None = None
    pcie_gen: int | None = Field(default=None, ge=1, le=6)
    pcie_lanes: PcieLanes | None = None
    nvlink_gbps: NvlinkGBps | None = None  # total bidirectional per GPU; 0 = none
    ecc: bool | None
    form_factor: str
    source: str = Field(pattern=URL)
    sources: list[Annotated[str, Field(pattern=URL)]] = []
    notes: str = ""

    @model_validator(mode="after")
    def _usable_within_total(self) -> GPUEntry:
        if self.usable_memory_bytes > self.memory_bytes:
            raise ValueError(f"usable_memory_bytes {self.usable_memory_bytes} exceeds memory_bytes {self.memory_bytes}")
        if self.cuda_total_bytes is not None and self.cuda_total_bytes > self.memory_bytes:
            raise ValueError("cuda_total_bytes exceeds memory_bytes")
        if self.unified_platform is not None and not self.unified_memory:
            raise ValueError("unified_platform is only for unified_memory: true")
        if self.backend not in BACKENDS[self.vendor]:  # the engines choose kernels and commands by the backend
            raise ValueError(f"backend '{self.backend}' is not a llama.cpp backend for {self.vendor} GPUs "
                             f"({', '.join(sorted(BACKENDS[self.vendor]))})")
        cc = self.compute_capability  # the engines compare a CUDA GPU's as a number (vLLM's floor, FP8 kernels)
        if self.backend == "cuda" and cc is not None and cc.startswith("gfx"):
            raise ValueError(f"a CUDA GPU's compute_capability is like '8.6', not the AMD target {cc!r}")
        return self


class GPUFile(Strict):
    gpus: list[GPUEntry] = Field(min_length=1)


class InterconnectEntry(Strict):
    """A host or GPU-to-GPU link; bandwidths per direction unless named `bidirectional`."""

    id: str = Field(pattern=SLUG)
    kind: Literal["pcie", "nvlink"]
    name: str
    generation: int | None = Field(default=None, ge=1, le=6)
    lanes: PcieLanes | None = None
    per_direction_gbps: float = Field(gt=0, le=5000)
    measured_gbps: float | None = Field(default=None, gt=0, le=5000)
    source: str = Field(pattern=URL)
    notes: str = ""

    @model_validator(mode="after")
    def _pcie_has_gen_and_lanes(self) -> InterconnectEntry:
        if self.kind == "pcie" and (self.generation is None or self.lanes is None):
            raise ValueError("a pcie link needs generation and lanes")
        if self.measured_gbps is not None and self.measured_gbps > self.per_direction_gbps:
            raise ValueError("measured_gbps exceeds the theoretical per_direction_gbps")
        return self


class InterconnectFile(Strict):
    interconnects: list[InterconnectEntry] = Field(min_length=1)


class MemoryEntry(Strict):
    """System memory at one speed; bandwidth per 64-bit channel (LPDDR: per 64 bits of bus)."""

    id: str = Field(pattern=SLUG)
    type: Literal["DDR4", "DDR5", "LPDDR5", "LPDDR5X"]
    speed_mts: int = Field(ge=800, le=12_000)
    per_channel_gbps: float = Field(gt=0, le=200)
    measured_per_channel_gbps: float | None = Field(default=None, gt=0, le=200)
    source: str = Field(pattern=URL)
    notes: str = ""


class MemoryFile(Strict):
    memory: list[MemoryEntry] = Field(min_length=1)


class StorageEntry(Strict):
    """A storage class; rates in decimal GB/s (random read: 4 KiB blocks at high queue depth)."""

    id: str = Field(pattern=SLUG)
    name: str
    sequential_read_gbps: float = Field(gt=0, le=100)
    link_ceiling_gbps: float | None = Field(default=None, gt=0, le=100)
    random_read_gbps: float = Field(gt=0, le=100)
    random_read_qd1_gbps: float | None = Field(default=None, gt=0, le=100)
    source: str = Field(pattern=URL)
    sources: list[Annotated[str, Field(pattern=URL)]] = []
    notes: str = ""

    @model_validator(mode="after")
    def _within_link(self) -> StorageEntry:
        if self.link_ceiling_gbps is not None and self.sequential_read_gbps > self.link_ceiling_gbps:
            raise ValueError("sequential_read_gbps exceeds link_ceiling_gbps")
        return self


class StorageFile(Strict):
    storage: list[StorageEntry] = Field(min_length=1)


class CPUEntry(Strict):
    """One CPU in hardware_db/cpus.yaml: what llama.cpp's CPU backend runs on it and the memory system
    it supports (the officially supported maximum speed and its channels)."""

    id: str = Field(pattern=SLUG)
    name: str = Field(min_length=1)
    aliases: list[str] = []
    family: Literal["x86", "arm"]
    isa: Literal["avx2", "avx512", "amx", "neon", "sve"]
    cores: int = Field(ge=1, le=1024)
    threads: int = Field(ge=1, le=2048)
    performance_cores: int | None = Field(default=None, ge=1, le=1024)
    dotprod: bool | None = None  # arm: False for Armv8.0 cores without SDOT/UDOT (Cortex-A72, A53); None: has them
    # the performance cores' maximum boost clock as the vendor states it (its source: `source` or one of `sources`)
    boost_clock_ghz: float | None = Field(default=None, ge=0.5, le=7.0)
    memory_type: Literal["ddr4", "ddr5", "lpddr4", "lpddr4x", "lpddr5", "lpddr5x"]
    memory_speed_mts: int = Field(ge=800, le=12_000)
    memory_channels: float = Field(ge=0.25, le=24)  # 64-bit channels (LPDDR: bus width / 64; a 32-bit bus is 0.5)
    source: str = Field(pattern=URL)
    sources: list[Annotated[str, Field(pattern=URL)]] = []
    notes: str = ""

    @model_validator(mode="after")
    def _counts(self) -> CPUEntry:
        if self.threads < self.cores:
            raise ValueError(f"threads {self.threads} below cores {self.cores}")
        if self.performance_cores is not None and self.performance_cores > self.cores:
            raise ValueError(f"performance_cores {self.performance_cores} exceeds cores {self.cores}")
        if (self.family == "arm") != (self.isa in ("neon", "sve")):
            raise ValueError(f"isa {self.isa} is not a {self.family} instruction set")
        if self.dotprod is not None and self.family != "arm":
            raise ValueError("dotprod is an arm field (x86 CPUs leave it out)")
        return self


class CPUFile(Strict):
    cpus: list[CPUEntry] = Field(min_length=1)


# --- the machine file -------------------------------------------------------------------------
# Validated strictly (no "64" for 64, no true for 1: `MachineFile.model_validate(data, strict=True)`
# also makes a full GPU spec in a machine file strict), every number within a range a real machine has.




# A GPU spec in a user's own machine file describes their machine: it needs no source (the database
# does, and db validate checks it there); the answer says "described by the user" instead.
DESCRIBED_BY_USER = "described by the user"


class UserGPUEntry(GPUEntry):
    """A full GPU spec in a machine file: the database's schema, with the sources optional."""

    usable_note: str = Field(default=DESCRIBED_BY_USER, min_length=1)
    source: str = Field(default=DESCRIBED_BY_USER, pattern=rf"{URL}|^{DESCRIBED_BY_USER}$")


def _gpu_ref_kind(value: Any) -> str:
    return "spec" if isinstance(value, dict | GPUEntry) else "id"  # a number is a wrong id, not a wrong spec


GPUId = Line100
GPURef = Annotated[
    Annotated[GPUId, Tag("id")] | Annotated[UserGPUEntry, Tag("spec")],
    Discriminator(_gpu_ref_kind),
]


class GPUSlot(StrictInput):
    """One GPU (or `count` identical ones) in a machine, with how it is attached."""

    gpu: GPURef  # a database id/alias, or a full spec in the database schema
    count: int = Field(default=1, ge=1, le=MAX_GPUS)
    pcie_gen: int | None = Field(default=None, ge=1, le=6)
    pcie_lanes: PcieLanes | None = None
    nvlink: bool | None = None  # linked to the other GPUs by NVLink (uses the GPU's nvlink_gbps)


def _gpu_item_kind(value: Any) -> str:
    if isinstance(value, dict):
        return "slot" if "gpu" in value else "spec"
    if isinstance(value, GPUSlot):
        return "slot"
    if isinstance(value, GPUEntry):
        return "spec"
    return "id"


GPUItem = Annotated[
    Annotated[GPUId, Tag("id")] | Annotated[GPUSlot, Tag("slot")] | Annotated[UserGPUEntry, Tag("spec")],
    Discriminator(_gpu_item_kind),
]


def gpu_item_count(item: Any) -> int:
    """How many GPUs one `gpus:` item stands for (a slot's `count`), on parsed or raw data."""
    if isinstance(item, GPUSlot):
        return item.count
    if isinstance(item, dict):
        count = item.get("count", 1) if "gpu" in item else 1
        return count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else 1
    return 1


class MachineFile(StrictInput):
    """`--hardware FILE.yaml`: a whole machine. Unknown keys are an error."""

    name: Line200  # free text, shown in reports
    gpus: list[GPUItem] = Field(default=[], max_length=MAX_GPUS)
    ram_gb: float | None = Field(default=None, ge=MIN_RAM_GIB, le=MAX_RAM_GIB, allow_inf_nan=False)  # GiB
    ram_type: Literal["DDR4", "DDR5", "LPDDR5", "LPDDR5X"] | None = None
    ram_speed_mts: int | None = Field(default=None, ge=800, le=12_000)
    ram_channels: int | None = Field(default=None, ge=1, le=24)
    disk: Line64 | None = None  # a storage class id (hardware_db/storage.yaml)
    cpu: Line200 | None = None
    notes: Annotated[str, StringConstraints(max_length=10_000)] | None = None

    @field_validator("disk")
    @classmethod
    def _disk_slug(cls, v: str | None) -> str | None:
        return v.strip().lower() if v is not None else None

    @model_validator(mode="after")
    def _capacity_known(self) -> MachineFile:
        n_gpus = sum(gpu_item_count(item) for item in self.gpus)
        if n_gpus > MAX_GPUS:
            raise PydanticCustomError("too_many_gpus", too_many_gpus(n_gpus))
        if not self.gpus and self.ram_gb is None:
            raise PydanticCustomError("capacity_unknown", NO_CAPACITY)
        return self


NO_CAPACITY = ("no GPUs and no ram_gb: the machine's memory is unknown, and unknown capacity is never a fit "
               "(list its GPUs under gpus:, or give ram_gb: its system memory in GiB)")


def too_many_gpus(n: int) -> str:
    return (f"{n:,} GPUs: llama.cpp uses at most {MAX_GPUS} devices in one process "
            f"(GGML_CUDA_MAX_DEVICES, llama_max_devices())")
