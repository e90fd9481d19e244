"""`gemma-fit check` read straight from the command line, before typer loads.

Typer and the click it carries cost about a third of a cold `check`'s CPU time (importing them, then building the
command), more than the check itself. A `check` whose words are all plain (each an option `check` declares, spelled
in full, a value after each option that takes one) is read here, with the table of `check`'s options typer itself
builds (cli.check_words, written from the typer command by scripts/write_check_words.py and held equal to it by
tests/test_quick.py) and the same conversions typer applies; the answer is cli.answer.run_check's, as the typer
command's is. Anything else, or anything in doubt (a value that starts with '-', `--opt=value`, an option not
`check`'s, --help, a value a conversion refuses, a path that exists but cannot be read), returns None: typer reads
the line again and answers as always, usage errors included.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gemma_fit.cli.check_words import DEFAULTS, WORDS
from gemma_fit.cli.numbers import plain_digits
from gemma_fit.cli.values import token_count


def _path(value: str) -> Path:
    """click's Path type as typer declares it (exists=False, readable=True): an existing path must be readable."""
    try:
        os.stat(value)
    except OSError:
        return Path(value)
    if not os.access(value, os.R_OK):
        raise ValueError(f"{value!r} is not readable")  # typer says so in its own words
    return Path(value)


def _ascii(read: Callable[[str], Any]) -> Callable[[str], Any]:
    """int() and float() as cli.numbers makes click's: ASCII digits, no underscores (else typer says so)."""
    def checked(value: str) -> Any:
        if not plain_digits(value):
            raise ValueError(value)
        return read(value)

    return checked


CONVERT: dict[str, Callable[[str], Any]] = {"str": str, "int": _ascii(int), "float": _ascii(float), "path": _path,
                                            "tokens": token_count}


def check_params(args: Sequence[str]) -> dict[str, Any] | None:
    """`check`'s parameters from the words after `check`, as typer would pass them; None: leave it to typer."""
    values = dict(DEFAULTS)
    repeated: dict[str, list[Any]] = {}
    i = 0
    while i < len(args):
        word = WORDS.get(args[i])
        if word is None:
            return None
        name, kind, multiple = word
        if kind == "flag":
            values[name] = True
            i += 1
            continue
        if i + 1 >= len(args) or args[i + 1].startswith("-"):
            return None
        try:
            value = CONVERT[kind](args[i + 1])
        except (ValueError, TypeError):
            return None
        if multiple:
            repeated.setdefault(name, []).append(value)
        else:
            values[name] = value  # the last one counts, as in click
        i += 2
    values.update(repeated)
    return values


def run_quick_check(args: Sequence[str]) -> int | None:
    """Run `check` with the words after it; its exit status, or None when typer must read them."""
    params = check_params(args)
    if params is None:
        return None
    from gemma_fit.cli.answer import run_check

    return run_check(**params)
