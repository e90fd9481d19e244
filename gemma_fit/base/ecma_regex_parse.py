"""Parse a regular expression the way C++ std::regex reads it with its default ECMAScript grammar
(libstdc++), into a small syntax tree that gemma_fit.base.ecma_regex compiles and runs.

llama.cpp matches tensor names against `-ot` patterns with std::regex, so a pattern is checked against
that grammar, not Python's: whatever std::regex would refuse, and whatever is not ECMAScript (Python's
(?P<n>..), (?(1)..), (?i), (?>..), lookbehind, \\A \\Z), is refused with BadInput in one line. Where
std::regex accepts a spelling that means something else in ECMAScript or in Python (a** and a*+, read
as (a*)* and (a*)+; \\cX, read as the letter X; \\A, read as the letter A) it is refused too: the
user meant something std::regex would not do.
"""

from __future__ import annotations

import re
from dataclasses import field
from typing import NoReturn

from gemma_fit.base.errors import BadInput
from gemma_fit.base.record import record
from gemma_fit.base.text import printable

MAX_NESTING = 50  # groups inside groups: the parser and compiler recurse once per level
MAX_CODE = 0x10FFFF


@record(slots=True)
class CharSet:
    """One character from `ranges` (inclusive code point pairs), or from outside them when negated."""

    ranges: tuple[tuple[int, int], ...]
    negated: bool
    ascii: frozenset[str] = field(compare=False, repr=False)  # the members below 128: see charset()

    def has(self, ch: str) -> bool:
        code = ord(ch)
        if code < 128:
            return ch in self.ascii
        return any(lo <= code <= hi for lo, hi in self.ranges) != self.negated


def charset(ranges: list[tuple[int, int]] | tuple[tuple[int, int], ...], negated: bool = False) -> CharSet:
    """A CharSet with its ASCII members precomputed (names are ASCII: one set lookup per character)."""
    inside = {chr(c) for lo, hi in ranges for c in range(lo, min(hi, 127) + 1)}
    members = {chr(c) for c in range(128)} - inside if negated else inside
    return CharSet(tuple(ranges), negated, frozenset(members))


def complement(ranges: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
    """The code points outside `ranges`: \\D, \\W and \\S inside a class join a union of ranges."""
    out, start = [], 0
    for lo, hi in sorted(ranges):
        if lo > start:
            out.append((start, lo - 1))
        start = max(start, hi + 1)
    return (*out, (start, MAX_CODE)) if start <= MAX_CODE else tuple(out)


@record(slots=True)
class Assert:
    kind: str  # "^" start of text, "$" end of text (no multiline in std::regex's default), "b", "B"


@record(slots=True)
class BackRef:
    index: int


@record(slots=True)
class Group:
    body: Node
    index: int  # 0: (?:...), which captures nothing


@record(slots=True)
class Look:
    body: Node
    negated: bool


@record(slots=True)
class Repeat:
    body: Node
    least: int
    most: int | None  # None: unbounded
    greedy: bool
    groups: tuple[int, int]  # the capture groups inside the body, [first, end): reset at each iteration


@record(slots=True)
class Seq:
    items: tuple[Node, ...]


@record(slots=True)
class Alt:
    options: tuple[Node, ...]


Node = CharSet | Assert | BackRef | Group | Look | Repeat | Seq | Alt


@record(slots=True)
class Parsed:
    root: Node
    n_groups: int
    has_backref: bool
    has_look: bool


# C locale, as std::regex<char> classifies: \d \w \s and [[:name:]] are ASCII only.
DIGIT = ((48, 57),)
WORD = ((48, 57), (65, 90), (95, 95), (97, 122))
SPACE = ((9, 13), (32, 32))
_ALPHA = ((65, 90), (97, 122))
_POSIX = {"alnum": ((48, 57), *_ALPHA), "alpha": _ALPHA, "blank": ((9, 9), (32, 32)), "cntrl": ((0, 31), (127, 127)),
          "digit": DIGIT, "d": DIGIT, "graph": ((33, 126),), "lower": ((97, 122),), "print": ((32, 126),),
          "punct": ((33, 47), (58, 64), (91, 96), (123, 126)), "space": SPACE, "s": SPACE, "upper": ((65, 90),),
          "w": WORD, "xdigit": ((48, 57), (65, 70), (97, 102))}
_CLASS_ESCAPES = {"d": charset(DIGIT), "D": charset(DIGIT, True), "w": charset(WORD), "W": charset(WORD, True),
                  "s": charset(SPACE), "S": charset(SPACE, True)}
_CONTROL = {"0": 0, "f": 12, "n": 10, "r": 13, "t": 9, "v": 11}
DOT = charset(((10, 10), (13, 13)), True)  # std::regex<char>: any character but \n and \r
_COUNT = re.compile(r"\{([0-9]+)(,([0-9]*))?\}")
_DIGITS = frozenset("0123456789")
_HEX = frozenset("0123456789abcdefABCDEF")
_QUANTIFIERS = ("*", "+", "?", "{")
_GROUP_HINTS = {"P": "named groups (?P...) are Python syntax", "(": "conditional groups (?(...)...) are Python syntax",
                ">": "atomic groups (?>...) are not ECMAScript", "#": "comments (?#...) are not ECMAScript",
                "<": "lookbehind (?<=...) (?<!...) and named groups (?<name>...) are not in std::regex's ECMAScript"}


def parse(pattern: str) -> Parsed:
    """The syntax tree of `pattern`; BadInput for anything std::regex's ECMAScript grammar refuses."""
    p = _Parser(pattern)
    root = p.disjunction()
    if p.i < len(pattern):  # only an unmatched ')' stops the top level early
        p.fail("')' without a matching '('")
    return Parsed(root, p.groups, p.has_backref, p.has_look)


class _Parser:
    def __init__(self, pattern: str) -> None:
        self.p, self.i, self.groups = pattern, 0, 0
        self.open: list[int] = []  # capture groups not yet closed: a back-reference to one is refused
        self.depth = 0
        self.has_backref = self.has_look = False

    def fail(self, what: str, at: int | None = None) -> NoReturn:
        where = self.i if at is None else at
        raise BadInput(f"-ot pattern '{printable(self.p)}' is not std::regex ECMAScript syntax: {what} "
                       f"(at position {where})")

    def peek(self, ahead: int = 0) -> str:
        j = self.i + ahead
        return self.p[j] if j < len(self.p) else ""

    def disjunction(self) -> Node:
        options = [self.alternative()]
        while self.peek() == "|":
            self.i += 1
            options.append(self.alternative())
        return options[0] if len(options) == 1 else Alt(tuple(options))

    def alternative(self) -> Node:
        items: list[Node] = []
        while self.peek() not in ("", "|", ")"):
            items.append(self.term())
        return items[0] if len(items) == 1 else Seq(tuple(items))

    def term(self) -> Node:
        first_group = self.groups + 1
        atom = self.atom()
        if isinstance(atom, Assert | Look):
            if self.peek() in _QUANTIFIERS:
                self.fail(f"nothing to repeat: '{self.peek()}' after an assertion")
            return atom
        at = self.i
        bounds = self.quantifier()
        if bounds is None:
            return atom
        greedy = self.peek() != "?"
        self.i += not greedy
        if self.peek() in _QUANTIFIERS:
            self.fail(f"'{self.p[at:self.i + 1]}': a quantifier after a quantifier (possessive or doubled) "
                      "is not ECMAScript")
        return Repeat(atom, bounds[0], bounds[1], greedy, (first_group, self.groups + 1))

    def quantifier(self) -> tuple[int, int | None] | None:
        c = self.peek()
        if c in ("*", "+", "?"):
            self.i += 1
            return {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
        if c != "{":
            return None
        m = _COUNT.match(self.p, self.i)
        if m is None:
            self.fail("'{' opens no count such as {2}, {2,} or {2,5}")
        least = int(m[1])
        most = least if m[2] is None else int(m[3]) if m[3] else None
        if most is not None and most < least:
            self.fail(f"the count {m[0]} has its minimum above its maximum")
        self.i = m.end()
        return least, most

    def atom(self) -> Node:
        c = self.peek()
        if c in _QUANTIFIERS:
            self.fail(f"nothing to repeat before '{c}'")
        self.i += 1
        if c in ("^", "$"):
            return Assert(c)
        if c == ".":
            return DOT
        if c == "(":
            return self.group()
        if c == "[":
            return self.bracket()
        if c == "\\":
            got = self.escape(in_class=False)
            return charset(((got, got),)) if isinstance(got, int) else got
        return charset(((ord(c), ord(c)),))

    def group(self) -> Node:
        start = self.i - 1
        if self.peek() != "?":
            self.groups += 1
            self.open.append(self.groups)
            body = self.closed(start)
            return Group(body, self.open.pop())
        kind = self.peek(1)
        self.i += 2
        if kind == ":":
            return Group(self.closed(start), 0)
        if kind in ("=", "!"):
            self.has_look = True
            return Look(self.closed(start), kind == "!")
        if kind in _GROUP_HINTS:
            self.fail(_GROUP_HINTS[kind], start)
        if kind.isalpha() or kind == "-":
            self.fail("inline flags such as (?i) are not ECMAScript", start)
        self.fail(f"'(?{kind}' opens no ECMAScript group", start)

    def closed(self, start: int) -> Node:
        """The disjunction up to the ')' that closes the group opened at `start`."""
        self.depth += 1
        if self.depth > MAX_NESTING:
            self.fail(f"groups nested more than {MAX_NESTING} deep", start)
        body = self.disjunction()
        if self.peek() != ")":
            self.fail("'(' without a matching ')'", start)
        self.i += 1
        self.depth -= 1
        return body

    def escape(self, in_class: bool) -> int | CharSet | Assert | BackRef:
        """After a backslash: a code point, a class (\\d), an assertion (\\b) or a back-reference."""
        start, c = self.i - 1, self.peek()
        if c == "":
            self.fail("a backslash at the end", start)
        self.i += 1
        if c == "b":
            return 8 if in_class else Assert("b")  # [\b] is a backspace, as in ECMAScript
        if c in _CLASS_ESCAPES:
            return _CLASS_ESCAPES[c]
        if c in _CONTROL:
            return _CONTROL[c]
        if c in ("x", "u"):
            digits = self.p[self.i:self.i + (2 if c == "x" else 4)]
            if len(digits) < (2 if c == "x" else 4) or not set(digits) <= _HEX:
                self.fail(f"\\{c} takes {'two' if c == 'x' else 'four'} hex digits", start)
            self.i += len(digits)
            return int(digits, 16)
        if c in "123456789":
            return self.backref(start)
        if c == "B":
            return Assert("B")
        if c == "c":
            self.fail("\\cX is a control character in ECMAScript but the letter X in std::regex: write \\xHH", start)
        if c.isascii() and c.isalnum():
            hint = ": anchors are ^ and $" if c in "AZzG" else ""
            self.fail(f"'\\{c}' is not an ECMAScript escape (std::regex would read a plain '{c}'){hint}", start)
        return ord(c)  # an identity escape: \. \\ \- \/ ...

    def backref(self, start: int) -> BackRef:
        while self.peek() in _DIGITS:  # std::regex reads every digit: \10 is group 10
            self.i += 1
        n = int(self.p[start + 1:self.i])
        if n > self.groups:
            self.fail(f"\\{n} refers to group {n}, but the pattern opens {self.groups} before it", start)
        if n in self.open:
            self.fail(f"\\{n} refers to group {n} from inside it", start)
        self.has_backref = True
        return BackRef(n)

    def bracket(self) -> CharSet:
        start = self.i - 1
        negated = self.peek() == "^"
        self.i += negated
        ranges: list[tuple[int, int]] = []
        while self.peek() != "]":
            if self.peek() == "":
                self.fail("'[' without a matching ']'", start)
            at, lo = self.i, self.class_atom()
            if self.peek() == "-" and self.peek(1) not in ("]", ""):
                self.i += 1
                hi = self.class_atom()
                if not isinstance(lo, int) or not isinstance(hi, int):
                    self.fail("a class such as \\d cannot bound a range", at)
                if lo > hi:
                    self.fail(f"the range {self.p[at:self.i]} is out of order", at)
                ranges.append((lo, hi))
            else:
                ranges.extend([(lo, lo)] if isinstance(lo, int) else lo)
        self.i += 1
        return charset(ranges, negated)

    def class_atom(self) -> int | tuple[tuple[int, int], ...]:
        """One member of a bracket: a code point, or a class's ranges (complemented for \\D \\W \\S)."""
        c, at = self.peek(), self.i
        if c == "[" and self.peek(1) in (":", ".", "="):
            return self.posix_class()
        self.i += 1
        if c != "\\":
            return ord(c)
        got = self.escape(in_class=True)
        if isinstance(got, Assert | BackRef):
            self.fail("an assertion or back-reference inside [...]", at)
        return got if isinstance(got, int) else complement(got.ranges) if got.negated else got.ranges

    def posix_class(self) -> tuple[tuple[int, int], ...]:
        """[:name:] inside a bracket, a C++ addition to ECMAScript; std::regex reads the name in any case."""
        start, kind = self.i, self.peek(1)
        end = self.p.find(kind + "]", self.i + 2)
        if end < 0:
            self.fail(f"'[{kind}' without a matching '{kind}]'", start)
        name, self.i = self.p[self.i + 2:end], end + 2
        if kind != ":":
            self.fail(f"collating elements [{kind}...{kind}] are not ECMAScript", start)
        if name.lower() not in _POSIX:
            self.fail(f"unknown character class [:{name}:]", start)
        return _POSIX[name.lower()]
