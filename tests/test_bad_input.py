"""Bad input through the real command line: every numeric option and the file arguments of each command.

Each case must end with exit status 2 and exactly one line on stderr (`gemma-fit: error: ...`): no
traceback, no "internal error", no control characters from the input, in bounded memory and CPU.
The limits are resource limits of the child (address space, CPU seconds), not wall-clock asserts;
the subprocess timeout only guards against a hang. Machine files, config.json and GGUF files have
their own corpora (test_machine_inputs.py, test_model_inputs.py, test_gguf_reader.py).
"""

from __future__ import annotations

import os
import resource
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

CLI = [sys.executable, "-c", "from gemma_fit.cli.entry import main; main()"]
GIB = 1024**3
CHECK = ["check", "--gpu", "rtx-4090", "--model", "gemma-3-1b"]


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (2 * GIB, 2 * GIB))
    resource.setrlimit(resource.RLIMIT_CPU, (60, 60))


def run(args: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, preexec_fn=_limits, timeout=300,
                          cwd=cwd, env={**os.environ, "COLUMNS": "120"})


def assert_one_line_error(proc: subprocess.CompletedProcess[str]) -> None:
    lines = proc.stderr.splitlines()
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert len(lines) == 1, proc.stderr[-2000:]
    assert lines[0].startswith("gemma-fit: error: "), lines[0]
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    assert not any(ord(c) < 32 for c in lines[0]), repr(lines[0])


NUMERIC = [
    # llama.cpp's options on check
    ["--ctx", "-1"], ["--ctx", str(2**40)], ["--ctx", "abc"], ["--ctx", "1e3"], ["--ctx", "nan"],
    ["--ubatch", "0"], ["--ubatch", "-4"], ["--ubatch", str(10**12)],
    ["--batch", "0"], ["--batch", "-1"], ["--batch", str(10**12)],
    ["--parallel", "0"], ["--parallel", "-2"], ["--parallel", "257"], ["--parallel", str(10**9)],
    ["--n-gpu-layers", "-5"], ["--n-gpu-layers", "abc"], ["--n-gpu-layers", "1.5"],
    ["--prompt-tokens", "0"], ["--prompt-tokens", "-1"], ["--prompt-tokens", str(10**12)],
    ["--cache-type-k", "q9_9"], ["--cache-type-v", ""], ["--flash-attn", "maybe"],
    ["--flash-attn", "off", "--cache-type-v", "q8_0"], ["--quant", "Q7_K"], ["--backend", "metal"],
    # the engines' options
    ["--engine", "tensorrt"], ["--engine", "vllm", "--ctx", "-5"], ["--engine", "vllm", "--parallel", "0"],
    ["--engine", "vllm", "--images", "-1"], ["--engine", "vllm", "--images", str(10**9)],
    ["--engine", "vllm", "--gpu-memory-utilization", "nan"], ["--engine", "vllm", "--gpu-memory-utilization", "inf"],
    ["--engine", "vllm", "--gpu-memory-utilization", "0"], ["--engine", "vllm", "--gpu-memory-utilization", "1.5"],
    ["--engine", "vllm", "--tensor-parallel-size", "0"], ["--engine", "vllm", "--max-num-batched-tokens", "-3"],
    ["--engine", "vllm", "--prompt-tokens", "0"], ["--engine", "ollama", "--ctx", "-5"],
    ["--engine", "ollama", "--parallel", "0"], ["--engine", "transformers", "--batch-size", "0"],
    ["--engine", "transformers", "--max-new-tokens", "-1"], ["--engine", "transformers", "--quant", "q4_k_m"],
    # traffic (issue 17)
    ["--output-tokens", "0"], ["--output-tokens", "-3"], ["--output-tokens", str(10**12)], ["--rate", "0"],
    ["--rate", "-1"], ["--rate", "nan"], ["--rate", "inf"], ["--rate", "abc"], ["--engine", "vllm", "--rate", "nan"],
]


@pytest.mark.parametrize("extra", NUMERIC, ids=[" ".join(a) or "empty" for a in NUMERIC])
def test_check_refuses_impossible_options(extra: list[str]) -> None:
    assert_one_line_error(run([*CHECK, *extra]))


REPORT = [
    ["--ctx", "-5"], ["--parallel", "0"], ["--ubatch", "0"], ["--engine", "tensorrt"],
    ["--engine", "vllm", "--ctx", "-5"], ["--engine", "vllm", "--parallel", "0"], ["--quant", "Q7_K"],
    ["--n-gpu-layers", "-3"],
]


SERVE = [["--rate", "0"], ["--output-tokens", "0"], ["--parallel", "0"], ["--engine", "tensorrt"],
         ["--engine", "llama.cpp", "--tensor-parallel-size", "2"], ["--engine", "vllm", "--rate", "nan"]]


@pytest.mark.parametrize("extra", SERVE, ids=[" ".join(a) for a in SERVE])
def test_serve_plan_refuses_impossible_options(extra: list[str]) -> None:
    assert_one_line_error(run(["serve-plan", "--gpu", "rtx-4090", "--model", "gemma-3-1b", *extra]))


CLUSTERS = ["network: {bandwidth_gbit: 10}\nnodes: [{name: a, host: h, gpus: [rtx-3090]}]\n",
            "network: {bandwidth_gbit: 10, latency_us: 5}\nnodes: [{name: a, host: h, gpus: [nosuch]}]\n",
            "network: {bandwidth_gbit: 10, latency_us: 5}\nnodes: [{name: a, host: h, gpus: [rtx-3090]},"
            " {name: b, host: h, gpus: [rtx-3090]}]\n",
            "network: {bandwidth_gbit: -1, latency_us: 5}\nnodes: [{name: a, host: h, gpus: [rtx-3090]}]\n",
            "network: {bandwidth_gbit: 10, latency_us: 5}\nnodes: [{name: a, host: \"\\e[2J\", gpus: [rtx-3090]}]\n",
            "network: {bandwidth_gbit: 10, latency_us: 5}\nnodes: [{name: a, host: h, gpus: [rtx-3090]}]\nextra: 1\n"]


@pytest.mark.parametrize("text", CLUSTERS, ids=[f"cluster{i}" for i in range(len(CLUSTERS))])
def test_bad_cluster_files(tmp_path: Path, text: str) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    assert_one_line_error(run(["serve-plan", "--hardware", str(path), "--model", "gemma-3-1b"]))
    assert_one_line_error(run(["serve-plan", "--hardware", str(path), "--model", "gemma-3-1b", "--engine", "vllm"]))
    assert_one_line_error(run(["check", "--hardware", str(path), "--model", "gemma-3-1b"]))


@pytest.mark.parametrize("extra", REPORT, ids=[" ".join(a) for a in REPORT])
def test_report_refuses_impossible_options(extra: list[str]) -> None:
    assert_one_line_error(run(["report", "--gpu", "rtx-4090", "--model", "gemma-3-1b", *extra]))


def test_names_that_do_not_exist(tmp_path: Path) -> None:
    for args in (["check", "--gpu", "rtx-9999", "--model", "gemma-3-1b"],
                 ["check", "--gpu", "rtx-4090", "--model", "gemma-9-1b"],
                 ["check", "--gpu", "\x1b]0;title\x07rtx", "--model", "gemma-3-1b"],
                 ["check", "--gpu", "rtx-4090", "--model", "\x1b[2Jgemma"],
                 ["check", "--gpu", "[bold]x[/zz]", "--model", "gemma-3-1b"],
                 ["check", "--gpu", "rtx-4090"],
                 ["check", "--model", "gemma-3-1b"],
                 ["check", "--gpu", "cpu", "--gpu", "rtx-4090", "--model", "gemma-3-1b"],
                 ["db", "validate", str(tmp_path / "missing")],
                 ["inspect", str(tmp_path / "missing.gguf")],
                 ["synth", str(tmp_path / "x.gguf"), "--model", "gemma-3-1b", "--quant", "Q7_K"],
                 ["list", "nothing"],
                 ["nocommand"]):
        assert_one_line_error(run(args))


def test_file_arguments_that_are_not_files(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    text = tmp_path / "notes.txt"
    text.write_text("not a model\n")
    for args in (["inspect", "/dev/zero"], ["inspect", str(fifo)], ["inspect", str(tmp_path)], ["inspect", str(text)],
                 ["check", "--gguf", "/dev/urandom", "--gpu", "rtx-4090"],
                 ["check", *CHECK[1:], "--mmproj", "/dev/zero"],
                 ["check", *CHECK[1:], "--mmproj", str(text)],
                 ["check", *CHECK[1:], "--html", str(tmp_path)],
                 ["check", *CHECK[1:], "--html", str(tmp_path / "no" / "such" / "dir.html")],
                 ["synth", str(tmp_path), "--model", "gemma-3-1b"],
                 ["synth", str(tmp_path / "no" / "x.gguf"), "--model", "gemma-3-1b"]):
        assert_one_line_error(run(args))


def test_html_to_a_special_file_writes_in_place_and_keeps_it(tmp_path: Path) -> None:
    """`--html /dev/null` or `--html >(cat)` must not replace the device or pipe with a regular file (as root
    that would break /dev/null for the whole machine). Tested on a FIFO of our own, read by a thread."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()
    assert run([*CHECK, "--html", str(fifo)]).returncode == 0
    reader.join(300)
    assert stat.S_ISFIFO(fifo.stat().st_mode) and b"<html" in b"".join(received)
    link = tmp_path / "report.html"
    target = tmp_path / "real.html"
    target.write_text("old")
    target.chmod(0o640)
    link.symlink_to(target)
    assert run([*CHECK, "--html", str(link)]).returncode == 0
    assert link.is_symlink() and "<html" in target.read_text()  # the link is kept, its target written
    assert stat.S_IMODE(target.stat().st_mode) == 0o640  # and the file keeps its mode


def test_synth_never_replaces_a_special_file(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.gguf"
    os.mkfifo(fifo)
    assert_one_line_error(run(["synth", str(fifo), "--model", "gemma-3-270m"]))
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    new = tmp_path / "new.gguf"
    assert run(["synth", str(new), "--model", "gemma-3-270m"]).returncode == 0
    mask = os.umask(0o022)
    os.umask(mask)
    assert stat.S_IMODE(new.stat().st_mode) == 0o666 & ~mask  # as open() would create it, not mkstemp's 0600


def test_help_and_version_are_not_errors() -> None:
    version = run(["--version"])
    assert version.returncode == 0 and version.stdout.startswith("gemma-fit ") and not version.stderr
    bare = run([])
    assert bare.returncode == 2 and "Usage" in bare.stdout + bare.stderr and "error" not in bare.stderr
    assert run(["check", "--help"]).returncode == 0


def test_a_closed_pipe_ends_quietly() -> None:
    """`gemma-fit list gpus | head -1`: killed by SIGPIPE (141 in a shell) with nothing on stderr."""
    proc = subprocess.run(f"{' '.join(map(repr, CLI))} list gpus --json | head -1; exit ${{PIPESTATUS[0]}}",
                          shell=True, executable="/bin/bash", capture_output=True, text=True, timeout=300)
    assert proc.returncode == 141, proc.stderr
    assert proc.stderr == ""
