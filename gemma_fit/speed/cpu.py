"""The CPU side of speed: which CPU runs the CPU layers, how fast its threads read weights in decode,
and how fast they multiply a prompt.

Terms from published CPU-only llama.cpp runs (model_db/llamacpp/cpu_decode.yaml, written by
benchmarks/fit_cpu_decode.py): decode reads weights at a family's share of datasheet bandwidth, but
never faster than threads x what one thread draws (a core keeps only so many cache misses in flight);
prefill multiplies at a per-thread rate of its instruction-set group (AVX2, AVX-512, AMX, ARM).
"""

from __future__ import annotations

import math
from functools import cache

from gemma_fit.base.errors import GemmaFitError
from gemma_fit.base.record import record
from gemma_fit.db.rules import read_packaged_yaml
from gemma_fit.gguf.types import file_type as resolve_file_type
from gemma_fit.hardware.spec import CPUSpec, Hardware

ARM_HINTS = ("arm", "aarch64", "graviton", "ampere", "apple", "snapdragon", "raspberry", "cortex", "neoverse",
             "grace", "jetson")
# The CPU beside a unified GPU: Apple's cores run NEON; Jetson Orin's Cortex-A78AE NEON; DGX Spark's
# Cortex-X925 and Jetson Thor's Neoverse V3AE have SVE2; Strix Halo's Zen 5 cores AVX-512.
UNIFIED_CPU = {"macos": ("arm", "neon"), "l4t": ("arm", "neon"), "dgx-os": ("arm", "sve"),
               "amd-uma": ("x86", "avx512")}
PREFILL_GROUP = {"avx2": "avx2", "avx512": "avx512", "amx": "amx", "neon": "arm", "sve": "arm"}
# The weight types llama.cpp's AMX kernels multiply (ggml-cpu/amx/common.h qtype_has_amx_kernels). On an AMX CPU a
# CPU-only build keeps such weights in the AMX buffer, the first of the CPU's extra buffer types
# (ggml-cpu.cpp ggml_backend_cpu_get_extra_buffer_types; with a GPU the host buffer comes first, llama-model.cpp
# make_cpu_buft_list), and multiplies a prompt's batches on the tiles. Every other type, the routed experts (the AMX
# buffer takes MUL_MAT only, not MUL_MAT_ID: amx.cpp supports_op) and attention run the AVX-512 kernels.
AMX_WEIGHT_TYPES = ("Q4_0", "Q4_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K", "IQ4_XS")


@cache
def _terms() -> dict:
    return read_packaged_yaml("llamacpp/cpu_decode.yaml")


@record
class CPURates:
    """What the CPU layers run at on this hardware."""

    cpu: CPUSpec
    how: str  # where the CPU came from: probed, --cpu, the database, or assumed
    threads: int | None  # llama.cpp's -t; None: unknown, no per-thread cap
    sockets: int = 1  # the machine's CPU sockets (NUMA nodes); bandwidths are per socket
    numa: str | None = None  # llama.cpp's --numa, None when not given

    @property
    def memory_nodes(self) -> int:
        """The sockets whose memory decode reads at full rate. Without --numa the model's pages land on one node
        (the page cache fills from the node that read the file) and the other sockets' threads reach it across
        the socket link: one node's bandwidth, as published dual-socket runs show (docs/speed.md). isolate and
        numactl keep to one node; distribute, with the pages spread, reads every node's."""
        return self.sockets if self.numa == "distribute" else 1

    @property
    def family(self) -> str:
        return self.cpu.family


def cpu_of(hardware: Hardware) -> CPURates:
    """The CPU that runs the CPU layers: the hardware's own (probed, --cpu or a machine file's cpu the
    database knows), a unified device's CPU, or one recognised by name; else an AVX2 x86 CPU, assumed."""
    cpu, how = _cpu_and_how(hardware)
    return CPURates(cpu, how, hardware.cpu_cores, hardware.cpu_sockets, hardware.numa)


def _cpu_and_how(hardware: Hardware) -> tuple[CPUSpec, str]:
    if hardware.cpu is not None:
        return hardware.cpu, hardware.cpu.source or "given"
    for g in hardware.gpus:
        if g.unified_memory and g.unified_platform in UNIFIED_CPU:
            family, isa = UNIFIED_CPU[g.unified_platform]
            return CPUSpec(f"{g.name}'s CPU", family, isa), "the unified device's CPU"
    name = hardware.cpu_name or ""
    if any(h in name.lower() for h in ARM_HINTS):
        return CPUSpec(name, "arm", "neon"), "an ARM CPU by its name, NEON assumed"
    return CPUSpec(name or "x86 CPU", "x86", "avx2"), "an x86 CPU with AVX2 assumed"


def published_cpus() -> dict:
    """The CPUs fitted on their own published decode runs (cpu_decode.yaml `cpus`): id -> efficiency, runs."""
    cpus: dict = _terms().setdefault("cpus", {})
    return cpus


def design(cpu: CPUSpec) -> str | None:
    """The core design whose published runs set a CPU's terms apart from its family's: "apple" for Apple's own Arm
    cores (an M-series chip's CPU), whose cores each keep far more memory reads in flight and multiply far faster
    per clock than the Cortex and Neoverse cores of the arm medians; None for every other CPU."""
    if cpu.family == "arm" and (cpu.id.startswith("apple-") or cpu.name.lower().startswith("apple")):
        return "apple"
    return None


def _design_terms(cpu: CPUSpec) -> dict:
    kind = design(cpu)
    entry: dict = (_terms().get("designs") or {}).get(kind, {}) if kind else {}
    return entry


def decode_efficiency(cpu: CPUSpec) -> tuple[float, str]:
    """The share of datasheet memory bandwidth CPU decode reaches: the CPU's own figure where published runs of
    it were fitted (as a GPU chip's are: a Raspberry Pi 4's memory controller delivers less of its datasheet
    than the ARM median), else its core design's (Apple), else its family's (x86, arm)."""
    own = published_cpus().get(cpu.id) if cpu.id else None
    if own is not None and "efficiency" in own:
        return float(own["efficiency"]), f"fitted on {own['n']} published runs of the {cpu.name}"
    designed = _design_terms(cpu)
    if "efficiency" in designed:
        return float(designed["efficiency"]), f"fitted on {designed['n']} published runs of {design(cpu)} CPUs"
    fitted = _terms()["families"]
    family = "arm-v8.0" if cpu.family == "arm" and not cpu.dotprod and "arm-v8.0" in fitted else cpu.family
    entry = fitted.get(family) or fitted["x86"]
    return float(entry["efficiency"]), f"median of {entry['n']} published {family} CPU runs"


def per_thread_gbps(cpu: CPUSpec | None = None) -> tuple[float, str]:
    """GB/s one decode thread draws: its core design's figure per GHz of boost clock where one was fitted and the
    clock is known (a core's reads in flight retire at its clock), else the median of runs on one or two threads;
    times the CPU's own factor where its own thread-bound runs were fitted (a chip generation's cores keep their own
    number of reads in flight)."""
    rate, where = _per_thread_base(cpu)
    own = (published_cpus().get(cpu.id) or {}) if cpu is not None and cpu.id else {}
    factor = own.get("per_thread_factor")
    if factor and cpu is not None:
        return (round(rate * float(factor), 1),
                f"{where}, x{float(factor):g} from its own {own['n_threads']} thread-bound runs on the {cpu.name}")
    return rate, where


def _per_thread_base(cpu: CPUSpec | None) -> tuple[float, str]:
    designed = _design_terms(cpu) if cpu is not None else {}
    per_ghz = designed.get("per_thread_gbps_per_ghz")
    if per_ghz and cpu is not None and cpu.boost_clock_ghz:
        return (round(float(per_ghz) * cpu.boost_clock_ghz, 1),
                f"{float(per_ghz):g} GB/s per GHz x {cpu.boost_clock_ghz:g} GHz, fitted on {designed['n']} published "
                f"runs of {design(cpu)} CPUs")
    t = _terms()["per_thread"]
    return float(t["gbps"]), f"median of {t['n']} published runs on <= {t['max_threads']} threads"


def expert_read_share() -> tuple[float, str]:
    """The share of the CPU's decode bandwidth routed-expert weights are read at in a CPU-only build: llama.cpp
    repacks them for its CPU kernels (ggml-cpu/repack.cpp: Q4_K on AVX2 and dot-product NEON, Q5_K/Q6_K on NEON),
    and the repacked mul_mat_id runs one small matrix-vector product per routed expert (8 of Gemma 4 26B-A4B's 128,
    704 rows each) split over the threads, which stream them slower than one large dense matrix."""
    entry = _terms().get("experts") or {}
    if "decode_share" not in entry:
        return 1.0, "the dense weights' rate"
    return float(entry["decode_share"]), f"fitted on {entry['n_decode']} published mixture-of-experts runs"


def expert_prefill_share() -> float:
    """The share of the CPU's matrix rate a prompt's routed-expert products reach: the repacked mul_mat_id
    (ggml-cpu/repack.cpp forward_mul_mat_id) runs one matrix-vector product per routed token row instead of a
    blocked matrix product, re-reading each expert's weights for each of its ~32 rows of a 512-token ubatch."""
    entry = _terms().get("experts") or {}
    return float(entry.get("prefill_share", 1.0))


def decode_bandwidth_gbps(ram_bw: float, rates: CPURates) -> tuple[float, str]:
    """GB/s the CPU layers read weights at in decode, and which bound sets it."""
    eff, where = decode_efficiency(rates.cpu)
    nodes = rates.memory_nodes
    memory = ram_bw * eff * nodes
    per_thread, thread_where = per_thread_gbps(rates.cpu)
    if rates.threads and rates.threads * per_thread < memory:
        return (rates.threads * per_thread,
                f"{rates.threads} threads x {per_thread:g} GB/s a thread draws ({thread_where}): fewer threads "
                f"than {ram_bw:g} GB/s of memory needs")
    of = f"{nodes} sockets x {ram_bw:g} GB/s" if nodes > 1 else f"{ram_bw:g} GB/s"
    one = ", one socket's: the weights sit on one NUMA node" if rates.sockets > 1 and nodes == 1 else ""
    return memory, f"{eff:.0%} of {of} datasheet system-memory bandwidth ({where}){one}"


def thread_bound(ram_bw: float, rates: CPURates) -> bool:
    """Whether the threads, not the memory, set CPU decode (decode_bandwidth_gbps's thread cap)."""
    eff, _ = decode_efficiency(rates.cpu)
    return decode_bandwidth_gbps(ram_bw, rates)[0] < ram_bw * eff * rates.memory_nodes


def dense_equivalent_bytes(read_bytes: float, expert_bytes: float) -> float:
    """The bytes a CPU-only build's decode costs as if all were dense: `expert_bytes` of `read_bytes` are routed
    experts, read at expert_read_share of the rate."""
    return read_bytes - expert_bytes + expert_bytes / expert_read_share()[0] if expert_bytes else read_bytes


def cpu_decode_s(read_bytes: float, ram_bw: float, rates: CPURates, expert_bytes: float = 0.0) -> float:
    """Seconds the CPU reads a token's bytes in; `expert_bytes` of them routed experts (expert_read_share)."""
    bw, _ = decode_bandwidth_gbps(ram_bw, rates)
    return dense_equivalent_bytes(read_bytes, expert_bytes) / (bw * 1e9)


def amx_multiplies(cpu: CPUSpec, file_type: str) -> bool:
    """Whether a CPU-only build multiplies this file type's prompt batches on the CPU's AMX tiles: an AMX CPU and a
    file whose main weight type has AMX kernels (its bumped tensors, mostly of the same kernel family, alike)."""
    if cpu.isa != "amx" or not file_type or "amx" not in _terms()["prefill"]:
        return False
    try:
        return resolve_file_type(file_type).default_type.name in AMX_WEIGHT_TYPES
    except GemmaFitError:
        return False


def prefill_group(cpu: CPUSpec, file_type: str = "", amx: bool = True) -> str:
    """The matrix-rate group of a CPU for a file type's products; `amx` False for products that never run on an AMX
    CPU's tiles (routed experts; a decode step's few rows, which fill a few of the 32 rows an AMX tile pair takes:
    ggml-cpu/amx/mmq.cpp BLOCK_M)."""
    if cpu.family == "arm" and not cpu.dotprod:  # a Cortex-A72's cores lack the dot products NEON kernels use
        return "arm-v8.0"
    kind = design(cpu)
    if kind and kind in _terms()["prefill"]:  # Apple's cores: a group of their own
        return kind
    if cpu.isa == "amx" and not (amx and amx_multiplies(cpu, file_type)):
        return "avx512"  # the AVX-512 kernels an AMX CPU runs outside its tiles
    return PREFILL_GROUP[cpu.isa]


def prefill_gflops_per_thread(rates: CPURates, file_type: str = "", amx: bool = True) -> tuple[float, str]:
    """Matrix-product GFLOP/s one thread reaches in prefill, for the CPU's instruction-set group (an AMX CPU's tiles
    only for the types they multiply and `amx` products, never for attention: no `file_type`); on a CPU with
    published Gemma prompt runs of its own, scaled by what they show for this file type's kernels (or for all its
    runs, a type it has none of): each type's dot product unpacks its blocks its own way (an Armv8.0 core, without
    FP16 arithmetic or dot-product instructions, runs Q8_0 prompts 1.6x as fast as F16 ones)."""
    group = prefill_group(rates.cpu, file_type, amx)
    entry = _terms()["prefill"][group]
    rate, where = float(entry["gflops_per_thread"]), f"{group} median of {entry['n']} published runs"
    per_ghz, clock = entry.get("gflops_per_thread_per_ghz"), rates.cpu.boost_clock_ghz
    if per_ghz and clock:  # a core's arithmetic scales with its clock: the group's rate per GHz x this CPU's boost
        rate = round(float(per_ghz) * clock, 1)
        where = (f"{group} median of {entry['n_clocked']} published runs, {float(per_ghz):g} GFLOP/s per GHz x "
                 f"{clock:g} GHz boost")
    own = (published_cpus().get(rates.cpu.id) or {}).get("prefill") if rates.cpu.id else None
    if own:
        by_type = own.get("by_type") or {}
        factor = by_type.get(file_type, own["all"])
        which = f"its {file_type} runs" if file_type in by_type else "all its runs"
        where = f"{where}, x{float(factor):.2f} from {which} ({own['n']} on the {rates.cpu.name})"
        rate *= float(factor)
    return rate, where


DEFAULT_RAM_BANDWIDTH_GBPS = 89.6  # DDR5-5600, two 64-bit channels: a current desktop
ASSUMED_THREADS = 8  # a desktop CPU's performance cores, where the threads are not known


def system_bandwidth_gbps(hardware: Hardware, rates: CPURates, notes: list[str]) -> float:
    """Datasheet GB/s of the memory the CPU layers read: the machine's (file or flags), a unified device's,
    the CPU's supported maximum, else a current desktop's, each but the first said in the notes."""
    given = hardware.ram_bandwidth_gbps
    if given:
        return given
    unified = next((g for g in hardware.gpus if g.unified_memory and g.memory_bandwidth_gbps), None)
    if unified is not None and unified.memory_bandwidth_gbps:  # the CPU reads the same memory as the GPU
        notes.append(f"system memory is {unified.name}'s unified memory ({unified.memory_bandwidth_gbps} GB/s)")
        return unified.memory_bandwidth_gbps
    if rates.cpu.ram_bandwidth_gbps:
        notes.append(f"system memory assumed {rates.cpu.memory} = {rates.cpu.ram_bandwidth_gbps:g} GB/s (the "
                     f"{rates.cpu.name}'s supported maximum); give --ram-type (and --ram-channels) for yours")
        return rates.cpu.ram_bandwidth_gbps
    notes.append(f"system memory assumed {DEFAULT_RAM_BANDWIDTH_GBPS} GB/s (DDR5-5600 dual channel); "
                 "give --ram-type (and --ram-channels) or --hardware with ram_type/speed for yours")
    return DEFAULT_RAM_BANDWIDTH_GBPS


def attention_share(cells: float) -> tuple[float, str]:
    """The share of a CPU's matrix-product rate its prompt attention reaches when each query attends `cells` cached
    tokens on average: llama.cpp's CPU flash attention takes one query row at a time over the whole cache,
    dequantizing K and V row by row, so it falls behind the blocked matrix products as the cache outgrows the CPU's
    caches: sqrt(full_rate_tokens / cells) of the matrix rate (benchmarks/fit_cpu_decode.py: the published sweeps'
    slowdown from depth 2k to 16k follows the square root), the matrix rate itself where no run measured it."""
    entry = _terms().get("attention")
    if not entry:
        return 1.0, "the matrix products' rate (no published runs at depth)"
    share = min(1.0, math.sqrt(float(entry["full_rate_tokens"]) / max(cells, 1.0)))
    return share, (f"x{share:.2g} of the matrix rate over {cells:,.0f} cached tokens per query (fitted on "
                   f"{entry['n']} published runs at depth)")


def cpu_attention_s(flops: float, cells: float, rates: CPURates, notes: list[str]) -> float:
    """Seconds the CPU takes for a prompt's attention (QK^T and the weighted sum over the cache), each query
    attending `cells` cached tokens on average."""
    if not flops:
        return 0.0
    per_thread, _ = prefill_gflops_per_thread(rates)
    share, where = attention_share(cells)
    notes.append(f"CPU prompt attention at {where}")
    return flops / (per_thread * share * (rates.threads or ASSUMED_THREADS) * 1e9)


def cpu_prefill_s(flops: float, rates: CPURates, notes: list[str], file_type: str = "",
                  expert_flops: float = 0.0) -> float:
    """Seconds the CPU takes for a prompt's matrix products (CPU only: with a GPU, llama.cpp computes
    large batches on the GPU); `expert_flops` of them routed experts', at expert_prefill_share of the rate."""
    per_thread, where = prefill_gflops_per_thread(rates, file_type)
    threads = rates.threads or ASSUMED_THREADS
    share = expert_prefill_share() if expert_flops else 1.0
    routed_rate = prefill_gflops_per_thread(rates, file_type, amx=False)[0] if expert_flops else per_thread
    notes.append(f"CPU prefill at {per_thread:g} GFLOP/s per thread x {threads} threads ({where})"
                 + (f"; routed experts at x{share:g} of {routed_rate:g} GFLOP/s per thread"
                    + (" (AVX-512: the AMX buffer takes no MUL_MAT_ID)" if routed_rate != per_thread else "")
                    if share != 1.0 else "")
                 + ("" if rates.threads else f"; {ASSUMED_THREADS} threads assumed (--threads)"))
    return ((flops - expert_flops) / per_thread + expert_flops / (routed_rate * share)) / (threads * 1e9)


@cache
def _hybrid() -> dict:
    return read_packaged_yaml("llamacpp/hybrid_decode.yaml")


def hybrid_split_s(gpu_kernels: float, cpu_expert_layers: int) -> float:
    """Per-token seconds a split inside each layer adds when routed experts stay in system memory beside
    a GPU (model_db/llamacpp/hybrid_decode.yaml)."""
    if cpu_expert_layers == 0:
        return 0.0
    h = _hybrid()
    per_kernel, per_layer = float(h["seconds_per_gpu_kernel"]), float(h["seconds_per_cpu_expert_layer"])
    return gpu_kernels * per_kernel + cpu_expert_layers * per_layer
