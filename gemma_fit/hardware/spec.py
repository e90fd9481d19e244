"""What the estimate needs to know about hardware, as plain frozen data (no pydantic: a cold `check`
imports this, not the schema). hardware_db builds these from validated entries; the limits of what
llama.cpp can drive live here too.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from gemma_fit.base.record import record

GIB = 1024**3
TIB = 1024**4

# The most GPUs one llama.cpp process can use: GGML_CUDA_MAX_DEVICES and GGML_VK_MAX_DEVICES are 16
# (ggml/include/ggml-cuda.h, ggml-vulkan.h) and llama_max_devices() returns 16 (src/llama.cpp), in the
# llama.cpp this package follows (llama-cpp-python 0.3.36). A machine file may name at most that many.
MAX_GPUS = 16
# But one llama_context schedules at most GGML_SCHED_MAX_BACKENDS = 16 backends (ggml/src/ggml-backend.cpp,
# GGML_ASSERT in ggml_backend_sched_new), the CPU backend among them (src/llama-context.cpp adds it after
# the GPUs): 16 GPUs describe a real machine, but llama.cpp runs a model on at most 15 of them.
MAX_GPUS_PER_CONTEXT = MAX_GPUS - 1
# The most system memory one machine can have: 2^46 bytes = 64 TiB, the physical address space of the
# Xeon processors in the largest single-system-image servers (HPE Superdome / SGI UV class, 48 TB
# shipped; https://www.nextplatform.com/2017/11/06/hpes-superdome-gets-sgi-numalink-makeover/).
# A machine file's ram_gb stops there, and a plan whose host side needs more is no-go on any machine.
MAX_HOST_RAM_BYTES = 64 * TIB
MAX_RAM_GIB = MAX_HOST_RAM_BYTES // GIB
# The least: 256 MiB, below the smallest board llama.cpp runs a Gemma on (Gemma 3 270M alone is ~250 MB).
MIN_RAM_GIB = 0.25

# The llama.cpp backends that run on each vendor's GPUs (an entry's default, or --backend).
BACKENDS = {"nvidia": {"cuda", "vulkan"}, "amd": {"rocm", "vulkan"}, "apple": {"metal"}, "intel": {"sycl", "vulkan"}}

_VENDOR_WORDS = {"nvidia", "geforce", "tesla", "amd", "radeon", "instinct", "intel", "apple"}


def name_key(name: str) -> str:
    """The comparison key of a GPU name: lower case, vendor words dropped, letters and digits split."""
    text = name.lower().replace("(r)", " ").replace("(tm)", " ")
    tokens = re.findall(r"[a-z]+|\d+(?:\.\d+)?", text)
    while tokens and tokens[0] in _VENDOR_WORDS:
        tokens.pop(0)
    return "-".join(tokens)


# What follows a chip's name in the id of one of its configurations: a memory size (-64gb, -40gb-pcie) or a form
# factor (-sxm, -pcie, -nvl, -oam). A different card (-ti, -super, -laptop) is not a configuration.
_CONFIGURATION = re.compile(r"^(\d+-gb|sxm(-\d+)?|pcie|nvl|oam)(-[a-z0-9]+)*$")  # in name_key's tokens


def ids_named_by_prefix(key: str, ids: list[str]) -> list[str]:
    """The configurations a typed chip name leaves open (`m4-max` -> m4-max-36gb ... m4-max-128gb): the ids that
    are the name and a memory size or form factor. Two or more is ambiguous, whatever alias the name also is."""
    found = [i for i in ids if name_key(i).startswith(key + "-") and _CONFIGURATION.match(name_key(i)[len(key) + 1:])]
    return sorted(found, key=lambda i: [int(t) if t.isdigit() else t for t in name_key(i).split("-")])


@record
class GPUSpec:
    """What the estimator needs about one GPU. Bytes are integers; bandwidth is decimal GB/s."""

    id: str
    name: str
    vendor: str
    backend: str
    memory_bytes: int
    usable_memory_bytes: int
    unified_memory: bool
    memory_bandwidth_gbps: float | None
    fp16_tensor_tflops: float | None
    arch: str
    compute_capability: str | None
    pcie_gen: int | None
    pcie_lanes: int | None
    nvlink_gbps: float | None
    tdp_w: float | None
    source: str
    cuda_total_bytes: int | None = None  # CUDA's own total where published (can be below usable_memory_bytes)
    int8_tensor_tops: float | None = None  # dense INT8 tensor throughput (llama.cpp's MMQ kernels use it)
    logical_devices: int = 1  # devices software sees on this card (MI250X: 2)
    nvlink_sxm: bool = False  # an SXM module: its NVLink reaches the other GPUs of the board
    boost_clock_mhz: float | None = None  # reference boost clock, MHz (per-node kernel cost scales with 1/clock)
    fp32_tflops: float | None = None  # non-tensor (shader) FP32 throughput, dense; prefill on tensor-less parts
    gpu_cores: int | None = None  # Apple GPU cores
    unified_platform: str | None = None  # unified memory: macos | l4t | dgx-os | amd-uma (memory.unified)
    bf16_supported: bool = True  # bfloat16 arithmetic (CUDA: compute capability 8.0 and up); vLLM's dtype follows it
    # GeForce: tensor math with FP32 accumulation (every BF16 GEMM) runs at half fp16_tensor_tflops, the FP16-accumulate
    # rate; data-centre and workstation cards run both at full rate
    fp32_accumulate_half_rate: bool = False
    # an AMD GPU through Vulkan on AMD's own AMDVLK driver ("amdvlk", --vulkan-driver), discontinued in 2025 and
    # slower than Mesa's RADV at prompts: its speed figures are its own (speed.calibration); None: RADV, what
    # distributions ship
    vulkan_driver: str | None = None

    @property
    def cuda_capability(self) -> float | None:
        """An NVIDIA GPU's compute capability as a number (8.9) for the engines' kernel floors; None off CUDA or where
        unknown (the schema keeps a CUDA GPU's in that form)."""
        if self.backend != "cuda" or not self.compute_capability:
            return None
        return float(self.compute_capability)


def with_rated_figures(probed: GPUSpec, rated: GPUSpec | None) -> GPUSpec:
    """A GPU a probe found (its memory, clocks and links as they are now) with the database entry's rated throughput
    for its model: a probe reads no tensor or shader rates, and an estimate without them would fall back to slower
    paths (quantized prompts at the FP16 rate instead of INT8's)."""
    if rated is None:
        return probed
    return replace(probed, memory_bandwidth_gbps=rated.memory_bandwidth_gbps,
                   fp16_tensor_tflops=rated.fp16_tensor_tflops, int8_tensor_tops=rated.int8_tensor_tops,
                   boost_clock_mhz=rated.boost_clock_mhz, fp32_tflops=rated.fp32_tflops, gpu_cores=rated.gpu_cores,
                   fp32_accumulate_half_rate=rated.fp32_accumulate_half_rate, arch=rated.arch)


@record
class StorageSpec:
    id: str
    name: str
    sequential_read_gbps: float
    random_read_gbps: float
    link_ceiling_gbps: float | None
    source: str


@record
class GPUAttachment:
    """How one GPU of a machine is attached. Bandwidths per direction, decimal GB/s."""

    pcie_gen: int | None
    pcie_lanes: int | None
    host_link_gbps: float | None
    nvlink: bool


CPU_FAMILIES = ("x86", "arm")
# The widest SIMD llama.cpp's CPU backend uses on a CPU (ggml-cpu's kernels: AVX2, AVX-512, AMX tiles
# on x86; NEON, SVE on ARM).
CPU_ISAS = ("avx2", "avx512", "amx", "neon", "sve")
# llama.cpp's --numa (common/arg.cpp): distribute spreads threads evenly over the nodes, isolate keeps them on the
# node the process started on, numactl uses the CPU map numactl gave it.
NUMA_MODES = ("distribute", "isolate", "numactl")


@record
class CPUSpec:
    """The CPU that runs llama.cpp's CPU layers: its instruction set (which kernels run), its cores
    (llama.cpp's default thread count) and the memory system it was sold with."""

    name: str
    family: str  # one of CPU_FAMILIES
    isa: str  # one of CPU_ISAS
    cores: int | None = None  # physical cores, all kinds
    threads: int | None = None  # hardware threads
    performance_cores: int | None = None  # hybrid chips: the P-cores
    ram_bandwidth_gbps: float | None = None  # datasheet, at its supported maximum memory configuration
    memory: str = ""  # that configuration, e.g. "DDR5-5200 x 2 channels"
    source: str = ""  # where the figures come from (a URL, or "/proc/cpuinfo")
    dotprod: bool = True  # arm: the SDOT/UDOT instructions llama.cpp's quantized NEON kernels use (Armv8.2+)
    id: str = ""  # its hardware_db/cpus.yaml id; "" for a CPU the database does not know
    sockets: int = 1  # a probed machine's packages (/proc/cpuinfo's physical ids); its cores count them all
    boost_clock_ghz: float | None = None  # the performance cores' maximum boost clock (prefill scales with it)

    @property
    def default_threads(self) -> int | None:
        """llama.cpp's default -t: the physical cores, without a hybrid chip's efficiency cores
        (common/common.cpp, common_cpu_get_num_math)."""
        return self.performance_cores or self.cores


@record
class SpeedCalibration:
    """What `gemma-fit bench` (or `smoke --record`) measured on this very machine, as factors on the speed model:
    measured / predicted per metric, the median over the saved runs (hardware.calibration_store)."""

    label: str  # "calibrated here on 2026-12-02 (gemma-fit bench: gemma-3-1b Q4_0, 3 tests)"
    decode_factor: float | None = None  # single-stream decode (llama-bench tg)
    prefill_factor: float | None = None  # prompt processing (llama-bench pp)
    batched_factors: tuple[tuple[int, float], ...] = ()  # (sequences, factor) of llama-batched-bench's S_TG, B >= 2

    def decode_points(self) -> tuple[tuple[int, float], ...]:
        """(sequences, factor) for a decode step: one sequence is the single-stream factor, more the batched ones."""
        one = ((1, self.decode_factor),) if self.decode_factor else ()
        return one + self.batched_factors


@record
class Hardware:
    """The machine an answer is for: its GPUs as software sees them, the host's memory, CPU and drive, how the GPUs
    are attached, and notes on what was probed, given or assumed. From --gpu names (hardware.select), a machine
    file (hardware.machine_file) or the machine flags (hardware.flags)."""

    label: str
    gpus: tuple[GPUSpec, ...]
    host_capacity_bytes: int | None  # system RAM; None: unknown (not checked)
    attachments: tuple[GPUAttachment, ...] | None = None  # how each GPU is attached; None: each GPU's default
    notes: tuple[str, ...] = ()
    disk: StorageSpec | None = None  # the drive models load from (probed, --disk, or a machine file's)
    cpu_cores: int | None = None  # the threads llama.cpp runs CPU work on (-t; its default: physical cores)
    ram_bandwidth_gbps: float | None = None  # system memory bandwidth, when given (a file or --ram-type)
    cpu: CPUSpec | None = None  # the CPU (probed, --cpu, or a machine file's cpu the database knows)
    cpu_name: str | None = None  # the CPU as a machine file names it (free text)
    source: Path | None = None  # the machine file it was read from
    speed_calibration: SpeedCalibration | None = None  # measured on this machine (gemma-fit bench --save)
    cpu_sockets: int = 1  # CPU sockets (NUMA nodes) of one machine; the CPU's figures are per socket
    numa: str | None = None  # llama.cpp's --numa: one of NUMA_MODES; None: not given (threads span the sockets)
    threads_flag: int | None = None  # -t the printed command sets (--threads, or one node's cores); None: default

    def times(self, n: int) -> Hardware:
        """The same machine with each GPU (and its slot) n times."""
        attachments = self.attachments * n if self.attachments is not None else None
        # another machine: what was measured on this one does not carry over
        return replace(self, gpus=self.gpus * n, attachments=attachments, label=f"{n} x {self.label}",
                       speed_calibration=None)


_CPU_WORDS = {"amd", "intel", "processor", "cpu", "core", "apple", "qualcomm", "nvidia", "aws"}


def cpu_key(name: str) -> str:
    """The comparison key of a CPU name: lower case, vendor words dropped, words joined by hyphens
    (`AMD Ryzen 9 7950X`, `ryzen-9-7950x` and `Ryzen 9 7950X` are one key; a board's revision dropped)."""
    text = name.lower().replace("(r)", " ").replace("(tm)", " ")
    # what kernels add to the marketing name: "16-Core Processor", "13th Gen", "w/ Radeon 780M Graphics"
    text = re.sub(r"\b\d+-core\b|\b\d+(st|nd|rd|th) gen\b|\s(w/|with) .*$", " ", text)
    text = re.sub(r"\s+rev\s+[0-9.]+\s*$", " ", text)  # a board's /proc/cpuinfo "Model": "... Model B Rev 1.4"
    words = [w for w in re.split(r"[^a-z0-9]+", text) if w and w not in _CPU_WORDS]
    return "-".join(words)


@record
class PcieRate:
    """One PCIe generation and width: its theoretical rate and what copies reached in a measurement."""

    per_direction_gbps: float  # theoretical, after encoding
    measured_gbps: float | None  # what copies reached in a cited measurement


def as_seen_by_software(gpu: GPUSpec) -> tuple[GPUSpec, ...]:
    """A card that software sees as several devices (an MI250X: two 64 GB GCDs) as those devices, each
    with its share of the card's memory, bandwidth, throughput and power; any other GPU as itself."""
    n = gpu.logical_devices
    if n <= 1:
        return (gpu,)

    def share(x: float | None) -> float | None:
        return None if x is None else x / n

    return tuple(replace(
        gpu, id=f"{gpu.id}-gcd{i}", name=f"{gpu.name} (device {i + 1} of {n})", memory_bytes=gpu.memory_bytes // n,
        usable_memory_bytes=gpu.usable_memory_bytes // n, memory_bandwidth_gbps=share(gpu.memory_bandwidth_gbps),
        fp16_tensor_tflops=share(gpu.fp16_tensor_tflops), int8_tensor_tops=share(gpu.int8_tensor_tops),
        fp32_tflops=share(gpu.fp32_tflops), tdp_w=share(gpu.tdp_w), logical_devices=1,
        cuda_total_bytes=None if gpu.cuda_total_bytes is None else gpu.cuda_total_bytes // n,
    ) for i in range(n))
