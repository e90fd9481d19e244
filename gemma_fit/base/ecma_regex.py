"""Regular expressions as llama.cpp's `-ot PATTERN=BUFFER` matches them (C++ std::regex, ECMAScript
grammar, std::regex_search), with a bound on the time any pattern can take.

A pattern is parsed by gemma_fit.base.ecma_regex_parse and compiled into a small program of
instructions (counted repeats such as {2,5} written out, as std::regex does too). Whether a tensor
name holds a match is then decided by one of three engines:
- no back-reference, no lookahead: a lazy DFA, i.e. a Thompson NFA simulation (a set of program
  counters per position: polynomial by construction) whose transitions are cached, so the names of a
  model, which share their characters and shapes, cost a dictionary lookup per character once warm;
- lookaheads but no back-reference: the same NFA simulation, each lookahead decided once per position;
- back-references (not regular: no set simulation can decide them): a backtracking matcher that
  follows ECMAScript's order and capture rules, the only engine that can take exponential time.
Every engine counts its steps. One search may take STEP_BUDGET steps and one compiled pattern
`total_steps` over its life (the names of a model, when the caller compiles once per pattern); past
either, BadInput says the pattern is too costly instead of matching on for minutes.
"""

from __future__ import annotations

from dataclasses import field

from gemma_fit.base.ecma_regex_parse import (
    WORD,
    Alt,
    Assert,
    BackRef,
    CharSet,
    Group,
    Look,
    Node,
    Repeat,
    Seq,
    charset,
    parse,
)
from gemma_fit.base.errors import BadInput
from gemma_fit.base.record import record
from gemma_fit.base.text import printable

STEP_BUDGET = 200_000  # steps for one name: some 0.05 s; a realistic pattern takes a few hundred
TOTAL_BUDGET = 4_000_000  # one model's patterns over its names: ~2 s (31 per-layer patterns take 0.53M)
MAX_PROGRAM = 5_000  # instructions once {m,n} are written out (std::regex stops at 100,000 NFA states)
_DFA_CACHE_LIMIT = 20_000  # cached transitions; past it the cache starts again (memory, not time)

# Opcodes. An instruction is (opcode, a, b); pc + 1 is the next one unless said otherwise.
CHAR, SPLIT, JMP, ASSERT, SAVE, RESET, MARK, CHECK, BACKREF, LOOK, MATCH = range(11)
# CHAR a: one character in sets[a]; SPLIT a b: try a, then b; JMP a; ASSERT a: one of _ASSERTS;
# SAVE a: slot a = position (a capture's start or end); RESET a b: slots a..b-1 undefined (a repeat's
# captures, at each iteration); MARK a / CHECK a: register a = position / fail if nothing was consumed
# since (ECMAScript's rule against empty iterations); BACKREF a: group a's text again; LOOK a b: the
# lookahead body from pc + 1 (ending in MATCH) must match (a = 0) or not (a = 1), then go on at b.
_ASSERTS = {"^": 0, "$": 1, "b": 2, "B": 3}
_WORD_CHARS = charset(WORD).ascii
_START, _WORD, _OTHER = 0, 1, 2  # what precedes a position, all that ^ and \b need to know

Instr = tuple[int, int, int]
DfaKey = tuple[frozenset[int], int, str]


class _TooCostly(Exception):
    pass


class _Meter:
    __slots__ = ("left",)

    def __init__(self, steps: int) -> None:
        self.left = steps

    def spend(self, steps: int) -> None:
        self.left -= steps
        if self.left < 0:
            raise _TooCostly


def compile_ecma(pattern: str, max_chars: int = 1000, total_steps: int = TOTAL_BUDGET, shared: list[int] | None = None,
                 ) -> EcmaRegex:
    """`pattern` compiled as std::regex's ECMAScript grammar reads it; BadInput, in one line, for a
    pattern it would refuse, one longer than `max_chars`, or one whose counted repeats write out to more
    than MAX_PROGRAM instructions."""
    if len(pattern) > max_chars:
        raise BadInput(f"-ot: a pattern of {len(pattern):,} characters (at most {max_chars:,})")
    parsed = parse(pattern)
    if _size(parsed.root) > MAX_PROGRAM:
        raise BadInput(f"-ot pattern '{printable(pattern)}' is too costly to match: its counted repeats write out "
                       f"to more than {MAX_PROGRAM:,} instructions; use smaller counts")
    out = _Emitter(parsed.n_groups)
    out.emit(parsed.root)
    out.op(MATCH)
    engine = "backtrack" if parsed.has_backref else "nfa" if parsed.has_look else "dfa"
    code = tuple((op, a, b) for op, a, b in out.code)
    return EcmaRegex(pattern, _Program(code, tuple(out.sets), out.n_slots), engine, total_steps, shared)


@record
class EcmaRegex:
    """A compiled pattern. Immutable but for its transition cache and step count, which change how
    fast it answers, never what."""

    pattern: str
    program: _Program = field(repr=False, compare=False)
    engine: str  # "dfa", "nfa" or "backtrack"
    total_steps: int = field(repr=False, compare=False)
    shared: list[int] | None = field(default=None, repr=False, compare=False)  # one step count for many patterns
    _dfa: dict[DfaKey, tuple[bool, frozenset[int]]] = field(default_factory=dict, init=False, repr=False,
                                                             compare=False)
    _spent: list[int] = field(default_factory=lambda: [0], init=False, repr=False, compare=False)

    def search(self, text: str) -> bool:
        """Whether some substring of `text` matches, as std::regex_search decides (ECMAScript rules);
        BadInput when deciding takes more than the pattern's step budget."""
        budget = min(STEP_BUDGET, self.total_steps - (spent := self._spent if self.shared is None else self.shared)[0])
        meter = _Meter(budget)
        try:
            if self.engine == "dfa":
                return self.program.dfa_search(text, meter, self._dfa)
            if self.engine == "nfa":
                return self.program.run(0, text, 0, False, meter, {})
            return self.program.backtrack_search(text, meter)
        except _TooCostly:
            raise BadInput(self._too_costly(text, budget)) from None
        finally:
            spent[0] += budget - max(meter.left, 0)

    def _too_costly(self, text: str, budget: int) -> str:
        where = (f"more than {STEP_BUDGET:,} steps on the name '{printable(text, 80)}'" if budget == STEP_BUDGET
                 else f"more than {self.total_steps:,} steps over this model's names"
                 + (" with the other -ot patterns" if self.shared is not None else ""))
        return (f"-ot pattern '{printable(self.pattern)}' is too costly to match: {where}; write it with fewer "
                "nested repeats or back-references")


def _size(node: Node) -> int:
    """How many instructions `node` compiles to (an upper bound), before writing any out."""
    match node:
        case Seq(items):
            return sum(map(_size, items))
        case Alt(options):
            return sum(map(_size, options)) + 2 * len(options)
        case Group(body) | Look(body):
            return _size(body) + 2
        case Repeat(body, least, most):
            one = _size(body) + 3
            return least * one + (one + 2 if most is None else (most - least) * (one + 1))
    return 1


class _Emitter:
    """Writes the program of a syntax tree, capture slots first, then one register per repeat."""

    def __init__(self, n_groups: int) -> None:
        self.code: list[list[int]] = []
        self.sets: list[CharSet] = []
        self.set_ids: dict[CharSet, int] = {}
        self.n_slots = 2 * (n_groups + 1)

    def op(self, opcode: int, a: int = 0, b: int = 0) -> int:
        self.code.append([opcode, a, b])
        return len(self.code) - 1

    def emit(self, node: Node) -> None:
        match node:
            case CharSet():
                if node not in self.set_ids:  # one entry per distinct set
                    self.set_ids[node] = len(self.sets)
                    self.sets.append(node)
                self.op(CHAR, self.set_ids[node])
            case Assert(kind):
                self.op(ASSERT, _ASSERTS[kind])
            case BackRef(index):
                self.op(BACKREF, index)
            case Group(body, index):
                self.captured(body, index)
            case Look(body, negated):
                at = self.op(LOOK, int(negated))
                self.emit(body)
                self.op(MATCH)
                self.code[at][2] = len(self.code)
            case Seq(items):
                for item in items:
                    self.emit(item)
            case Alt(options):
                self.alternation(options)
            case Repeat():
                self.repeat(node)

    def captured(self, body: Node, index: int) -> None:
        if index:
            self.op(SAVE, 2 * index)
        self.emit(body)
        if index:
            self.op(SAVE, 2 * index + 1)

    def alternation(self, options: tuple[Node, ...]) -> None:
        jumps = []
        for option in options[:-1]:
            split = self.op(SPLIT, len(self.code) + 1)
            self.emit(option)
            jumps.append(self.op(JMP))
            self.code[split][2] = len(self.code)
        self.emit(options[-1])
        for at in jumps:
            self.code[at][1] = len(self.code)

    def repeat(self, node: Repeat) -> None:
        """The mandatory iterations written out, then a loop or the optional ones, each of which may
        stop the repeat (ECMAScript's RepeatMatcher, unrolled)."""
        register = self.n_slots
        self.n_slots += 1
        for _ in range(node.least):
            self.iteration(node, None)
        splits = []
        for _ in range(1 if node.most is None else node.most - node.least):
            splits.append(self.op(SPLIT))
            self.iteration(node, register)
        if node.most is None:
            self.op(JMP, splits[0])
        for at in splits:
            body, leave = at + 1, len(self.code)
            self.code[at][1:] = [body, leave] if node.greedy else [leave, body]

    def iteration(self, node: Repeat, register: int | None) -> None:
        """One pass of a repeat's body: its captures start undefined, and an optional pass that
        consumes nothing fails, as ECMAScript specifies."""
        first, end = node.groups
        if end > first:
            self.op(RESET, 2 * first, 2 * end)
        if register is not None:
            self.op(MARK, register)
        self.emit(node.body)
        if register is not None:
            self.op(CHECK, register)


def _holds(kind: int, text: str, pos: int) -> bool:
    if kind == 0:
        return pos == 0
    if kind == 1:
        return pos == len(text)
    before = pos > 0 and text[pos - 1] in _WORD_CHARS
    after = pos < len(text) and text[pos] in _WORD_CHARS
    return (before != after) == (kind == 2)


@record
class _Program:
    code: tuple[Instr, ...]
    sets: tuple[CharSet, ...]
    n_slots: int

    def closure(self, kernel: set[int] | frozenset[int], text: str, pos: int, meter: _Meter,
                looks: dict[tuple[int, int], bool]) -> tuple[list[int], bool]:
        """The CHAR instructions reachable from `kernel` at `pos` without consuming a character, and
        whether MATCH is. Captures, resets and empty-iteration checks are skipped: without
        back-references they cannot change whether some match exists."""
        seen: set[int] = set()
        todo, chars = list(kernel), []
        while todo:
            pc = todo.pop()
            if pc in seen:
                continue
            seen.add(pc)
            op, a, b = self.code[pc]
            if op == CHAR:
                chars.append(pc)
            elif op == SPLIT:
                todo += (b, a)
            elif op == JMP:
                todo.append(a)
            elif op == MATCH:
                meter.spend(len(seen))
                return chars, True
            elif op == ASSERT:
                todo += [pc + 1] if _holds(a, text, pos) else []
            elif op == LOOK:
                todo += [b] if self.look(pc, text, pos, meter, looks) != bool(a) else []
            else:
                todo.append(pc + 1)
        meter.spend(len(seen))
        return chars, False

    def advance(self, chars: list[int], ch: str, meter: _Meter) -> set[int]:
        """The program counters after `ch`, from the CHAR instructions that accept it."""
        meter.spend(len(chars))
        return {pc + 1 for pc in chars if self.sets[self.code[pc][1]].has(ch)}

    def run(self, start: int, text: str, pos: int, anchored: bool, meter: _Meter,
            looks: dict[tuple[int, int], bool]) -> bool:
        """NFA simulation from `start` at `pos`: at `pos` only when anchored (a lookahead), else at
        every position from there on (a search)."""
        current: set[int] = {start}
        for at in range(pos, len(text) + 1):
            if not anchored:
                current.add(start)
            chars, matched = self.closure(current, text, at, meter, looks)
            if matched:
                return True
            if at == len(text):
                break
            current = self.advance(chars, text[at], meter)
            if anchored and not current:
                break
        return False

    def look(self, pc: int, text: str, pos: int, meter: _Meter, looks: dict[tuple[int, int], bool]) -> bool:
        """Whether the lookahead at `pc` matches at `pos`; once per search (it depends on nothing else)."""
        if (pc, pos) not in looks:
            looks[pc, pos] = self.run(pc + 1, text, pos, True, meter, looks)
        return looks[pc, pos]

    def dfa_search(self, text: str, meter: _Meter, cache: dict[DfaKey, tuple[bool, frozenset[int]]]) -> bool:
        """The NFA simulation of `run` with each step cached: without lookaheads a step depends only on
        the program counters, what precedes (start, word or other character) and the next character."""
        meter.spend(len(text) + 1)  # a cached step is a lookup per character: cheap, but not free
        state, before = frozenset((0,)), _START
        for at in range(len(text) + 1):
            ch = text[at] if at < len(text) else ""
            step = cache.get((state, before, ch))
            if step is None:
                if len(cache) >= _DFA_CACHE_LIMIT:
                    cache.clear()
                chars, matched = self.closure(state, text, at, meter, {})
                after = frozenset((0, *self.advance(chars, ch, meter))) if ch and not matched else state
                step = cache[state, before, ch] = (matched, after)
            if step[0]:
                return True
            state, before = step[1], _WORD if ch in _WORD_CHARS else _OTHER
        return False

    def backtrack_search(self, text: str, meter: _Meter) -> bool:
        slots = [-1] * self.n_slots
        trail: list[tuple[int, int]] = []
        return any(self.backtrack(0, text, start, slots, trail, meter) for start in range(len(text) + 1))

    def backtrack(self, pc: int, text: str, pos: int, slots: list[int], trail: list[tuple[int, int]],
                  meter: _Meter) -> bool:
        """Whether the program from `pc` matches at `pos`, alternatives tried in ECMAScript's order. On
        success `slots` hold the first match's captures, their old values on `trail` for the caller to
        undo; on failure `slots` are as they were."""
        base, choices = len(trail), []
        while True:
            meter.spend(1)
            op, a, b = self.code[pc]
            pc += 1
            ok = True
            if op == CHAR:
                ok = pos < len(text) and self.sets[a].has(text[pos])
                pos += 1
            elif op == SPLIT:
                choices.append((b, pos, len(trail)))
                pc = a
            elif op == JMP:
                pc = a
            elif op == ASSERT:
                ok = _holds(a, text, pos)
            elif op in (SAVE, MARK):
                trail.append((a, slots[a]))
                slots[a] = pos
            elif op == RESET:
                meter.spend(b - a)
                trail += [(s, slots[s]) for s in range(a, b) if slots[s] != -1]
                slots[a:b] = [-1] * (b - a)
            elif op == CHECK:
                ok = slots[a] != pos
            elif op == BACKREF:
                ok, pos = self.backref(a, text, pos, slots, meter)
            elif op == LOOK:
                ok, pc = self.lookahead(bool(a), pc, text, pos, slots, trail, meter), b
            else:  # MATCH
                return True
            if not ok:
                if not choices:
                    _undo(slots, trail, base)
                    return False
                pc, pos, mark = choices.pop()
                _undo(slots, trail, mark)

    def backref(self, group: int, text: str, pos: int, slots: list[int], meter: _Meter) -> tuple[bool, int]:
        """Group `group`'s text again at `pos`; an undefined group matches the empty string (ECMAScript)."""
        start, end = slots[2 * group], slots[2 * group + 1]
        if start < 0 or end < 0:
            return True, pos
        meter.spend(end - start)
        return text.startswith(text[start:end], pos), pos + end - start

    def lookahead(self, negated: bool, pc: int, text: str, pos: int, slots: list[int],
                  trail: list[tuple[int, int]], meter: _Meter) -> bool:
        """A lookahead is atomic: its first match is kept, never backtracked into; a negative one keeps
        no capture."""
        mark = len(trail)
        found = self.backtrack(pc, text, pos, slots, trail, meter)
        if negated:
            _undo(slots, trail, mark)
        return found != negated


def _undo(slots: list[int], trail: list[tuple[int, int]], mark: int) -> None:
    while len(trail) > mark:
        slot, value = trail.pop()
        slots[slot] = value
