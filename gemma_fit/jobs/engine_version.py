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
_BUILD = re.compile(r"^version:\s*(\d+)\s*\(", re.MULTILINE)


def installed_llama_server() -> str | None:
    """The build number of the llama-server on PATH ("b6890"), or None: none installed, one that does not answer
    in time, or GEMMA_FIT_NO_ENGINE_PROBE set (answers that must not depend on this machine: tests, reports)."""
    if os.environ.get("GEMMA_FIT_NO_ENGINE_PROBE"):
        return None
    path = shutil.which("llama-server")
    if path is None:
        return None
    import subprocess  # only where there is a llama-server to ask: a check without one never loads it

    try:
        done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=TIMEOUT_S, check=False,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    m = _BUILD.search(done.stderr + done.stdout)
    return f"b{m.group(1)}" if m else None
