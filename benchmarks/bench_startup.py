#!/usr/bin/env python3
"""Start-up cost of a cold `gemma-fit check --json`, against a bare interpreter start.

CPU time (user + sys) of each process, measured from outside with os.wait4, median of N runs:
CPU seconds, unlike wall-clock, barely move when the machine is busy. Prints figures; asserts nothing.
The package's bytecode is compiled first and the children run without PYTHONDONTWRITEBYTECODE, as after a
pip install (which compiles it): otherwise every start would compile the whole package again.

    python benchmarks/bench_startup.py [--runs 7]
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


def median_cpu(cmd: list[str], runs: int) -> float:
    cpu_seconds(cmd)  # warm the page cache: "cold" means a new process, not a cold disk
    return statistics.median(cpu_seconds(cmd) for _ in range(runs))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    import gemma_fit

    compileall.compile_dir(os.path.dirname(gemma_fit.__file__), quiet=1)
    # the console script of this interpreter's environment (as a user runs it), else one on PATH, else -m
    beside = os.path.join(os.path.dirname(sys.executable), "gemma-fit")
    exe = beside if os.access(beside, os.X_OK) else shutil.which("gemma-fit")
    gemma_fit = [exe] if exe else [sys.executable, "-m", "gemma_fit"]
    bare = median_cpu([sys.executable, "-c", "pass"], args.runs)
    imports = median_cpu([sys.executable, "-c", "import gemma_fit.cli.app"], args.runs)
    check = median_cpu([*gemma_fit, *CHECK], args.runs)
    version = median_cpu([*gemma_fit, "--version"], args.runs)
    print(f"median CPU seconds over {args.runs} runs (user + sys)")
    print(f"  python -c pass            {bare:.3f} s")
    print(f"  import gemma_fit.cli.app      {imports:.3f} s  ({imports / bare:.1f}x)")
    print(f"  gemma-fit --version       {version:.3f} s  ({version / bare:.1f}x; target <= 3x)")
    print(f"  gemma-fit {' '.join(CHECK)}  {check:.3f} s  ({check / bare:.1f}x; target <= 8x)")


if __name__ == "__main__":
    main()
