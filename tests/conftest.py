"""Shared fixtures: the llama.cpp build (built once into a cache outside the repo), zero-weight GGUF files
written once per session (tests/shared.py) and helpers."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
# Answers must not depend on a llama-server installed on the machine running the tests (jobs/engine_version.py);
# every gemma-fit process a test starts inherits this. The one test of the probe takes it out.
os.environ["GEMMA_FIT_NO_ENGINE_PROBE"] = "1"
# Nor on a speed calibration saved on it (gemma-fit bench --save): a file that never exists. Tests of the
# calibration name their own file.
os.environ["GEMMA_FIT_CALIBRATION"] = str(Path(os.devnull) / "gemma-fit-tests-calibration.json")

import build_llamacpp  # noqa: E402
from shared import SynthFiles, cores_per_worker, shared_dir  # noqa: E402

# Tests that take several seconds (tens of seconds for some) on two cores run first, so that parallel workers
# (pytest-xdist, scripts/test.sh) finish together instead of one waiting for the other's last long test. Only
# the order depends on this list.
SLOW_FIRST = (
    "test_smoke.py::test_smoke_host_terms_agree_within_5pct",
    "test_llamacpp_load.py::test_zero_weight_model_generates_tokens",
    "test_projector.py::test_mtmd_loads_the_zero_weight_projector",
    "test_synth.py::test_synth_writes_the_plan",
    "test_golden.py::test_golden_outputs_are_byte_identical",
    "test_gguf_reader.py::test_fuzz_mutated_header",
    "test_gguf_reader.py::test_real_vocab_files",
    "test_gguf_reader.py::test_truncated_anywhere",
    "test_bad_input.py::test_file_arguments_that_are_not_files",
    "test_bad_input.py::test_html_to_a_special_file_writes_in_place_and_keeps_it",
    "test_llamacpp_quantize.py::",
)

# llama.cpp's threads in the tests' runs (-t): the cores a test worker has to itself.
LLAMA_THREADS = str(cores_per_worker())


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def slow(item: pytest.Item) -> bool:
        return any(f"tests/{prefix}" in item.nodeid for prefix in SLOW_FIRST)

    items.sort(key=lambda item: not slow(item))  # stable: the order within each part is kept


@pytest.fixture(scope="session")
def llama_bin() -> Path:
    """llama.cpp's bin/ folder; builds it on first use (CI builds it before pytest)."""
    return build_llamacpp.build()


@pytest.fixture(scope="session")
def synth(tmp_path_factory: pytest.TempPathFactory) -> SynthFiles:
    """synth(model, quant) -> Synth(path, size): the zero-weight file, written once for the whole session."""
    return SynthFiles(shared_dir(tmp_path_factory, "synth"))


def run_llama(bin_dir: Path, tool: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """A llama.cpp tool, its stdin empty (llama-mtmd-cli without an image reads its chat from stdin)."""
    env = dict(os.environ, LD_LIBRARY_PATH=str(bin_dir))
    return subprocess.run([str(bin_dir / tool), *args], capture_output=True, text=True, timeout=timeout,
                          env=env, check=False, stdin=subprocess.DEVNULL)


@dataclass(frozen=True)
class DryRunTensor:
    name: str
    shape: tuple[int, ...]
    source_type: str
    target_type: str


_LINE = re.compile(
    r"^\[\s*\d+/\s*\d+\]\s+(\S+)\s+-\s+\[([\d,\s]+)\],\s+type =\s+(\S+),\s+size =\s+[\d.]+ MiB"
    r"(?:\s+->\s+[\d.]+ MiB \((\S+)\))?"
)


def parse_dry_run(text: str) -> list[DryRunTensor]:
    """The per-tensor lines llama-quantize --dry-run prints."""
    out = []
    for line in text.splitlines():
        m = _LINE.match(line.strip())
        if m:
            dims = [int(x) for x in m.group(2).replace(" ", "").split(",") if x]
            while len(dims) > 1 and dims[-1] == 1:
                dims.pop()
            src = m.group(3).upper()
            out.append(DryRunTensor(m.group(1), tuple(dims), src, (m.group(4) or src).upper()))
    return out
