"""The CPU side: the probe's parsers on recorded /proc/cpuinfo and sysctl, --cpu resolution, and the
decode and prefill rules with their worked examples (tests/data/cpuinfo/README.md says where each
sample comes from)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from gemma_fit.base.errors import BadInput
from gemma_fit.hardware.catalog import find_cpu, resolve_cpu
from gemma_fit.hardware.flags import MachineFlags, with_machine_flags
from gemma_fit.hardware.probe_cpu import cpu_from_cpuinfo, cpu_from_sysctl, isa_from_flags, with_database
from gemma_fit.hardware.spec import CPUSpec, Hardware
from gemma_fit.speed.cpu import (
    CPURates,
    attention_share,
    cpu_of,
    decode_bandwidth_gbps,
    decode_efficiency,
    per_thread_gbps,
    prefill_gflops_per_thread,
)

DATA = Path(__file__).parent / "data" / "cpuinfo"


def test_cpuinfo_of_the_build_vm() -> None:
    cpu = cpu_from_cpuinfo((DATA / "xeon-kvm-2core.txt").read_text(), "x86_64")
    assert cpu is not None
    assert (cpu.name, cpu.family, cpu.isa, cpu.cores, cpu.threads) == (
        "Intel(R) Xeon(R) Processor", "x86", "amx", 2, 2)


def test_cpuinfo_of_an_arm_board() -> None:
    cpu = cpu_from_cpuinfo((DATA / "cortex-a76-4core.txt").read_text(), "aarch64")
    assert cpu is not None
    assert (cpu.name, cpu.family, cpu.isa, cpu.cores) == ("Raspberry Pi 5 Model B Rev 1.0", "arm", "neon", 4)


def test_cpuinfo_without_processors_is_none() -> None:
    assert cpu_from_cpuinfo("", "x86_64") is None


@pytest.mark.parametrize(("flags", "arm", "isa"), [
    ({"avx2", "fma"}, False, "avx2"),
    ({"avx2", "avx512f"}, False, "avx512"),
    ({"avx512f", "amx_tile", "amx_int8"}, False, "amx"),
    ({"asimd"}, True, "neon"),
    ({"asimd", "sve", "sve2"}, True, "sve"),
])
def test_isa_from_flags(flags: set[str], arm: bool, isa: str) -> None:
    assert isa_from_flags(flags, arm) == isa


def test_a_mac_from_sysctl() -> None:
    answers = {"machdep.cpu.brand_string": "Apple M4 Max", "hw.physicalcpu": "16", "hw.logicalcpu": "16",
               "hw.perflevel0.physicalcpu": "12"}
    cpu = cpu_from_sysctl(answers.get)
    assert cpu is not None
    assert (cpu.family, cpu.isa, cpu.cores, cpu.default_threads) == ("arm", "neon", 16, 12)


def test_cpu_names_resolve() -> None:
    for name in ("Ryzen 9 7950X", "AMD Ryzen 9 7950X", "ryzen-9-7950x", "7950x", "7950X"):
        cpu = resolve_cpu(name)
        assert cpu.name == "AMD Ryzen 9 7950X"
    assert (cpu.isa, cpu.cores, cpu.ram_bandwidth_gbps) == ("avx512", 16, 83.2)  # DDR5-5200 x 2 x 8 bytes


def test_hybrid_intel_defaults_to_its_p_cores() -> None:
    cpu = resolve_cpu("i9-13900K")
    assert (cpu.cores, cpu.default_threads) == (24, 8)  # llama.cpp's default -t skips the E-cores


def test_unknown_cpu_names_close_ids() -> None:
    with pytest.raises(BadInput, match=r"unknown CPU 'Ryzen 9 7960X'.*ryzen-9-7950x"):
        resolve_cpu("Ryzen 9 7960X")
    with pytest.raises(BadInput, match="empty"):
        resolve_cpu("  ")
    assert find_cpu("a toaster") is None


def test_probe_takes_the_memory_system_from_the_database() -> None:
    for kernel_name in ("AMD Ryzen 9 7950X 16-Core Processor", "13th Gen Intel(R) Core(TM) i9-13900K",
                        "AMD Ryzen 7 7840U w/ Radeon 780M Graphics"):
        probed = CPUSpec(kernel_name, "x86", "avx2", cores=4, threads=8)
        merged = with_database(probed, find_cpu)
        assert merged.ram_bandwidth_gbps is not None, kernel_name
        assert (merged.cores, merged.isa) == (4, "avx2")  # the probe's own figures stand
    unknown = CPUSpec("Intel(R) Xeon(R) Processor", "x86", "amx", cores=2, threads=2)
    assert with_database(unknown, find_cpu) == unknown


def _cpu_box(**kw: object) -> Hardware:
    return Hardware("CPU only", (), 64 * 1024**3, None, **kw)  # type: ignore[arg-type]


def test_decode_is_memory_bound_with_enough_threads() -> None:
    eff, _ = decode_efficiency(resolve_cpu("7950x"))
    bw, how = decode_bandwidth_gbps(96.0, CPURates(resolve_cpu("7950x"), "given", 16))
    assert bw == pytest.approx(96.0 * eff)
    assert "datasheet" in how


def test_decode_is_thread_bound_on_two_threads() -> None:
    per_thread, _ = per_thread_gbps()
    bw, how = decode_bandwidth_gbps(96.0, CPURates(resolve_cpu("7950x"), "given", 2))
    assert bw == pytest.approx(2 * per_thread)
    assert "2 threads" in how


def test_cpu_flag_sets_kernels_threads_and_notes() -> None:
    hw = with_machine_flags(_cpu_box(), MachineFlags(cpu="Ryzen 9 7950X"))
    rates = cpu_of(hw)
    assert (rates.cpu.isa, rates.threads) == ("avx512", 16)
    assert any(n.startswith("--cpu: AMD Ryzen 9 7950X") for n in hw.notes)
    assert prefill_gflops_per_thread(rates)[0] == prefill_gflops_per_thread(
        CPURates(CPUSpec("x", "x86", "amx", boost_clock_ghz=5.7), "", 1))[0]  # AMX CPUs run the AVX-512 group's rate
    hw = with_machine_flags(_cpu_box(), MachineFlags(cpu="7950x", threads=4))
    assert cpu_of(hw).threads == 4


def test_a_cpu_of_known_clock_prefills_at_its_group_rate_per_ghz() -> None:
    """A core's arithmetic scales with its clock: the 7950X (5.7 GHz boost, hardware_db) takes the AVX-512 group's
    GFLOP/s per thread per GHz x 5.7; a CPU of unknown clock the group's per-thread median."""
    import yaml

    group = yaml.safe_load((Path(__file__).parent.parent / "model_db/llamacpp/cpu_decode.yaml").read_text())["prefill"]
    fast = resolve_cpu("7950x")
    assert fast.boost_clock_ghz == 5.7
    rate, how = prefill_gflops_per_thread(CPURates(fast, "", 16))
    assert rate == pytest.approx(round(group["avx512"]["gflops_per_thread_per_ghz"] * 5.7, 1))
    assert "5.7 GHz boost" in how
    slow = replace(fast, boost_clock_ghz=3.0)
    assert prefill_gflops_per_thread(CPURates(slow, "", 16))[0] < rate
    unknown = replace(fast, boost_clock_ghz=None)
    assert prefill_gflops_per_thread(CPURates(unknown, "", 16))[0] == group["avx512"]["gflops_per_thread"]


def test_the_probe_reads_the_fastest_cores_clock_from_cpufreq(tmp_path: Path) -> None:
    from gemma_fit.hardware.probe_cpu import max_clock_ghz

    assert max_clock_ghz(tmp_path) is None  # a VM without cpufreq
    for i, khz in enumerate(("4500000", "5700000\n", "garbage")):
        d = tmp_path / f"cpu{i}" / "cpufreq"
        d.mkdir(parents=True)
        (d / "cpuinfo_max_freq").write_text(khz)
    assert max_clock_ghz(tmp_path) == 5.7
    (tmp_path / "cpu0" / "cpufreq" / "cpuinfo_max_freq").write_text("99999999999")  # out of range: ignored
    assert max_clock_ghz(tmp_path) == 5.7


def test_unknown_cpu_defaults_to_avx2_and_says_so() -> None:
    rates = cpu_of(_cpu_box())
    assert (rates.cpu.family, rates.cpu.isa, rates.threads) == ("x86", "avx2", None)
    assert "assumed" in rates.how


def test_the_pi_5_has_dot_products_and_the_pi_4_has_not() -> None:
    a76 = cpu_from_cpuinfo((DATA / "cortex-a76-4core.txt").read_text(), "aarch64")
    assert a76 is not None and a76.dotprod  # "asimddp" in its Features
    a72 = cpu_from_cpuinfo((DATA / "cortex-a76-4core.txt").read_text().replace(" asimddp", ""), "aarch64")
    assert a72 is not None and not a72.dotprod
    pi4, pi5 = resolve_cpu("rpi4"), resolve_cpu("rpi5")
    assert (pi4.dotprod, pi5.dotprod) == (False, True)
    # Armv8.0 cores multiply a prompt at their own, fitted rate: a seventh of the dot-product cores'
    slow = prefill_gflops_per_thread(CPURates(pi4, "", 4))
    fast = prefill_gflops_per_thread(CPURates(pi5, "", 4))
    assert "arm-v8.0" in slow[1] and slow[0] < fast[0] / 5


def test_two_sockets_double_the_threads_not_the_memory_without_numa() -> None:
    one = with_machine_flags(_cpu_box(), MachineFlags(cpu="epyc-9554"))
    two = with_machine_flags(_cpu_box(), MachineFlags(cpu="epyc-9554", sockets=2))
    assert (cpu_of(one).threads, cpu_of(two).threads) == (64, 128)
    bw1, _ = decode_bandwidth_gbps(460.8, cpu_of(one))
    bw2, how = decode_bandwidth_gbps(460.8, cpu_of(two))
    assert bw2 == bw1 and "one NUMA node" in how  # the pages sit on one node
    assert any("2 sockets without --numa" in n for n in two.notes)


def test_numa_distribute_reads_every_socket_and_isolate_one() -> None:
    spread = with_machine_flags(_cpu_box(), MachineFlags(cpu="epyc-9554", sockets=2, numa="distribute"))
    alone = with_machine_flags(_cpu_box(), MachineFlags(cpu="epyc-9554", sockets=2, numa="isolate"))
    one, _ = decode_bandwidth_gbps(460.8, cpu_of(with_machine_flags(_cpu_box(), MachineFlags(cpu="epyc-9554"))))
    assert decode_bandwidth_gbps(460.8, cpu_of(spread))[0] == pytest.approx(2 * one)
    assert decode_bandwidth_gbps(460.8, cpu_of(alone))[0] == pytest.approx(one)
    assert (cpu_of(spread).threads, cpu_of(alone).threads) == (128, 64)
    # a probed count is the whole machine's already: isolate keeps one socket's share of it
    probed = Hardware("CPU only", (), 64 * 1024**3, None, cpu_cores=32)
    assert with_machine_flags(probed, MachineFlags(sockets=2, numa="isolate")).cpu_cores == 16
    assert with_machine_flags(probed, MachineFlags(sockets=2)).cpu_cores == 32


@pytest.mark.parametrize("flags", [MachineFlags(numa="interleave"), MachineFlags(sockets=0),
                                   MachineFlags(sockets=17)])
def test_bad_socket_and_numa_flags_are_one_line(flags: MachineFlags) -> None:
    with pytest.raises(BadInput):
        with_machine_flags(_cpu_box(), flags)


def test_the_printed_command_runs_the_numa_mode_the_speed_was_counted_for() -> None:
    from gemma_fit import api
    from gemma_fit.memory.settings import RunSettings

    def command(numa: str | None) -> str:
        flags = MachineFlags(ram_gb=256, cpu="epyc-9554", sockets=2, numa=numa)
        return api.check("gemma-3-1b", ["cpu"], quant="Q4_0", settings=RunSettings(n_ctx=4096),
                         machine=flags).command
    assert command(None).startswith("llama-server ") and "--numa" not in command(None)
    assert command("distribute").endswith(" --numa distribute") and " -t " not in command("distribute")
    assert command("numactl").startswith("numactl --cpunodebind=0 --membind=0 llama-server ")
    # one node's cores: llama.cpp's default -t would count both sockets', so the command says how many
    assert command("isolate").endswith(" -t 64 --numa isolate")


def test_the_printed_command_runs_the_threads_the_speed_was_counted_for() -> None:
    from gemma_fit import api
    from gemma_fit.memory.settings import RunSettings

    def command(threads: int | None) -> str:
        return api.check("gemma-3-1b", ["cpu"], quant="Q4_0", settings=RunSettings(n_ctx=4096),
                         machine=MachineFlags(ram_gb=64, cpu="7950x", threads=threads)).command
    assert command(6).endswith(" -t 6") and " -t " not in command(None)


def test_a_cpu_with_its_own_published_runs_decodes_at_its_own_figure() -> None:
    """The Raspberry Pi 4's 34 published Gemma decode runs reach 0.27 of its 12.8 GB/s datasheet (its memory
    controller: STREAM reaches ~5.5 GB/s on it), under the ARM median; any other ARM CPU keeps the median."""
    pi4 = resolve_cpu("raspberry-pi-4")
    own, how = decode_efficiency(pi4)
    family, _ = decode_efficiency(CPUSpec("Some Arm board", "arm", "neon"))
    assert pi4.id == "raspberry-pi-4" and "published runs of the" in how
    assert 0.2 < own < family
    # a Pi's /proc/cpuinfo names the board ("Model : Raspberry Pi 4 Model B Rev 1.4"): the probe finds the entry
    probed = with_database(CPUSpec("Raspberry Pi 4 Model B Rev 1.4", "arm", "neon", cores=4), find_cpu)
    assert probed.id == "raspberry-pi-4" and decode_efficiency(probed)[0] == own
    assert find_cpu("Raspberry Pi 5 Model B Rev 1.0").id == "raspberry-pi-5"  # type: ignore[union-attr]
    # without its own figure a Cortex-A72 takes the Armv8.0 cores' (the dot-product cores' median is higher)
    v80, where = decode_efficiency(replace(pi4, id=""))
    assert v80 < family and "arm-v8.0" in where
    assert decode_efficiency(replace(pi4, id="", dotprod=True))[0] == family


def test_apple_cores_decode_and_prefill_at_their_own_design_figures() -> None:
    """Apple's cores draw far more per thread and multiply far faster per clock than the arm medians: an M4 Pro's
    ten P-cores decode at min(share x 273 GB/s, 10 x per-GHz x 4.512 GHz), above the arm family's figure."""
    m4 = resolve_cpu("apple m4 pro")
    rates = CPURates(m4, "--cpu", m4.default_threads)
    bw, how = decode_bandwidth_gbps(m4.ram_bandwidth_gbps or 0, rates)
    arm = CPURates(replace(m4, id="", name="Some Arm CPU"), "--cpu", m4.default_threads)
    assert m4.default_threads == 10 and bw > decode_bandwidth_gbps(m4.ram_bandwidth_gbps or 0, arm)[0] * 1.3
    assert "apple" in how
    assert prefill_gflops_per_thread(rates)[0] > 2 * prefill_gflops_per_thread(arm)[0]


def test_a_cpu_with_its_own_prompt_runs_prefills_each_file_type_at_its_own_rate() -> None:
    """The Pi 4's prompt runs (Gemma 3 270M and 1B in 17 file types) give a factor per type: a Cortex-A72 has no
    FP16 arithmetic, so F16 prompts run well under Q8_0 ones; a type it has no run of takes its median over all; a
    CPU without runs of its own keeps its group's one rate for every type."""
    pi4 = CPURates(resolve_cpu("raspberry-pi-4"), "the database", 4)
    q8, how = prefill_gflops_per_thread(pi4, "Q8_0")
    f16, _ = prefill_gflops_per_thread(pi4, "F16")
    other, other_how = prefill_gflops_per_thread(pi4, "Q2_K")
    board = CPURates(replace(resolve_cpu("raspberry-pi-4"), id=""), "the database", 4)
    group, _ = prefill_gflops_per_thread(board, "F16")
    assert f16 < other < q8 and "its Q8_0 runs" in how and "all its runs" in other_how
    assert prefill_gflops_per_thread(board, "Q8_0")[0] == prefill_gflops_per_thread(board, "F16")[0] == group


def _dual_socket_cpuinfo() -> str:
    """/proc/cpuinfo's shape on a two-package machine: 2 physical ids x 2 cores x 2 hardware threads."""
    blocks, n = [], 0
    for package in range(2):
        for core in range(2):
            for _ in range(2):
                blocks.append(f"processor\t: {n}\nmodel name\t: Intel(R) Xeon(R) Gold 6226R CPU @ 2.90GHz\n"
                              f"physical id\t: {package}\ncore id\t\t: {core}\nflags\t\t: fpu avx2 avx512f\n")
                n += 1
    return "\n".join(blocks)


def test_the_probe_counts_sockets_and_the_answer_reads_one_nodes_memory() -> None:
    cpu = cpu_from_cpuinfo(_dual_socket_cpuinfo(), "x86_64")
    assert cpu is not None and (cpu.sockets, cpu.cores, cpu.threads) == (2, 4, 8)
    probed = Hardware("CPU only", (), 64 * 1024**3, cpu_cores=cpu.cores, cpu=cpu, cpu_sockets=cpu.sockets)
    rates = cpu_of(probed)
    assert rates.threads == 4 and rates.sockets == 2 and rates.memory_nodes == 1  # llama.cpp's default: no --numa
    spread = with_machine_flags(probed, MachineFlags(numa="distribute"))
    assert cpu_of(spread).memory_nodes == 2 and spread.cpu_cores == 4  # 2 per socket x 2: the probe's count
    other = with_machine_flags(probed, MachineFlags(cpu="7950x"))  # another machine's CPU: one socket
    assert other.cpu_sockets == 1


def test_cpu_prompt_attention_falls_behind_the_matrix_rate_as_the_cache_grows() -> None:
    """CPU flash attention takes one query row at a time over the whole cache: the published sweeps at depth
    (Ryzen 9 7950X, Threadripper PRO 5975WX, Gemma 3 12B) slow 3-4x from depth 0 to 16k where the FLOPs alone
    add an eighth; the share of the matrix rate falls with the square root of the tokens attended, never above 1."""
    shallow, _ = attention_share(16)
    mid, how = attention_share(2048)
    deep, _ = attention_share(16384)
    assert shallow == 1.0 and deep < mid < 1.0 and "published runs at depth" in how
    assert abs(mid / deep - 8**0.5) < 0.01  # sqrt(16384 / 2048)


def test_a_mac_named_as_a_gpu_runs_its_cpu_layers_on_the_chips_own_cpu() -> None:
    """--gpu m1-max-64gb: the layers left on the CPU run on the M1 Max's cores (cpus.yaml apple-m1-max), at
    llama.cpp's default -t on a Mac, its 8 performance cores; a discrete card brings no CPU of its own."""
    from gemma_fit.hardware.select import hardware_of

    mac = hardware_of(["m1-max-64gb"])
    assert mac.cpu is not None and mac.cpu.id == "apple-m1-max" and mac.cpu_cores == 8
    assert hardware_of(["m4-pro-64gb"]).cpu.id == "apple-m4-pro"  # type: ignore[union-attr]
    assert hardware_of(["a4000"]).cpu is None


def test_routed_experts_cost_a_cpu_only_build_more_than_their_bytes() -> None:
    """A CPU-only build repacks the routed experts and reads them below the dense rate (fitted on four machines'
    Gemma 4 26B-A4B runs against their dense ones); beside a GPU (--cpu-moe) they stay unrepacked in the host buffer."""
    from gemma_fit.speed.cpu import cpu_decode_s, expert_prefill_share, expert_read_share

    share, how = expert_read_share()
    assert 0.2 < share < 1.0 and "mixture-of-experts" in how and 0.2 < expert_prefill_share() < 1.0
    rates = CPURates(resolve_cpu("7950x"), "given", 16)
    dense = cpu_decode_s(2.6e9, 83.2, rates)
    assert cpu_decode_s(2.6e9, 83.2, rates, expert_bytes=0.95e9) == pytest.approx(
        dense * (1.65e9 + 0.95e9 / share) / 2.6e9)


def test_a_mac_cpu_bound_by_its_performance_cores_does_not_ask_for_more_threads() -> None:
    """llama.cpp's default -t on a Mac is its performance cores; adding the efficiency cores is no remedy, so the
    bottleneck of a thread-bound M1 Max says the P-cores bind it (a 2-thread desktop run still asks for more -t)."""
    from gemma_fit import api
    from gemma_fit.memory.settings import RunSettings

    def bottleneck(cpu: str, threads: int | None) -> str:
        result = api.check("gemma-4-12b", ["cpu"], settings=RunSettings(n_ctx=4096),
                           machine=MachineFlags(ram_gb=64, cpu=cpu, threads=threads))
        return result.performance.bottleneck  # type: ignore[union-attr]

    assert "performance cores" in bottleneck("m1 max", None) and "more threads" not in bottleneck("m1 max", None)
    assert "more threads" in bottleneck("7950x", 2)


def test_an_amx_cpu_multiplies_only_the_types_its_tiles_take_at_the_amx_rate() -> None:
    """A CPU-only build on an AMX CPU keeps Q4_K/Q8_0-type weights in the AMX buffer and multiplies a prompt on the
    tiles (the `amx` group, fitted on a Xeon 6975P-C's runs); F16 weights, attention (no file type) and routed experts
    (MUL_MAT_ID, which the AMX buffer does not take) run the AVX-512 kernels."""
    from gemma_fit.speed.cpu import cpu_prefill_s, expert_prefill_share, prefill_group

    sapphire = resolve_cpu("8480+")
    assert sapphire.isa == "amx"
    assert prefill_group(sapphire, "Q4_K_M") == prefill_group(sapphire, "Q8_0") == "amx"
    assert prefill_group(sapphire, "F16") == prefill_group(sapphire, "Q3_K_M") == prefill_group(sapphire) == "avx512"
    assert prefill_group(sapphire, "Q4_K_M", amx=False) == "avx512"
    avx512 = replace(sapphire, isa="avx512")
    rates, plain = CPURates(sapphire, "given", 56), CPURates(avx512, "given", 56)
    amx_rate = prefill_gflops_per_thread(rates, "Q4_K_M")[0]
    assert amx_rate > 2 * prefill_gflops_per_thread(plain, "Q4_K_M")[0]
    assert prefill_gflops_per_thread(rates, "F16")[0] == prefill_gflops_per_thread(plain, "F16")[0]
    notes: list[str] = []
    routed = prefill_gflops_per_thread(rates, "Q4_K_M", amx=False)[0]
    seconds = cpu_prefill_s(3e12, rates, notes, "Q4_K_M", expert_flops=1e12)
    assert seconds == pytest.approx((2e12 / amx_rate + 1e12 / (routed * expert_prefill_share())) / (56 * 1e9))


def test_a_cpu_with_its_own_thread_bound_runs_draws_its_own_figure_per_thread() -> None:
    """An M5 Max's six super cores decode Gemma faster than the Apple design's GB/s per GHz says (its four published
    thread-bound runs: its own factor above 1); an M5 Pro, the same cores without runs of its own, keeps the design's
    figure, and the factor is dropped with the CPU's id."""
    from gemma_fit.speed.cpu import published_cpus

    m5 = resolve_cpu("apple m5 max")
    own = published_cpus()[m5.id]
    assert own["n_threads"] >= 3 and float(own["per_thread_factor"]) > 1.2
    mine, how = per_thread_gbps(m5)
    design, _ = per_thread_gbps(replace(m5, id=""))
    assert mine == pytest.approx(round(design * float(own["per_thread_factor"]), 1)) and "thread-bound runs" in how
    assert per_thread_gbps(resolve_cpu("apple m5 pro"))[0] == design
