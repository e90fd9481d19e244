"""The version of an engine installed on this machine, read from the engine itself (an edge: a subprocess), so that
an answer without --engine-version is for the llama-server the user will run.

`llama-server --version` prints `version: 6890 (3c1e5a2)` then `built with ...` (common/common.cpp
common_print_build_info, on stderr); the build number is the release tag bNNNN.
"""

from __future__ import annotations

import os
import re
import shutil

TIMEOUT_S = 5  # --version answers at once; a binary that hangs is not waited for
_BUILD = re.compile(r"^version:\s*([0-9]{1,7})\s*\(", re.MULTILINE)  # ASCII, a build number's size: else not one
MAX_OUTPUT = 64 * 1024  # --version prints two lines; a binary that floods is read this far


def installed_llama_server() -> str | None:
    """The build number of the llama-server on PATH ("b6890"), or None: none installed, one that does not answer
    in time, or GEMMA_FIT_NO_ENGINE_PROBE set (answers that must not depend on this machine: tests, reports)."""
    if os.environ.get("GEMMA_FIT_NO_ENGINE_PROBE"):
        return None
    path = shutil.which("llama-server")
    if path is None:
        return None
    try:
        text = _first_output([path, "--version"])
    except OSError:
        return None
    m = _BUILD.search(text)
    return f"b{m.group(1)}" if m else None


def _first_output(command: list[str]) -> str:
    """What the command prints (stdout and stderr) in TIMEOUT_S, at most MAX_OUTPUT bytes, decoded leniently; the
    command is killed after."""
    import select
    import subprocess  # only where there is a llama-server to ask: a check without one never loads it
    import time

    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    assert proc.stdout is not None
    data, deadline = b"", time.monotonic() + TIMEOUT_S
    try:
        while len(data) < MAX_OUTPUT and (left := deadline - time.monotonic()) > 0:
            if not select.select([proc.stdout], [], [], left)[0]:
                break
            chunk = os.read(proc.stdout.fileno(), MAX_OUTPUT - len(data))
            if not chunk:
                break
            data += chunk
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
    return data.decode("utf-8", errors="replace")
