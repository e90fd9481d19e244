"""Numbers on the command line in ASCII digits only.

click (typer's parser) reads an int or float option with int() and float(), which take Arabic-Indic or fullwidth
digits ('١٠' is 10) and underscores ('1_0' is 10); llama.cpp, vLLM and Ollama read ASCII digits, and gemma-fit's own
token counts do (cli.values). Installed once, when the typer app is built, on whichever click typer uses.
"""

from __future__ import annotations

import importlib
from typing import Any


def ascii_numbers() -> None:
    for name in ("typer._click.types", "click.types"):  # typer 0.2x vendors click; older typers import it
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        base = getattr(module, "_NumberParamTypeBase", None)
        if base is None or getattr(base, "_ascii_only", False):
            continue
        base.convert = _ascii_first(base.convert)
        base._ascii_only = True


def plain_digits(value: str) -> bool:
    """A number as llama.cpp and the engines read one: ASCII only, no underscores."""
    return value.isascii() and "_" not in value


def _ascii_first(convert: Any) -> Any:
    def checked(self: Any, value: Any, param: Any, ctx: Any) -> Any:
        if isinstance(value, str) and not plain_digits(value):
            self.fail(f"{value!r} is not a valid {self.name} (ASCII digits, no underscores)", param, ctx)
        return convert(self, value, param, ctx)

    return checked
