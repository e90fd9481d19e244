"""Where scripts/build_llamacpp.py builds llama.cpp, and so where `smoke` looks for it: the one place of the rule.

Standard library only: the build script loads this file by path, without importing the package.
"""

from __future__ import annotations

import os
from pathlib import Path

# The llama-cpp-python sdist whose vendored llama.cpp tree the build script compiles (LLAMA_CPP_COMMIT).
LLAMA_CPP_PYTHON_VERSION = "0.3.36"
CACHE_ENV = "GEMMA_FIT_CACHE"
BUILD_COMMAND = "python scripts/build_llamacpp.py"


def cache_root() -> Path:
    """$GEMMA_FIT_CACHE, else ~/.cache/gemma-fit."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "gemma-fit")


def bin_dir(version: str = LLAMA_CPP_PYTHON_VERSION) -> Path:
    """The build's bin/ folder: <cache>/llama.cpp-<version>/build/bin."""
    return cache_root() / f"llama.cpp-{version}" / "build" / "bin"


DATA_ENV = "XDG_DATA_HOME"


def data_root() -> Path:
    """Where gemma-fit keeps what it learns on this machine (smoke records): $XDG_DATA_HOME/gemma-fit, else
    ~/.local/share/gemma-fit. Never a source checkout."""
    return Path(os.environ.get(DATA_ENV) or Path.home() / ".local" / "share") / "gemma-fit"


CONFIG_ENV = "XDG_CONFIG_HOME"
CALIBRATION_ENV = "GEMMA_FIT_CALIBRATION"


def config_root() -> Path:
    """The user's gemma-fit settings folder: $XDG_CONFIG_HOME/gemma-fit, else ~/.config/gemma-fit."""
    return Path(os.environ.get(CONFIG_ENV) or Path.home() / ".config") / "gemma-fit"


def calibration_file() -> Path:
    """This machine's speed calibration (`gemma-fit bench --save`): $GEMMA_FIT_CALIBRATION, else calibration.json in
    the settings folder. Never a source checkout."""
    return Path(os.environ.get(CALIBRATION_ENV) or config_root() / "calibration.json")
