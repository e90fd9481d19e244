"""Errors the CLI turns into a one-line message and a distinct exit status."""

from __future__ import annotations

# Exit statuses fixed by the contract (shared/spec/contract.md).
EXIT_OK = 0
EXIT_PROBLEMS = 1
EXIT_BAD_INPUT = 2
EXIT_OFFLOAD = 3
EXIT_NO_GO = 4


class GemmaFitError(Exception):
    """An error with a user-facing one-line message and an exit status."""

    exit_code = EXIT_BAD_INPUT


class BadInput(GemmaFitError):
    """Unknown id, impossible number, unreadable or malformed file."""


class DatabaseError(BadInput):
    """A database entry that does not validate; the message names file and field."""
