#!/usr/bin/env python3
"""Write gemma_fit/cli/check_words.py: the table of `check`'s options that the quick path (gemma_fit.cli.quick)
reads before typer loads, taken from the command typer builds.

WORDS: every option word (`--model`, `-m`) -> (parameter, kind, repeatable); DEFAULTS: what typer passes for each
parameter when the line does not name it (captured by running the typer command with no options).
tests/test_quick.py fails when the file and this table differ: after changing `check`'s options, run

    python scripts/write_check_words.py
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any
from unittest import mock

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "gemma_fit" / "cli" / "check_words.py"
HEADER = '''"""The options of `gemma-fit check`, as typer builds them: written by scripts/write_check_words.py
(do not edit; tests/test_quick.py holds it equal to the typer command). Read by cli.quick before typer loads."""

from __future__ import annotations

from typing import Any

'''


def typer_params(argv: list[str]) -> dict[str, Any]:
    """What typer passes to `check`'s body for `gemma-fit check ARGV`."""
    from gemma_fit.cli import app as app_module

    captured: dict[str, Any] = {}

    def capture(**params: Any) -> int:
        captured.update(params)
        return 0

    with mock.patch.object(app_module, "run_check", capture):
        app_module.app_for(["check", *argv])(["check", *argv], standalone_mode=False, prog_name="gemma-fit")
    return captured


def _kind(param: Any) -> str:
    from gemma_fit.cli.options import tokens

    type_name = type(param.type).__name__
    if getattr(param, "is_flag", False) and type_name == "BoolParamType":
        return "flag"
    if type_name == "FuncParamType" and getattr(param.type, "func", None) is tokens:
        return "tokens"
    kinds = {"StringParamType": "str", "IntParamType": "int", "FloatParamType": "float", "TyperPath": "path"}
    if type_name not in kinds:
        raise SystemExit(f"check's option {param.opts} has a type the quick path cannot read: {type_name}")
    return kinds[type_name]


def table() -> tuple[dict[str, tuple[str, str, bool]], dict[str, Any]]:
    """(WORDS, DEFAULTS) of the `check` command typer builds."""
    import typer

    from gemma_fit.cli.app import app_for

    group = typer.main.get_command(app_for(["check"]))
    command = group.commands["check"]  # type: ignore[attr-defined]
    words: dict[str, tuple[str, str, bool]] = {}
    for param in command.params:
        if param.secondary_opts or param.nargs != 1:
            raise SystemExit(f"check's option {param.opts} is not a plain option or flag")
        for word in param.opts:
            words[word] = (param.name, _kind(param), bool(param.multiple))
    return words, typer_params([])


def _dict(name: str, annotation: str, items: dict[str, Any]) -> str:
    lines = "".join(f"    {key!r}: {value!r},\n" for key, value in items.items())
    return f"{name}: {annotation} = {{\n{lines}}}\n"


def render(words: dict[str, Any], defaults: dict[str, Any]) -> str:
    return (HEADER + _dict("WORDS", "dict[str, tuple[str, str, bool]]", words) + "\n"
            + _dict("DEFAULTS", "dict[str, Any]", defaults))


def main() -> None:
    sys.path.insert(0, str(REPO))
    words, defaults = table()
    OUT.write_text(render(words, defaults), encoding="utf-8")
    print(f"wrote {OUT.relative_to(REPO)}: {len(words)} option words, {len(defaults)} parameters")


if __name__ == "__main__":
    main()
