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
from dataclasses import dataclass
from functools import cache
from typing import Any

from gemma_fit.base.errors import BadInput

CPU_BUFFER = "CPU"
EXPERTS = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"
MAX_PATTERN_CHARS = 1000  # a hand-typed regex; longer is a mistake (and bounds the time to compile)
MAX_OVERRIDES = 4096  # llama_max_tensor_buft_overrides()
_GPU_BUFFER = re.compile(r"^(CUDA|ROCm|Vulkan|SYCL|MTL|Metal|OpenCL|CANN|MUSA)(\d*)$")


@dataclass(frozen=True)
class TensorOverride:
    pattern: str
    device: int  # GPU index, or placement.CPU (-1)

    def matches(self, name: str) -> bool:
        return _compiled(self.pattern).search(name) is not None


@cache
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _device(buffer: str, n_gpus: int, item: str) -> int:
    if buffer == CPU_BUFFER:
        return -1
    m = _GPU_BUFFER.match(buffer)
    if m is None:
        raise BadInput(f"-ot {item}: unknown buffer type '{buffer}' (CPU, or a GPU's such as CUDA0)")
    index = int(m.group(2) or 0)
    if index >= n_gpus:
        have = ", ".join(["CPU", *(f"{m.group(1)}{i}" for i in range(n_gpus))])
        raise BadInput(f"-ot {item}: {buffer} is not a device of this hardware ({have})")
    return index


def parse_override(text: str, n_gpus: int) -> tuple[TensorOverride, ...]:
    """One `-ot` value as llama.cpp reads it; BadInput in one line for what llama.cpp would refuse."""
    out = []
    for item in text.split(","):
        pattern, sep, buffer = item.partition("=")
        if not sep or not pattern or not buffer.strip():
            raise BadInput(f"-ot '{item}': expected PATTERN=BUFFER, e.g. \"blk\\..*\\.ffn_.*_exps\\.=CPU\"")
        if len(pattern) > MAX_PATTERN_CHARS:
            raise BadInput(f"-ot: a pattern of {len(pattern):,} characters (at most {MAX_PATTERN_CHARS:,})")
        try:
            _compiled(pattern)
        except re.error as exc:
            raise BadInput(f"-ot '{item}': not a regular expression ({exc})") from None
        if _can_backtrack_exponentially(pattern):
            raise BadInput(f"-ot '{item}': a repetition inside a repetition or of an alternation, such as (a+)+ or "
                           f"(a|b)*, or more than {MAX_REPEATS} repetitions, can take exponential time to match "
                           "(llama.cpp's std::regex backtracks the same way); write it without, e.g. "
                           "blk\\.(1[0-9]|2[0-9])\\.ffn_.*_exps=CPU")
        out.append(TensorOverride(pattern, _device(buffer.strip(), n_gpus, item)))
    return tuple(out)


def _can_backtrack_exponentially(pattern: str) -> bool:
    """A repeat (more than once) of something that itself repeats or branches: the shapes whose matching
    time grows exponentially with the name's length on a backtracking engine (star height above one)."""
    try:
        import re._parser as sre_parse  # Python 3.11+
    except ImportError:  # pragma: no cover - older Pythons
        import sre_parse  # type: ignore[no-redef]

    def walk(items: object, inside_repeat: bool) -> bool:
        for op, arg in items:  # type: ignore[attr-defined]
            name = str(op)
            if name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
                repeats = arg[1] is sre_parse.MAXREPEAT or arg[1] > 1
                if (inside_repeat and repeats) or walk(arg[2], inside_repeat or repeats):
                    return True
            elif _risky_child(name, arg, inside_repeat, walk):
                return True
        return False

    parsed = sre_parse.parse(pattern)
    return walk(parsed, False) or _repeats(parsed, sre_parse.MAXREPEAT) > MAX_REPEATS


# Consecutive unbounded repeats (.*.*.*) backtrack polynomially: n^k steps on an n-character name. Real
# patterns hold two or three (blk\..*\.ffn_.*_exps); five keep every match under a millisecond.
MAX_REPEATS = 5


def _repeats(items: Any, maxrepeat: Any) -> int:
    n = 0
    for op, arg in items:
        name = str(op)
        if name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            n += (arg[1] is maxrepeat or arg[1] > 1) + _repeats(arg[2], maxrepeat)
        elif name == "BRANCH":
            n += sum(_repeats(b, maxrepeat) for b in arg[1])
        elif name in ("SUBPATTERN", "ASSERT", "ASSERT_NOT"):
            n += _repeats(arg[-1], maxrepeat)
    return n


def _risky_child(name: str, arg: Any, inside_repeat: bool, walk: Any) -> bool:
    """An alternation inside a repetition, or a risky shape inside a group, alternative or lookaround."""
    if name == "BRANCH":
        return inside_repeat or any(walk(b, inside_repeat) for b in arg[1])
    return name in ("SUBPATTERN", "ASSERT", "ASSERT_NOT") and bool(walk(arg[-1], inside_repeat))


def moe_overrides(cpu_moe: bool, n_cpu_moe: int, n_layer: int) -> tuple[TensorOverride, ...]:
    """--cpu-moe's pattern, then --n-cpu-moe's per layer (those past the model's last layer match nothing
    in llama.cpp either, so they are left out)."""
    out = [TensorOverride(EXPERTS, -1)] if cpu_moe else []
    return (*out, *(TensorOverride(rf"blk\.{i}{EXPERTS}", -1) for i in range(min(n_cpu_moe, n_layer))))


@cache
def tensor_overrides(override_tensor: tuple[str, ...], cpu_moe: bool, n_cpu_moe: int,
                     n_gpus: int, n_layer: int) -> tuple[TensorOverride, ...]:
    """Every override, in the order they are tried."""
    rules = [r for text in override_tensor for r in parse_override(text, n_gpus)]
    rules += moe_overrides(cpu_moe, n_cpu_moe, n_layer)
    if len(rules) > MAX_OVERRIDES:
        raise BadInput(f"{len(rules):,} tensor overrides: llama.cpp takes at most {MAX_OVERRIDES:,}")
    return tuple(rules)


@cache
def override_device(rules: tuple[TensorOverride, ...], name: str) -> int | None:
    """The device the first matching rule names, or None when none matches."""
    for r in rules:
        if r.matches(name):
            return r.device
    return None
