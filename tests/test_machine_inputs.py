"""Bad machine files (`--hardware FILE.yaml`): one clear line on stderr and exit 2, in bounded time and memory.

Each corpus case runs the real command line in a subprocess under resource limits (2 GiB of address
space, 60 s of CPU), so a case that runs away fails here instead of eating the machine; the subprocess
timeout is only a guard against a hang. The property tests feed load_machine arbitrary values in-process:
it returns a Machine or raises BadInput, nothing else.
"""

from __future__ import annotations

import math
import os
import resource
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gemma_fit.base.errors import BadInput
from gemma_fit.db.files import MAX_YAML_BYTES
from gemma_fit.db.yaml_files import read_yaml
from gemma_fit.hardware.machine_file import MAX_MACHINE_BYTES, load_machine
from gemma_fit.hardware.schema import GIB, MAX_GPUS, MAX_HOST_RAM_BYTES

CLI = [sys.executable, "-c", "from gemma_fit.cli.entry import main; main()"]
CHECK = ["check", "--model", "gemma-3-27b", "--quant", "bf16", "--ctx", "0"]
SPEC = """    id: custom-card
    name: Custom card
    vendor: nvidia
    arch: ampere
    backend: cuda
    memory_bytes: 17179869184
    usable_memory_bytes: 17179869184
    usable_note: all of it
    unified_memory: false
    memory_type: GDDR6
    bf16_supported: true
    ecc: false
    form_factor: card
    source: https://example.com
"""


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (2 * GIB, 2 * GIB))
    resource.setrlimit(resource.RLIMIT_CPU, (60, 60))


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300, check=False,
                          preexec_fn=_limits, errors="replace")


def assert_one_line_error(proc: subprocess.CompletedProcess[str], *needles: str) -> str:
    err = proc.stderr
    assert proc.returncode == 2, (proc.returncode, err[-2000:], proc.stdout[-500:])
    lines = err.strip().splitlines()
    assert len(lines) == 1, err[-2000:]
    assert lines[0].startswith("gemma-fit: error: "), lines[0]
    assert "Traceback" not in err and "internal error" not in err
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def _bomb() -> str:
    lines = ["name: x", "ram_gb: 64", 'a0: &a0 ["x","x","x","x","x","x","x","x","x"]']
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    return "\n".join([*lines, "gpus: *a9"]) + "\n"


# name -> file content (bytes or str) and a piece the one-line message must hold
CORPUS: dict[str, tuple[bytes | str, str]] = {
    # encodings and binary data
    "latin1": (b"name: caf\xe9\ngpus: [a4000]\n", "not UTF-8"),
    "utf16-bom": ("name: x\ngpus: [a4000]\n".encode("utf-16"), "UTF-16"),
    "utf16-no-bom": ("name: x\ngpus: [a4000]\n".encode("utf-16-le"), "NUL byte"),
    "utf32": ("name: x\n".encode("utf-32"), "UTF-32"),
    "binary": (bytes(range(256)) * 8, "NUL byte"),
    "invalid-utf8-no-nul": (b"name: \xc3\x28\xa0\xa1\n" * 100, "not UTF-8"),
    "control-char": ("name: x\x07\ngpus: [a4000]\n", "malformed YAML"),
    "too-big": ("name: x\ngpus: [a4000]\nnotes: '" + "a" * (MAX_MACHINE_BYTES + 10) + "'\n", "too large"),
    # YAML structure
    "empty-file": ("", "expected a mapping"),
    "a-list": ("- a4000\n- rtx-4090\n", "expected a mapping"),
    "a-scalar": ("a4000\n", "expected a mapping"),
    "two-documents": ("name: x\ngpus: [a4000]\n---\nname: y\n", "single document"),
    "unclosed-flow": ("name: x\ngpus: [a4000\n", "malformed YAML"),
    "tab-indent": ("name: x\n\tgpus: [a4000]\n", "malformed YAML"),
    "duplicate-key": ("name: x\ngpus: [a4000]\nname: y\n", "duplicate key 'name'"),
    "duplicate-ram": ("name: x\nram_gb: 64\ngpus: []\nram_gb: 8\n", "duplicate key 'ram_gb'"),
    "duplicate-nested": ("name: x\ngpus:\n  - gpu: a4000\n    count: 1\n    count: 2\n", "duplicate key 'count'"),
    "billion-laughs": (_bomb(), "values"),
    "recursive-alias": ("name: x\nram_gb: 4\ngpus: &g [*g]\n", "recursive"),
    "deep-nesting": ("name: x\ngpus: " + "[" * 5000 + "]" * 5000 + "\n", "malformed YAML"),
    "python-tag": ("name: !!python/object/apply:os.system [echo hi]\ngpus: [a4000]\n", "malformed YAML"),
    "unhashable-key": ("{[1, 2]: x}\n", "malformed YAML"),
    "impossible-date": ("name: 2001-02-30\ngpus: [a4000]\n", "cannot be read"),
    "huge-integer": ("name: x\ngpus: [a4000]\nram_gb: " + "9" * 5000 + "\n", "cannot be read"),
    # capacity unknown: never a fit
    "name-only": ("name: my box\n", "no ram_gb"),
    "empty-gpus-no-ram": ("name: x\ngpus: []\n", "no ram_gb"),
    "null-gpus-null-ram": ("name: x\ngpus:\nram_gb:\n", "no ram_gb"),
    # GPU count (llama.cpp: at most 16 devices)
    "100k-gpus": ("name: x\ngpus: [" + ",".join(["a4000"] * 100_000) + "]\n", "values"),
    "17-gpus": ("name: x\ngpus: [" + ",".join(["a4000"] * 17) + "]\n", "at most 16"),
    "count-17": ("name: x\ngpus:\n  - gpu: a4000\n    count: 9\n  - gpu: a4000\n    count: 8\n", "at most 16"),
    "count-64": ("name: x\ngpus:\n  - gpu: a4000\n    count: 64\n", "at most 16"),
    "count-huge": ("name: x\ngpus:\n  - gpu: a4000\n    count: 100000000000\n", "at most 16"),
    "mi250x-x9": ("name: x\ngpus:\n  - gpu: mi250x\n    count: 9\n", "18 devices"),
    # types and ranges
    "no-name": ("gpus: [a4000]\n", "name"),
    "number-name": ("name: 123\ngpus: [a4000]\n", "name"),
    "newline-name": ('name: "a\\nb"\ngpus: [a4000]\n', "name"),
    "ram-true": ("name: x\ngpus: [a4000]\nram_gb: true\n", "ram_gb"),
    "ram-string": ("name: x\nram_gb: '64'\n", "ram_gb"),
    "ram-negative": ("name: x\nram_gb: -4\n", "ram_gb"),
    "ram-nan": ("name: x\nram_gb: .nan\n", "ram_gb"),
    "ram-inf": ("name: x\nram_gb: .inf\n", "ram_gb"),
    "gpus-number": ("name: x\ngpus: [4090]\n", "gpus[0]"),
    "gpus-newline-id": ('name: x\ngpus: ["a\\nb"]\n', "gpus[0]"),
    "gpus-unknown": ("name: x\ngpus: [a9999]\n", "unknown GPU"),
    "slot-lanes-bool": ("name: x\ngpus:\n  - gpu: a4000\n    pcie_lanes: true\n", "pcie_lanes"),
    "spec-string-bytes": ("name: x\ngpus:\n  -\n" + SPEC.replace("17179869184", "'17179869184'", 1), "memory_bytes"),
    "unknown-key-newline": ('name: x\ngpus: [a4000]\n"bad\\nkey": 1\n', "unknown key"),
    "disk-unknown": ("name: x\ngpus: [a4000]\ndisk: tape\n", "unknown storage class"),
}

# more values of the wrong type or out of range: the same rule, checked in-process (faster)
VALUES: dict[str, tuple[str, str]] = {
    "empty-name": ("name: ''\ngpus: [a4000]\n", "name"),
    "blank-name": ("name: '   '\ngpus: [a4000]\n", "name"),
    "long-name": ("name: " + "n" * 500 + "\ngpus: [a4000]\n", "name"),
    "ram-zero": ("name: x\nram_gb: 0\n", "ram_gb"),
    "ram-tiny": ("name: x\nram_gb: 0.001\n", "ram_gb"),
    "ram-too-much": ("name: x\nram_gb: 1.0e9\n", "ram_gb"),
    "ram-list": ("name: x\nram_gb: [64]\n", "ram_gb"),
    "speed-string": ("name: x\ngpus: [a4000]\nram_speed_mts: '5600'\n", "ram_speed_mts"),
    "speed-float": ("name: x\ngpus: [a4000]\nram_speed_mts: 5600.5\n", "ram_speed_mts"),
    "speed-bool": ("name: x\ngpus: [a4000]\nram_speed_mts: true\n", "ram_speed_mts"),
    "channels-zero": ("name: x\ngpus: [a4000]\nram_channels: 0\n", "ram_channels"),
    "channels-bool": ("name: x\ngpus: [a4000]\nram_channels: true\n", "ram_channels"),
    "ram-type-lower": ("name: x\ngpus: [a4000]\nram_type: ddr9\n", "ram_type"),
    "gpus-string": ("name: x\ngpus: a4000\n", "gpus"),
    "gpus-null-item": ("name: x\ngpus: [null]\n", "gpus[0]"),
    "gpus-empty-id": ("name: x\ngpus: ['']\n", "gpus[0]"),
    "slot-count-bool": ("name: x\ngpus:\n  - gpu: a4000\n    count: true\n", "count"),
    "slot-count-zero": ("name: x\ngpus:\n  - gpu: a4000\n    count: 0\n", "count"),
    "slot-count-float": ("name: x\ngpus:\n  - gpu: a4000\n    count: 2.0\n", "count"),
    "slot-lanes-float": ("name: x\ngpus:\n  - gpu: a4000\n    pcie_lanes: 4.0\n", "pcie_lanes"),
    "slot-lanes-3": ("name: x\ngpus:\n  - gpu: a4000\n    pcie_lanes: 3\n", "pcie_lanes"),
    "slot-gen-7": ("name: x\ngpus:\n  - gpu: a4000\n    pcie_gen: 7\n", "pcie_gen"),
    "slot-gen-bool": ("name: x\ngpus:\n  - gpu: a4000\n    pcie_gen: true\n", "pcie_gen"),
    "slot-nvlink-string": ("name: x\ngpus:\n  - gpu: a4000\n    nvlink: 'yes please'\n", "nvlink"),
    "slot-unknown-key": ("name: x\ngpus:\n  - gpu: a4000\n    lanes: 8\n", "unknown key 'lanes'"),
    "spec-bool-ecc-string": ("name: x\ngpus:\n  -\n" + SPEC.replace("ecc: false", "ecc: 'no'"), "ecc"),
    "unknown-key": ("name: x\ngpus: [a4000]\nram_gigs: 64\n", "ram_gigs"),
    "disk-number": ("name: x\ngpus: [a4000]\ndisk: 5\n", "disk"),
    "cpu-number": ("name: x\ngpus: [a4000]\ncpu: 7950\n", "cpu"),
    "cpu-unknown": ("name: x\ngpus: [a4000]\ncpu: Ryzen 9 7950\n", "did you mean ryzen-9-7950x"),
    "notes-too-long": ("name: x\ngpus: [a4000]\nnotes: " + "n" * 20_000 + "\n", "notes"),
}


@pytest.mark.parametrize("case", sorted(CORPUS))
def test_bad_machine_file_exits_2_with_one_line(case: str, tmp_path: Path) -> None:
    content, needle = CORPUS[case]
    path = tmp_path / f"{case}.yaml"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    line = assert_one_line_error(run_cli(*CHECK, "--hardware", str(path)), needle)
    assert f"{case}.yaml" in line  # the message names the file


@pytest.mark.parametrize("case", sorted(VALUES))
def test_bad_machine_value_is_bad_input_naming_file_and_field(case: str, tmp_path: Path) -> None:
    content, needle = VALUES[case]
    path = tmp_path / f"{case}.yaml"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(BadInput) as info:
        load_machine(path)
    message = str(info.value)
    assert needle in message and f"{case}.yaml" in message and "\n" not in message


def _fifo(tmp_path: Path) -> str:
    path = tmp_path / "pipe.yaml"
    os.mkfifo(path)  # nobody writes: opening it blocking would hang
    return str(path)


SPECIAL: dict[str, Callable[[Path], str]] = {
    "dev-zero": lambda _: "/dev/zero",  # grew past 6 GiB before
    "dev-urandom": lambda _: "/dev/urandom",  # hung before
    "fifo": _fifo,
    "directory": lambda tmp: str(tmp),
    "missing": lambda tmp: str(tmp / "no-such-machine.yaml"),
}


@pytest.mark.skipif(not hasattr(os, "mkfifo") or not Path("/dev/zero").exists(), reason="needs a POSIX system")
@pytest.mark.parametrize("case", sorted(SPECIAL))
def test_unreadable_machine_file_exits_2_without_reading_it(case: str, tmp_path: Path) -> None:
    target = SPECIAL[case](tmp_path)
    line = assert_one_line_error(run_cli(*CHECK, "--hardware", target), "cannot read")
    assert target in line


def test_too_many_gpu_flags_exit_2() -> None:
    assert_one_line_error(run_cli(*CHECK, *["--gpu", "a4000"] * (MAX_GPUS + 1)), "at most 16")


def test_good_machine_files_still_load(tmp_path: Path) -> None:
    """What a machine file may hold: aliases, merges, a UTF-8 byte-order mark, 16 GPUs, counts, full specs."""
    path = tmp_path / "m.yaml"
    path.write_bytes("\ufeff".encode() + b"name: '  box  '\nslot: &s {gpu: a4000, pcie_gen: 4}\n"
                     b"gpus: [*s, {<<: *s, count: 14, pcie_lanes: 8}, {gpu: rtx-4090}]\nram_gb: 64\n")
    with pytest.raises(BadInput, match="unknown key 'slot'"):  # an anchor needs a key the schema knows
        load_machine(path)
    path.write_text("name: box\ngpus:\n  - &s {gpu: a4000, pcie_gen: 4}\n  - {<<: *s, count: 14, pcie_lanes: 8}\n"
                    "  - rtx-4090\nram_gb: 64\n", encoding="utf-8-sig")
    machine = load_machine(path)
    assert len(machine.gpus) == MAX_GPUS and machine.host_capacity_bytes == 64 * GIB
    assert machine.attachments[1].pcie_lanes == 8 and machine.attachments[1].pcie_gen == 4
    path.write_text("name: cpu box\nram_gb: 0.5\n", encoding="utf-8")
    assert load_machine(path).host_capacity_bytes == GIB // 2
    path.write_text("name: x\ngpus:\n  -\n" + SPEC + "ram_gb: 32\n", encoding="utf-8")
    assert load_machine(path).gpus[0].id == "custom-card"


def test_database_yaml_keeps_its_generous_limits(tmp_path: Path) -> None:
    """read_yaml's defaults pass every packaged file; its cap is a parameter."""
    from gemma_fit.db.files import packaged_dir

    for folder in (packaged_dir("hardware_db"), packaged_dir("model_db")):
        for path in folder.rglob("*.yaml"):
            assert path.stat().st_size < MAX_YAML_BYTES // 100
            read_yaml(path, unique_keys=True)  # no repeated keys in the databases either
    small = tmp_path / "s.yaml"
    small.write_text("a: 1\n" * 100, encoding="utf-8")
    with pytest.raises(BadInput, match="too large"):
        read_yaml(small, max_bytes=10)


# --- properties ---------------------------------------------------------------------------------

_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=30),
    st.sampled_from(["a4000", "rtx-4090", "h100-sxm", "RTX A4000", "mi250x", "nvme-gen4", "DDR5", "cpu", ""]),
)
_VALUES = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
    st.sampled_from(["gpu", "count", "pcie_gen", "pcie_lanes", "nvlink", "id", "x"]), inner, max_size=4),
    max_leaves=12)
_KEYS = ["name", "gpus", "ram_gb", "ram_type", "ram_speed_mts", "ram_channels", "disk", "cpu", "notes", "extra"]
_SLOTS = st.fixed_dictionaries({"gpu": st.sampled_from(["a4000", "rtx-4090", "mi250x", "t4"]) | _SCALARS},
                               optional={"count": _SCALARS | st.integers(-3, 40),
                                         "pcie_gen": _SCALARS | st.integers(0, 8),
                                         "pcie_lanes": _SCALARS | st.sampled_from([1, 3, 4, 16, 32]),
                                         "nvlink": _SCALARS})
_MACHINES = st.dictionaries(st.sampled_from(_KEYS), _VALUES | st.lists(_SLOTS, max_size=20), max_size=9)


@pytest.fixture(scope="module")
def scratch() -> Any:
    with tempfile.TemporaryDirectory() as folder:
        yield Path(folder) / "machine.yaml"


def _load_or_bad_input(path: Path) -> None:
    try:
        machine = load_machine(path)
    except BadInput as exc:
        message = str(exc)
        assert message and "\n" not in message and "\r" not in message
        assert str(path) in message
        return
    # what loads is a machine whose capacity is known and within what llama.cpp and hardware allow
    assert machine.gpus or machine.host_capacity_bytes is not None
    assert sum(g.logical_devices for g in machine.gpus) <= MAX_GPUS
    assert machine.host_capacity_bytes is None or 0 < machine.host_capacity_bytes <= MAX_HOST_RAM_BYTES
    assert machine.label and machine.label == machine.label.strip()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=_MACHINES)
def test_any_machine_values_load_or_are_bad_input(data: dict[str, Any], scratch: Path) -> None:
    scratch.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    _load_or_bad_input(scratch)


@settings(max_examples=200, deadline=None)
@given(raw=st.binary(max_size=300) | st.text(max_size=300).map(lambda t: t.encode("utf-8", "surrogatepass")))
def test_any_bytes_load_or_are_bad_input(raw: bytes, scratch: Path) -> None:
    for content in (raw, b"name: x\ngpus: [a4000]\n" + raw):
        scratch.write_bytes(content)
        _load_or_bad_input(scratch)


@settings(max_examples=150, deadline=None)
@given(ram=st.floats(allow_nan=True, allow_infinity=True) | st.integers(-(2**64), 2**64) | st.booleans())
def test_ram_gb_is_a_finite_amount_a_machine_can_have(ram: float, scratch: Path) -> None:
    scratch.write_text(yaml.safe_dump({"name": "box", "ram_gb": ram}), encoding="utf-8")
    ok = not isinstance(ram, bool) and math.isfinite(ram) and 0.25 <= ram <= MAX_HOST_RAM_BYTES / GIB
    if ok:
        assert load_machine(scratch).host_capacity_bytes == int(ram * GIB)
    else:
        with pytest.raises(BadInput, match="ram_gb"):
            load_machine(scratch)
