""""Did you mean" for every id a user types (models, quants, GPUs, CPUs, engines, disks ...): the known names
closest to what was typed, compared without case or punctuation, so `Q4_K_XL` finds UD-Q4_K_XL and
`gema-3-27b` finds gemma-3-27b."""

from __future__ import annotations

import re
from collections.abc import Iterable

from gemma_fit.base.text import printable


def _plain(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def closest(typed: str, known: Iterable[str], n: int = 3) -> list[str]:
    """The known names closest to `typed`: those that contain it (or it them), then close spellings."""
    names = list(dict.fromkeys(known))
    key = _plain(typed)
    if not key:
        return []
    by_plain: dict[str, str] = {}
    for name in names:
        by_plain.setdefault(_plain(name), name)
    contains = [name for p, name in by_plain.items() if p and (key in p or p in key) and len(p) >= 2]
    contains.sort(key=lambda name: abs(len(_plain(name)) - len(key)))
    import difflib  # only when a name is unknown

    close = [by_plain[p] for p in difflib.get_close_matches(key, list(by_plain), n=n, cutoff=0.6)]
    return list(dict.fromkeys([*contains, *close]))[:n]


def did_you_mean(typed: str, known: Iterable[str], n: int = 3) -> str:
    """"; did you mean X or Y?" for the closest names, or "" when nothing is close."""
    found = closest(typed, known, n)
    if not found:
        return ""
    shown = found[0] if len(found) == 1 else ", ".join(found[:-1]) + " or " + found[-1]
    return f"; did you mean {printable(shown, 200)}?"
