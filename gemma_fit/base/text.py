"""Text from files (GGUF keys, tensor names, general.name, paths) made safe to print on a terminal.

A GGUF string may hold terminal control sequences: ESC / CSI (move the cursor, recolour, clear the
screen), OSC 52 (write the user's clipboard), BEL, backspaces that hide what came before, or bidi
overrides that make text read differently from what it is. `printable` replaces each of them with
a visible escape, so an error message or a rendered table shows the bytes instead of obeying them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

# C0 controls, DEL and C1 controls (CSI is U+009B, OSC U+009D: the 8-bit forms of ESC [ and ESC ]) as \xNN;
# line/paragraph separators, bidi marks, embeddings, overrides and isolates (U+061C, U+200E/F, U+202A-E,
# U+2066-9), the invisible zero-width characters (U+200B-D, U+2060, U+FEFF: a name that looks like an id but is
# not one) and lone surrogates (undecodable bytes of a file name, kept by os.fsdecode) as \uNNNN. Backslashes are
# left alone: ordinary text is unchanged.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028\u2029\u202a-\u202e\u2060\u2066-\u2069"
                     "\ufeff\ud800-\udfff]")
ELLIPSIS = "…"


def _escape(ch: str) -> str:
    code = ord(ch)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def inert(s: str) -> str:
    """`s` with every character `printable` escapes escaped but newlines and tabs, at any length: text a page shows
    (an HTML report) keeps its lines, never a terminal sequence or a bidi override."""
    if _UNSAFE.search(s) is None:
        return s
    return _UNSAFE.sub(lambda m: m.group() if m.group() in "\n\t" else _escape(m.group()), s)


def has_unsafe(s: str) -> bool:
    """Whether `s` holds a character `printable` escapes (a control, a line separator, a bidi mark): in an id or a
    name to look up, that is a typo or an attack, never part of the name."""
    return _UNSAFE.search(s) is not None


def printable(s: str, limit: int = 200) -> str:
    """`s` with every control character escaped (ESC -> `\\x1b`), at most `limit` characters long:
    a longer result is cut at a character boundary (never inside an escape) and ends in an ellipsis.
    Anything not a str is converted with str() first."""
    if not isinstance(s, str):
        s = str(s)
    limit = max(1, limit)
    if len(s) <= limit and _UNSAFE.search(s) is None:
        return s
    # escaping at most quadruples a prefix, so limit + 1 source characters always suffice to decide
    escaped = _UNSAFE.sub(lambda m: _escape(m.group()), s[:limit + 1])
    if len(escaped) <= limit and len(s) <= limit:
        return escaped
    out: list[str] = []
    n = 0
    for piece in _pieces(s[:limit]):
        if n + len(piece) > limit - len(ELLIPSIS):
            break
        out.append(piece)
        n += len(piece)
    return "".join(out) + ELLIPSIS


def _pieces(s: str) -> list[str]:
    """The characters of `s`, each unsafe one already escaped."""
    return [_escape(ch) if _UNSAFE.match(ch) else ch for ch in s]


def printable_doc(value: Any, limit: int = 2000, then: Callable[[str], str] | None = None) -> Any:
    """A JSON-like document with `printable` (and then `then`, e.g. rich's markup escape) applied to
    every string in it, keys included: what a renderer shows of outside data."""
    if isinstance(value, str):
        safe = printable(value, limit)
        return then(safe) if then else safe
    if isinstance(value, dict):
        return {printable_doc(k, limit, then): printable_doc(v, limit, then) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [printable_doc(v, limit, then) for v in value]
    return value

