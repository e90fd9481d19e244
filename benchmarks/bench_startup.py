#!/usr/bin/env python3
"""Start-up cost of a cold `gemma-fit check --json`, against a bare interpreter start.

CPU time (user + sys) of each process, measured from outside with os.wait4, the commands run in turn for N rounds;
the ratios are the median of each round's (a shared VM's busy spells then fall on the bare start as on the check).
Prints figures; asserts nothing.
The package's bytecode is compiled first and the children run without PYTHONDONTWRITEBYTECODE, as after a
pip install (which compiles it): otherwise every start would compile the whole package again.

    python benchmarks/bench_startup.py [--runs 15]
Targets (issue 24): a cold check within 8x a bare `python -c pass`, --version within 3x.
"""

from __future__ import annotations

import argparse
import compileall
import os
import shutil
import statistics
import subprocess
import sys

CHECK = ["check", "--gpu", "a4000", "--model", "9b", "--quant", "q5_k_m", "--json"]


ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def cpu_seconds(cmd: list[str]) -> float:
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_utime + usage.ru_stime


def interleaved(commands: dict[str, list[str]], runs: int) -> dict[str, list[float]]:
    """CPU seconds of each command, run in turn round after round: a busy spell of the machine (a shared VM's
    neighbours) then falls on every command alike instead of on whichever was being measured."""
    for cmd in commands.values():
        cpu_seconds(cmd)  # warm the page cache: "cold" means a new process, not a cold disk
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(runs):
        for name, cmd in commands.items():
            times[name].append(cpu_seconds(cmd))
    return times


def ratio(times: dict[str, list[float]], name: str) -> float:
    """The median over rounds of the command's time over the bare start's in the same round."""
    return statistics.median(t / b for t, b in zip(times[name], times["bare"], strict=True))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args()
    import gemma_fit

    compileall.compile_dir(os.path.dirname(gemma_fit.__file__), quiet=1)
    # the console script of this interpreter's environment (as a user runs it), else one on PATH, else -m
    beside = os.path.join(os.path.dirname(sys.executable), "gemma-fit")
    exe = beside if os.access(beside, os.X_OK) else shutil.which("gemma-fit")
    gemma_fit = [exe] if exe else [sys.executable, "-m", "gemma_fit"]
    times = interleaved({"bare": [sys.executable, "-c", "pass"],
                         "imports": [sys.executable, "-c", "import gemma_fit.cli.app"],
                         "check": [*gemma_fit, *CHECK], "version": [*gemma_fit, "--version"]}, args.runs)
    med = {name: statistics.median(v) for name, v in times.items()}
    print(f"median CPU seconds over {args.runs} interleaved rounds (user + sys); ratios: median of each round's")
    print(f"  python -c pass            {med['bare']:.3f} s")
    print(f"  import gemma_fit.cli.app      {med['imports']:.3f} s  ({ratio(times, 'imports'):.1f}x)")
    print(f"  gemma-fit --version       {med['version']:.3f} s  ({ratio(times, 'version'):.1f}x; target <= 3x)")
    print(f"  gemma-fit {' '.join(CHECK)}  {med['check']:.3f} s  ({ratio(times, 'check'):.1f}x; target <= 8x)")

if __name__ == "__main__":
    main()
