"""One door for every number a user gives: each option and file value has its range here, and one check.

A value outside its range, NaN, an infinity or a boolean where a number belongs is bad input: one line that
names the option, the value and the range. The limits are past any real use (a typo is caught, a real plan
never is); where a limit is llama.cpp's or an engine's own, the comment says where it comes from.
"""

from __future__ import annotations

import math
from typing import cast

from gemma_fit.base.errors import BadInput
from gemma_fit.base.record import record
from gemma_fit.base.text import printable

MAX_TOKENS = 16 * 1024 * 1024  # past any Gemma's trained context x 64: certainly a typo
MAX_SEQUENCES = 65536
LLAMA_MAX_SEQUENCES = 256  # llama.cpp's LLAMA_MAX_SEQ
MAX_GIB = 1024  # GiB kept free on a GPU: past any GPU made
MAX_RATE = 1e6  # requests per second: past any one deployment's traffic


@record
class Range:
    low: float
    high: float
    note: str = ""  # what the number means, said after the range
    integer: bool = True
    low_open: bool = False  # the low end itself is refused: (low, high]

    def holds(self, value: float) -> bool:
        above = value > self.low if self.low_open else value >= self.low
        return above and value <= self.high

    def shown(self) -> str:
        low = f"more than {_num(self.low)}" if self.low_open else _num(self.low)
        return f"{low} to {_num(self.high)}" + (f"; {self.note}" if self.note else "")


def _num(x: float) -> str:
    if isinstance(x, int):  # exact, and never through float (an int of 400 digits has none)
        digits = str(abs(x))
        return f"{x:,}" if len(digits) <= 24 else f"{'-' if x < 0 else ''}{digits[:6]}... ({len(digits)} digits)"
    return f"{x:,.0f}" if x.is_integer() else f"{x:g}"


RANGES: dict[str, Range] = {
    # llama.cpp's options (check, report, inspect, smoke, serve-plan)
    "--ctx": Range(0, MAX_TOKENS, "0 = the model's trained context"),
    "--batch": Range(1, MAX_TOKENS),
    "--ubatch": Range(1, MAX_TOKENS),
    "--parallel": Range(1, LLAMA_MAX_SEQUENCES, "llama.cpp runs at most 256 sequences"),
    "--n-cpu-moe": Range(0, 4096, "layers whose routed experts stay in system memory"),
    "--margin": Range(0, MAX_GIB, "GiB kept free on each GPU", integer=False),
    "--reserve": Range(0, MAX_GIB, "GiB kept free on each GPU", integer=False),
    # what the user will run
    "--prompt-tokens": Range(1, MAX_TOKENS),
    "--output-tokens": Range(1, MAX_TOKENS),
    "--rate": Range(0, MAX_RATE, "requests per second", integer=False, low_open=True),
    "--images": Range(0, 1024, "images per prompt"),
    # the engines' own
    "--engine-parallel": Range(1, MAX_SEQUENCES),
    "--gpu-memory-utilization": Range(0, 1, "vLLM's share of each GPU", integer=False, low_open=True),
    "--max-num-batched-tokens": Range(1, MAX_TOKENS),
    "--tensor-parallel-size": Range(1, 64),
    "--pipeline-parallel-size": Range(1, 64),
    "--block-size": Range(1, 1024),
    "--batch-size": Range(1, MAX_SEQUENCES),
    "--max-new-tokens": Range(1, MAX_TOKENS, "tokens generate() adds (transformers refuses 0)"),
    "--gpu-overhead": Range(0, 2**50, "bytes"),
    # the machine said on the command line
    "--ram": Range(0.25, 64 * 1024, "GiB of system memory", integer=False),
    "--ram-channels": Range(1, 24),
    "--cores": Range(1, 1024),
    "--threads": Range(1, 1024),
    "--sockets": Range(1, 16, "CPU sockets of one machine"),
    # what a user needs (recommend, buy)
    "--need-ctx": Range(1, MAX_TOKENS, "the context you need, in tokens"),
    "--min-tps": Range(0, 1e6, "tokens/s", integer=False),
    "--top": Range(1, 100),
    "--budget": Range(0, 1e8, "US dollars", integer=False, low_open=True),
    "--max-gpus": Range(1, 4),
    # smoke
    "--n-predict": Range(1, MAX_TOKENS),
    # cost
    "--tokens-per-day": Range(1, 10**13, "generated tokens a day"),
    "--users": Range(1, 10**9),
    "--tokens-per-request": Range(1, MAX_TOKENS, "tokens generated per request"),
    "--requests-per-user": Range(0, 1e6, "requests per user a day", integer=False, low_open=True),
    "--kwh-price": Range(0, 100, "US dollars per kWh", integer=False),
    "--min-memory": Range(0, MAX_GIB, "GiB of memory a GPU has at least", integer=False),
    "--hours-per-day": Range(0.1, 24, "hours rented a day (six minutes at least: providers bill by the minute or "
                                      "the hour)", integer=False),
    "--draft-max": Range(1, 64, "tokens drafted per step"),
    "--acceptance": Range(0, 0.999, "share of drafted tokens kept", integer=False),
    "--timeout": Range(1, 7 * 24 * 3600, "seconds; llama.cpp takes about a second to start", integer=False),
    # values in files
    "bandwidth_gbit": Range(0.001, 100_000, "Gbit/s per direction", integer=False),
    "latency_us": Range(0, 10_000_000, "microseconds, one way", integer=False),
    "ram_gb": Range(0.25, 64 * 1024, "GiB", integer=False),
    # a --prices file (and hardware_db/prices/): a cent at least, so that tokens/s per 1,000 USD stays finite
    "usd": Range(0.01, 10_000_000, "US dollars", integer=False),
    "power_w": Range(1, 100_000, "watts at the wall", integer=False),
    # a GPU spec (hardware_db/gpus/, or a full spec in a machine file): floors well under the slowest part in the
    # database (34 GB/s, 1.43 Gbit/s a pin, 5.1 fp16 TFLOPS, 0.64 fp32 TFLOPS, 625 MHz), so that a typo such as
    # 1e-300 TFLOPS (a prefill of 0 tok/s, a first token after 1e297 s, inf in JSON) is refused, never planned.
    "memory_bandwidth_gbps": Range(10, 20_000, "decimal GB/s", integer=False),
    "memory_data_rate_gbps": Range(0.1, 64, "Gbit/s per pin", integer=False),
    "fp16_tensor_tflops": Range(0.001, 10_000, "TFLOPS", integer=False),
    "int8_tensor_tops": Range(0.001, 20_000, "TOPS", integer=False),
    "fp32_tflops": Range(0.001, 500, "TFLOPS", integer=False),
    "boost_clock_mhz": Range(100, 4000, "MHz", integer=False),
    "nvlink_gbps": Range(0, 20_000, "GB/s both ways; 0 = none", integer=False),
    "tdp_w": Range(5, 2000, "watts", integer=False),
}


def range_problem(name: str, value: object) -> str | None:
    """What is wrong with `value` as RANGES[name] sees it ("1e-300 is impossible (...)"), or None when it is
    inside. The text starts with the value, so that a caller can put the option or the file's field before it."""
    limits = RANGES[name]
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"{printable(repr(value), 60)} is not a number ({limits.shown()})"
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value} is impossible ({limits.shown()})"
    if limits.integer and isinstance(value, float) and not value.is_integer():
        return f"{value:g} must be a whole number ({limits.shown()})"
    if value == 0 and math.copysign(1.0, value) < 0:
        # -0.0 passes `>= 0` and then prints as "-0" wherever it is shown: refused, as the typo it is
        return f"{value} is a negative zero: write 0 ({limits.shown()})"
    if not limits.holds(value):
        return f"{_num(value) if isinstance(value, int) else f'{value:g}'} is impossible ({limits.shown()})"
    return None


def check_range(name: str, value: object, shown_name: str | None = None) -> float:
    """`value` if it is a number inside RANGES[name]; else BadInput in one line. `shown_name` is how the
    message names it (a flag as the user typed it, or a file's field)."""
    problem = range_problem(name, value)
    if problem is not None:
        raise BadInput(f"{shown_name or name} {problem}")
    return cast(float, value)  # range_problem refused anything but an int or a float


def check_optional(name: str, value: object, shown_name: str | None = None) -> None:
    """check_range for a value that may be unset (None)."""
    if value is not None:
        check_range(name, value, shown_name)
