"""Tensor overrides: llama.cpp's `--override-tensor / -ot REGEX=BUFFER`, `--cpu-moe` and `--n-cpu-moe N`,
which place weights by name whatever layer split -ngl makes.

Rules from llama.cpp (common/arg.cpp parse_tensor_buffer_overrides, src/llama-model-loader.cpp):
- `-ot` takes comma-separated `pattern=BUFFER` pairs (split at the first `=`; a pattern cannot hold a
  comma); BUFFER is a buffer type name: `CPU`, or a GPU's (`CUDA0`, `ROCm0`, `Vulkan1`, `SYCL0`, `MTL0`);
- each tensor's full name is matched in order with std::regex_search (unanchored: a substring match is
  enough); the first pattern that matches decides, for any tensor, input and output included;
- `--cpu-moe` adds `\\.ffn_(up|down|gate|gate_up)_(ch|)exps` = CPU: every layer's routed experts;
- `--n-cpu-moe N` adds `blk\\.i\\.ffn_(up|down|gate|gate_up)_(ch|)exps` = CPU for layers 0 .. N-1, the
  lowest N (llama.cpp's own --fit moves the highest-index GPU layers' experts instead).
llama.cpp keeps the command line's order; gemma-fit takes -ot first, then --cpu-moe, then --n-cpu-moe
(all of them usually name CPU, where order does not matter).
"""

from __future__ import annotations

import re
from functools import cache
from typing import TYPE_CHECKING

from gemma_fit.base.errors import BadInput
from gemma_fit.base.record import record
from gemma_fit.base.text import printable

if TYPE_CHECKING:
    from gemma_fit.base.ecma_regex import EcmaRegex

CPU_BUFFER = "CPU"
EXPERTS = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"
MAX_PATTERN_CHARS = 1000  # a hand-typed regex; longer is a mistake (and bounds the time to compile)
MAX_OVERRIDES = 4096  # llama_max_tensor_buft_overrides()
_LITERAL = re.compile(r"[^\\^$.*+?()\[\]{}|]*")  # a pattern of no special character matches itself
_GPU_BUFFER = re.compile(r"^(CUDA|ROCm|Vulkan|SYCL|MTL|Metal|OpenCL|CANN|MUSA)([0-9]*)$")


@record
class TensorOverride:
    pattern: str
    device: int  # GPU index, or placement.CPU (-1)
    ours: bool = False  # written by gemma-fit (--cpu-moe, --n-cpu-moe): a known-safe pattern, matched by `re`

    def matches(self, name: str) -> bool:
        if self.ours:
            return _ours(self.pattern).search(name) is not None
        if _LITERAL.fullmatch(self.pattern):  # no ECMAScript metacharacter: regex_search is a substring test
            return self.pattern in name
        return _compiled(self.pattern).search(name)


@cache
def _ours(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


@cache
def _compiled(pattern: str) -> EcmaRegex:
    """The pattern as std::regex reads it (ECMAScript), searched in bounded time (base.ecma_regex; loaded only
    when a plan has tensor overrides)."""
    from gemma_fit.base.ecma_regex import compile_ecma

    return compile_ecma(pattern, MAX_PATTERN_CHARS, shared=_STEPS_SPENT)


# The matching steps of every user pattern over one model's tensor names, against one budget
# (base.ecma_regex.TOTAL_BUDGET): each pattern alone is bounded, and so are a thousand of them together.
_STEPS_SPENT = [0]


def new_match_budget() -> None:
    """A fresh budget for matching the patterns against another model's names (placement._forced_devices)."""
    _STEPS_SPENT[0] = 0


def _device(buffer: str, n_gpus: int, item: str) -> int:
    if buffer == CPU_BUFFER:
        return -1
    from gemma_fit.base.text import printable

    m = _GPU_BUFFER.match(buffer)
    if m is None:
        raise BadInput(f"-ot {printable(item, 80)}: unknown buffer type '{printable(buffer, 40)}' (CPU, or a GPU's "
                       "such as CUDA0)")
    digits = m.group(2) or "0"
    index = int(digits) if len(digits) <= 4 else n_gpus  # CUDA99999...: no such device, however many digits
    if index >= n_gpus:
        have = ", ".join(["CPU", *(f"{m.group(1)}{i}" for i in range(n_gpus))])
        raise BadInput(f"-ot {printable(item, 80)}: {printable(buffer, 40)} is not a device of this hardware ({have})")
    return index


def parse_override(text: str, n_gpus: int) -> tuple[TensorOverride, ...]:
    """One `-ot` value as llama.cpp reads it; BadInput in one line for what llama.cpp would refuse (a pattern
    std::regex's ECMAScript grammar does not accept) or what would take too long to match."""
    out = []
    for item in text.split(","):
        pattern, sep, buffer = item.partition("=")
        shown = printable(item, 200)
        if not sep or not pattern or not buffer:
            raise BadInput(f"-ot '{shown}': expected PATTERN=BUFFER, e.g. \"blk\\..*\\.ffn_.*_exps\\.=CPU\"")
        _compiled(pattern)  # BadInput: not ECMAScript, or too long
        # the buffer's name exactly, as llama.cpp looks it up (common/arg.cpp): " CPU" is no buffer type
        out.append(TensorOverride(pattern, _device(buffer, n_gpus, shown)))
    return tuple(out)


def moe_overrides(cpu_moe: bool, n_cpu_moe: int, n_layer: int) -> tuple[TensorOverride, ...]:
    """--cpu-moe's pattern, then --n-cpu-moe's per layer (those past the model's last layer match nothing
    in llama.cpp either, so they are left out)."""
    out = [TensorOverride(EXPERTS, -1, ours=True)] if cpu_moe else []
    return (*out, *(TensorOverride(rf"blk\.{i}{EXPERTS}", -1, ours=True) for i in range(min(n_cpu_moe, n_layer))))


@cache
def tensor_overrides(override_tensor: tuple[str, ...], cpu_moe: bool, n_cpu_moe: int,
                     n_gpus: int, n_layer: int) -> tuple[TensorOverride, ...]:
    """Every override, in the order they are tried."""
    rules = [r for text in override_tensor for r in parse_override(text, n_gpus)]
    rules += moe_overrides(cpu_moe, n_cpu_moe, n_layer)
    if len(rules) > MAX_OVERRIDES:
        raise BadInput(f"{len(rules):,} tensor overrides: llama.cpp takes at most {MAX_OVERRIDES:,}")
    # A rule with the pattern of an earlier one is never the first to match, so it is tried once: 4,096 copies of
    # one pattern shared its compiled form and step budget, spent it on each other and were refused as "too
    # costly" in that pattern's name.
    first: dict[tuple[str, bool], TensorOverride] = {}
    for r in rules:
        first.setdefault((r.pattern, r.ours), r)
    return tuple(first.values())


_DEVICES: dict[tuple[int, str], int | None] = {}
_RULES: dict[int, tuple[TensorOverride, ...]] = {}  # holds each rules tuple, so its id is never reused
_MAX_CACHED = 1_000_000


def override_device(rules: tuple[TensorOverride, ...], name: str) -> int | None:
    """The device the first matching rule names, or None when none matches. Cached by the rules' identity
    (tensor_overrides makes one tuple per setting) and the name: hashing the rules for every tensor of every
    estimate cost more than the matching."""
    key = (id(rules), name)
    if key in _DEVICES:
        return _DEVICES[key]
    if len(_DEVICES) >= _MAX_CACHED:
        _DEVICES.clear()
        _RULES.clear()
    _RULES[id(rules)] = rules
    device = next((r.device for r in rules if r.matches(name)), None)
    _DEVICES[key] = device
    return device
