"""The `gemma-fit` program: one-line errors and the contract's exit statuses, never a traceback.

`gemma-fit --version` is answered here, before the command line's machinery loads (as pip and llama.cpp answer
it: at once), and so is a plain `check` line (cli.quick: typer is a third of a cold check's time); everything
else goes to cli.app. `run` is the program itself (the script and `python -m
gemma_fit`); `main` is the same without the fast exit, for callers that go on afterwards (tests, fork servers).
"""

from __future__ import annotations

import sys
from typing import NoReturn

from gemma_fit.base.errors import EXIT_BAD_INPUT, GemmaFitError
from gemma_fit.base.version import __version__


def _fail(message: str, code: int) -> None:
    """The one line a failure prints: control bytes escaped, so user input cannot drive the terminal."""
    from gemma_fit.base.text import printable

    print(f"gemma-fit: error: {printable(message, limit=2000)}", file=sys.stderr)
    sys.exit(code)


def main() -> None:
    """Entry point of the gemma-fit script and of `python -m gemma_fit`."""
    if sys.argv[1:] == ["--version"]:
        print(f"gemma-fit {__version__}")
        return
    import signal

    # `gemma-fit ... | head`: die of SIGPIPE (status 141 in the shell) like cat and grep, instead of
    # click's "exit 1" or Python's BrokenPipeError at the first write after head has gone.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    if sys.argv[1:2] == ["check"] and _quick_check(sys.argv[2:]):
        return
    try:
        import typer

        from gemma_fit.cli.app import app_for

        app = app_for(sys.argv[1:])
    except GemmaFitError as exc:  # a database that does not load
        _fail(str(exc), exc.exit_code)
    try:
        rc = app(standalone_mode=False, prog_name="gemma-fit")  # returns typer.Exit's code, not raising it
        if isinstance(rc, int) and rc:
            sys.exit(rc)
    except GemmaFitError as exc:
        _fail(str(exc), exc.exit_code)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        _aborted()
    except Exception as exc:  # usage errors and anything unexpected: one line, no traceback
        format_message = getattr(exc, "format_message", None)
        if format_message is not None:  # typer/click usage errors (unknown option, bad value)
            message = format_message()
            if not message:  # no command given: click printed the help, there is nothing more to say
                sys.exit(EXIT_BAD_INPUT)
            _fail(message, EXIT_BAD_INPUT)
        _internal(exc)


def _aborted() -> NoReturn:
    print("gemma-fit: aborted", file=sys.stderr)
    sys.exit(130)


def _internal(exc: Exception) -> NoReturn:
    """Anything unexpected: one line, no traceback."""
    print(f"gemma-fit: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
    sys.exit(1)


def _quick_check(args: list[str]) -> bool:
    """A plain `check` line answered without typer (cli.quick); False when typer must read it."""
    from gemma_fit.cli.quick import run_quick_check

    try:
        rc = run_quick_check(args)
    except GemmaFitError as exc:
        _fail(str(exc), exc.exit_code)
    except KeyboardInterrupt:  # as click turns Ctrl-C into its Abort on typer's path
        _aborted()
    except Exception as exc:
        _internal(exc)
    if rc is None:
        return False
    if rc:
        sys.exit(rc)
    return True


def run() -> None:
    """The gemma-fit program: `main`, then leave without tearing the interpreter down.

    Python's own exit frees every object of the ~80 modules a command loads, one by one: a sixth of a cold
    `check`'s CPU time, spent on memory the kernel takes back at once anyway. Exit handlers still run (temporary
    folders, worker pools) and the standard streams are flushed, so nothing written is lost."""
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = _exit_status(exc.code)
    import atexit
    import os

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except OSError:  # a full disk or a closed stream: Python's own exit says 120 for that
            code = code or 120
    os._exit(code)


def _exit_status(code: object) -> int:
    """The status `sys.exit(code)` gives: None is 0, an int itself, anything else is printed and gives 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1
