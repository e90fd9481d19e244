"""`gemma-fit smoke` runs llama.cpp for real (CPU build) and compares with the estimate.

Zero-weight files of Gemma 2, 3 and 4 (llama.cpp allocates exactly what real weights need); the
host-side terms (weights, KV cache, compute buffer, total) must agree within 5%.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import LLAMA_THREADS

CLI = [sys.executable, "-c", "from gemma_fit.cli.entry import main; main()"]


def smoke(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, "smoke", *args], capture_output=True, text=True, timeout=timeout, check=False)


@pytest.mark.llamacpp
@pytest.mark.parametrize(("model", "ctx"), [("gemma-2-2b", 4096), ("gemma-3-1b", 8192), ("gemma-4-E4B", 4096)])
def test_smoke_host_terms_agree_within_5pct(model: str, ctx: int, llama_bin: Path) -> None:
    proc = smoke("--model", model, "--quant", "Q4_0", "--synthetic", "--ctx", str(ctx), "--llama-bin", str(llama_bin),
                 "--threads", LLAMA_THREADS, "--prompt-tokens", "64", "--n-predict", "4", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    assert doc["schema"] == "gemma-fit.smoke/1"
    for term in ("total", "weights", "kv_cache", "compute"):
        assert abs(doc["error_pct"][term]) <= 5.0, (term, doc["error_pct"])
    measured = doc["measured"]
    assert measured["decode_tokens_per_s"] > 0 and measured["prefill_tokens_per_s"] > 0
    assert measured["host"]["peak_rss_bytes"] > measured["host"]["kv_cache_bytes"]


def test_missing_llama_cpp_is_bad_input(tmp_path: Path) -> None:
    proc = smoke("--model", "270m", "--synthetic", "--llama-bin", str(tmp_path))
    assert proc.returncode == 2
    assert "llama-completion not found" in proc.stderr and "Traceback" not in proc.stderr


def _fake_llama(folder: Path, body: str) -> Path:
    exe = folder / "llama-completion"
    exe.write_text(f"#!{sys.executable}\n{body}\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return folder


def test_crashing_llama_cpp_is_reported_with_its_last_lines(tmp_path: Path) -> None:
    body = "import sys\nprint('loading...')\nprint('CUDA error: out of memory')\nsys.exit(134)"
    bin_dir = _fake_llama(tmp_path, body)
    proc = smoke("--model", "270m", "--synthetic", "--llama-bin", str(bin_dir))
    assert proc.returncode == 5
    assert "ran out of memory" in proc.stderr and "CUDA error: out of memory" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_model_path_is_passed_without_a_shell(tmp_path: Path) -> None:
    """The fake llama.cpp echoes its argv: a file name with spaces and shell metacharacters arrives intact."""
    seen = tmp_path / "argv.json"
    body = (f"import json, sys\njson.dump(sys.argv, open({str(seen)!r}, 'w'))\n"
            "print('load_tensors:          CPU model buffer size =   100.00 MiB')\n"
            "print('llama_kv_cache:        CPU KV buffer size =     8.00 MiB')\n"
            "print('sched_reserve:        CPU compute buffer size =   500.00 MiB')")
    bin_dir = _fake_llama(tmp_path, body)
    weird = tmp_path / "my model; $(touch pwned) `x`.gguf"
    subprocess.run([*CLI, "synth", str(weird), "--model", "270m", "--quant", "Q8_0"], check=True, capture_output=True)
    proc = smoke("--gguf", str(weird), "--llama-bin", str(bin_dir), "--json")
    assert proc.returncode == 0, proc.stderr
    argv = json.loads(seen.read_text())
    assert argv[argv.index("-m") + 1] == str(weird)
    assert not (Path.cwd() / "pwned").exists() and not (tmp_path / "pwned").exists()


def test_needs_a_file_or_a_synthetic_model() -> None:
    proc = smoke("--model", "270m")
    assert proc.returncode == 2 and "--gguf FILE, or --model ID --synthetic" in proc.stderr


def test_record_appends_one_json_line_per_run(tmp_path: Path) -> None:
    body = ("print('load_tensors:          CPU model buffer size =   100.00 MiB')\n"
            "print('sched_reserve:        CPU compute buffer size =   500.00 MiB')")
    bin_dir = _fake_llama(tmp_path, body)
    store = tmp_path / "records.jsonl"
    env = dict(os.environ, GEMMA_FIT_SMOKE_RECORDS=str(store))
    for _ in range(2):
        args = ["smoke", "--model", "270m", "--synthetic", "--llama-bin", str(bin_dir), "--record"]
        proc = subprocess.run([*CLI, *args], capture_output=True, text=True, env=env, timeout=300)
        assert proc.returncode == 0, proc.stderr
    lines = store.read_text().splitlines()
    assert len(lines) == 2 and json.loads(lines[0])["schema"] == "gemma-fit.smoke/1"


# --- a llama.cpp that hangs, leaves children behind or prints too much ----------------------------------------

HANG_GUARD_S = 300  # only against a hang: the runs below take seconds
LOG_RSS_LIMIT_MIB = 200  # the CLI with its imports takes about 100 MiB
# The CLI, printing its own peak RSS (ru_maxrss, KiB) on stderr as it exits.
# The CLI's own peak RSS: VmHWM of its address space. Not getrusage's ru_maxrss: Linux carries that over from the
# parent across fork and exec, so a child of a large pytest process would report the parent's peak.
CLI_RSS = [sys.executable, "-c", "import atexit, sys\n"
           "def hwm():\n"
           "    with open('/proc/self/status') as f:\n"
           "        kib = next(line.split()[1] for line in f if line.startswith('VmHWM:'))\n"
           "    print(f'maxrss_kib={kib}', file=sys.stderr)\n"
           "atexit.register(hwm)\n"
           "from gemma_fit.cli.entry import main\nmain()"]

BUFFER_LINES = ("print('load_tensors:          CPU model buffer size =   100.00 MiB')\n"
                "print('llama_kv_cache:        CPU KV buffer size =     8.00 MiB')\n"
                "print('sched_reserve:        CPU compute buffer size =   500.00 MiB', flush=True)\n")


def _child_holding_stdout(pid_file: Path) -> str:
    """Fake llama.cpp code: start a child that sleeps with llama.cpp's stdout open, and note its pid (in a file
    that appears whole or not at all)."""
    return ("import os, subprocess, sys, time\n"
            "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
            f"open({str(pid_file)!r} + '.tmp', 'w').write(str(child.pid))\n"
            f"os.replace({str(pid_file)!r} + '.tmp', {str(pid_file)!r})\n")


def _gone(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _wait_gone(pid: int) -> bool:
    import time

    for _ in range(1200):  # the group is killed before smoke returns; a re-parented zombie may take a moment
        if _gone(pid):
            return True
        time.sleep(0.1)
    return False


def test_timeout_ends_llama_cpp_and_the_child_holding_its_output(tmp_path: Path) -> None:
    """--timeout ends llama.cpp and its child, and the error keeps llama.cpp's last line. The fake llama.cpp
    starts its child, prints `loading`, then notes that it did (a file) and sleeps. On a machine so busy that
    the timeout came before that, the run is repeated with twice the timeout (each run checked the same way):
    the outcome does not depend on the machine's speed."""
    timeout = 2
    while True:
        folder = tmp_path / f"timeout-{timeout}"
        folder.mkdir()
        pid_file, printed = folder / "child.pid", folder / "printed"
        bin_dir = _fake_llama(folder, _child_holding_stdout(pid_file) + "print('loading', flush=True)\n"
                                                                        f"open({str(printed)!r}, 'w').close()\n"
                                                                        "time.sleep(600)")
        proc = smoke("--model", "270m", "--synthetic", "--llama-bin", str(bin_dir), "--timeout", str(timeout),
                     timeout=HANG_GUARD_S)
        assert proc.returncode == 5, proc.stderr
        assert f"did not finish in {timeout} s" in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
        if pid_file.exists():
            assert _wait_gone(int(pid_file.read_text()))
        if printed.exists():
            break
        assert timeout < 64, f"the fake llama.cpp did not print in {timeout} s: {proc.stderr}"
        timeout *= 2
    assert pid_file.exists() and "loading" in proc.stderr


def test_a_child_left_holding_the_output_does_not_block_smoke(tmp_path: Path) -> None:
    """llama.cpp exits, its child keeps the pipe open: smoke still finishes, with a failure and the child ended."""
    pid_file = tmp_path / "child.pid"
    bin_dir = _fake_llama(tmp_path, _child_holding_stdout(pid_file) + "print('no buffers here', flush=True)")
    proc = smoke("--model", "270m", "--synthetic", "--llama-bin", str(bin_dir), "--timeout", "500",
                 timeout=HANG_GUARD_S)
    assert proc.returncode == 5, proc.stderr
    assert "printed no buffer sizes" in proc.stderr and "no buffers here" in proc.stderr
    assert _wait_gone(int(pid_file.read_text()))


def test_a_child_left_behind_after_a_good_run_is_ended(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    bin_dir = _fake_llama(tmp_path, _child_holding_stdout(pid_file) + BUFFER_LINES)
    proc = smoke("--model", "270m", "--synthetic", "--llama-bin", str(bin_dir), "--json", timeout=HANG_GUARD_S)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["measured"]["host"]["compute_bytes"] == 500 * 2**20
    assert _wait_gone(int(pid_file.read_text()))


def test_a_huge_log_is_parsed_in_bounded_memory(tmp_path: Path) -> None:
    """200 MB of log and one 20 MB line (no newline for a long while): figures from before and after them are
    read, and the CLI process stays far below the size of the log."""
    body = ("import sys\n"
            "w = sys.stdout.buffer.write\n"
            "w(b'load_tensors:          CPU model buffer size =   100.00 MiB\\n')\n"
            "line = b'x' * 4000 + b'\\n'\n"
            "for _ in range(500):\n"
            "    w(line * 100)\n"
            "w(b'y' * (20 * 2**20) + b' compute buffer size = 1.00 MiB\\n')\n"
            "w(b'sched_reserve:        CPU compute buffer size =   500.00 MiB\\n')\n"
            "w(b'llama_perf_context_print:        eval time =      10.00 ms /     3 runs   (    3.33 ms per token,"
            "   300.00 tokens per second)\\n')\n")
    bin_dir = _fake_llama(tmp_path, body)
    proc = subprocess.run([*CLI_RSS, "smoke", "--model", "270m", "--synthetic", "--llama-bin", str(bin_dir), "--json"],
                          capture_output=True, text=True, timeout=HANG_GUARD_S, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    measured = json.loads(proc.stdout)["measured"]
    assert measured["host"]["weights_bytes"] == 100 * 2**20 and measured["host"]["compute_bytes"] == 500 * 2**20
    assert measured["decode_tokens_per_s"] == 300.0
    peak_mib = int(proc.stderr.rsplit("maxrss_kib=", 1)[1]) / 1024
    assert peak_mib < LOG_RSS_LIMIT_MIB, peak_mib  # holding the log would take over 220 MiB on top of the imports


def test_log_parser_state_does_not_grow_with_the_log() -> None:
    from gemma_fit.jobs import llama_log as sm
    def log():  # type: ignore[no-untyped-def]
        yield "load_tensors:        CUDA0 model buffer size =  2048.00 MiB"
        for i in range(50_000):
            yield f"llama_decode: step {i} " + "z" * (i % 7) * 1000
        yield "llama_kv_cache:      CUDA0 KV buffer size =    64.00 MiB"
        for i in range(1000):  # names without end: only the first MAX_BUFFERS are kept
            yield f"load_tensors:        BUF{i} model buffer size =     1.00 MiB"
        yield ("llama_perf_context_print: prompt eval time =  100.00 ms /    64 tokens (  1.56 ms per token,   "
               "640.00 tokens per second)")

    parser = sm.parse_lines(log())
    assert parser.n_lines == 51_003 and len(parser._tail) == sm.TAIL_LINES
    assert all(len(x) <= sm.MAX_LINE_BYTES for x in parser._tail)
    buffers = parser.measured.buffers
    assert buffers["CUDA0"] == {"model": 2048 * 2**20, "KV": 64 * 2**20, "compute": 0, "output": 0}
    assert len(buffers) == sm.MAX_BUFFERS
    assert parser.measured.prefill_tokens_per_s == 640.0 and parser.measured.decode_tokens_per_s is None
    assert len(parser.tail(3)) <= 3 * (sm.TAIL_LINE_CHARS + 3)


def test_read_lines_cuts_long_lines_and_skips_their_rest() -> None:
    import io

    from gemma_fit.jobs import llama_log as sm
    stream = io.BytesIO(b"short\n" + b"L" * 100_000 + b"\nafter\nlast without newline")
    assert [len(x) for x in sm.read_lines(stream, limit=1000)] == [6, 1000, 6, 20]


# --- numbers checked before anything runs; where llama.cpp is found -------------------------------------------

@pytest.mark.parametrize(("args", "message"), [
    (["--threads", "0"], "--threads 0 is impossible"),
    (["--threads", "-2"], "--threads -2 is impossible"),
    (["--threads", "100000"], "--threads 100000 is impossible"),
    (["--prompt-tokens", "0"], "--prompt-tokens 0 is impossible"),
    (["--prompt-tokens", "-3"], "--prompt-tokens -3 is impossible"),
    (["--prompt-tokens", "5000"], "--prompt-tokens 5000 does not fit the context"),
    (["--n-predict", "-5"], "--n-predict -5 is impossible"),
    (["--n-predict", "0"], "--n-predict 0 is impossible"),
    (["--ctx", "-5"], "--ctx -5 is impossible"),
    (["--batch", "0"], "--batch 0 is impossible"),
    (["--batch", "-1"], "--batch -1 is impossible"),
    (["--ubatch", "0"], "--ubatch 0 is impossible"),
    (["--ubatch", "-512"], "--ubatch -512 is impossible"),
    (["--parallel", "0"], "--parallel 0 is impossible"),
    (["--parallel", "-1"], "--parallel -1 is impossible"),
    (["--timeout", "0"], "--timeout 0 is impossible"),
    (["--timeout", "-1"], "--timeout -1 is impossible"),
    (["--timeout", "nan"], "--timeout nan is impossible"),
    (["--timeout", "inf"], "--timeout inf is impossible"),
    (["--n-gpu-layers", "-3"], "--n-gpu-layers -3 is impossible"),
])
def test_impossible_numbers_are_bad_input_before_llama_cpp_runs(tmp_path: Path, args: list[str], message: str
                                                                ) -> None:
    ran = tmp_path / "ran"
    bin_dir = _fake_llama(tmp_path, f"open({str(ran)!r}, 'w').write('ran')\n" + BUFFER_LINES)
    proc = smoke("--model", "270m", "--synthetic", "--llama-bin", str(bin_dir), "--ctx", "4096", *args)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert message in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert not ran.exists()


def test_ctx_0_is_the_trained_context_not_an_error(tmp_path: Path) -> None:
    bin_dir = _fake_llama(tmp_path, BUFFER_LINES)
    proc = smoke("--model", "270m", "--synthetic", "--llama-bin", str(bin_dir), "--ctx", "0", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["settings"]["n_ctx"] == 32768


def _cache_env(tmp_path: Path) -> dict[str, str]:
    empty = tmp_path / "empty-path"
    empty.mkdir()
    return dict(os.environ, GEMMA_FIT_CACHE=str(tmp_path / "cache"), PATH=str(empty))


def test_finds_the_build_of_the_build_script_without_llama_bin(tmp_path: Path) -> None:
    import build_llamacpp  # scripts/ is on sys.path (conftest.py)

    env = _cache_env(tmp_path)
    bin_dir = tmp_path / "cache" / f"llama.cpp-{build_llamacpp.SDIST_VERSION}" / "build" / "bin"
    bin_dir.mkdir(parents=True)
    _fake_llama(bin_dir, BUFFER_LINES)
    proc = subprocess.run([*CLI, "smoke", "--model", "270m", "--synthetic", "--json"], capture_output=True,
                          text=True, env=env, timeout=HANG_GUARD_S, check=False)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["llama_cpp_bin"] == str(bin_dir)
    command = doc["llama_cpp_command"]
    assert command[0] == "llama-completion" and command[command.index("-p") + 1] == "<128 tokens>"
    assert command[-2:] == ["-lm", "none"]  # CPU-only: plain allocations


def test_not_found_says_how_to_build_it(tmp_path: Path) -> None:
    proc = subprocess.run([*CLI, "smoke", "--model", "270m", "--synthetic"], capture_output=True, text=True,
                          env=_cache_env(tmp_path), timeout=HANG_GUARD_S, check=False)
    assert proc.returncode == 2
    assert "llama-completion not found in" in proc.stderr and "python scripts/build_llamacpp.py" in proc.stderr
    assert str(tmp_path / "cache") in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_build_script_and_smoke_share_one_cache_rule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import build_llamacpp

    from gemma_fit.base import cache as llamacpp_cache
    assert build_llamacpp.SDIST_VERSION == llamacpp_cache.LLAMA_CPP_PYTHON_VERSION
    monkeypatch.setenv("GEMMA_FIT_CACHE", str(tmp_path))
    assert build_llamacpp.bin_dir() == llamacpp_cache.bin_dir() == tmp_path / "llama.cpp-0.3.36" / "build" / "bin"
    assert build_llamacpp.cache_root() == tmp_path
    monkeypatch.delenv("GEMMA_FIT_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert build_llamacpp.cache_root() == llamacpp_cache.cache_root() == tmp_path / "home" / ".cache" / "gemma-fit"
