"""gemma_fit.base.ecma_regex: llama.cpp's -ot patterns read as std::regex reads them (ECMAScript grammar),
searched with ECMAScript's rules, in bounded time. Expected answers were checked against ECMAScript
(a JavaScript engine) and, for syntax, libstdc++'s std::regex. No test measures time: the bound is a
count of steps, the same on every machine."""

from __future__ import annotations

import contextlib
import dataclasses
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gemma_fit.base import ecma_regex
from gemma_fit.base.ecma_regex import STEP_BUDGET, compile_ecma
from gemma_fit.base.ecma_regex_parse import MAX_NESTING
from gemma_fit.base.errors import BadInput

KINDS = ("attn_q", "attn_k", "attn_v", "attn_output", "attn_norm", "attn_q_norm", "ffn_up_exps", "ffn_down_exps",
         "ffn_gate_up_exps", "ffn_gate_inp", "ffn_up_shexp", "ffn_down", "ffn_gate", "ffn_up", "ffn_norm",
         "post_attention_norm", "layer_output_scale")
NAMES = (*(f"blk.{i}.{k}.weight" for i in range(62) for k in KINDS), "token_embd.weight", "output_norm.weight",
         "rope_freqs.weight", "blk.3.ffn_down_chexps.weight")
EXPERTS = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"  # llama.cpp's --cpu-moe


def search(pattern: str, text: str) -> bool:
    return compile_ecma(pattern).search(text)


# --- syntax -------------------------------------------------------------------------------------------------

ACCEPTED = [
    EXPERTS, r"blk\.(1[0-9]|2[0-9])\.ffn_.*_exps", r"blk\.[0-9]*[02468]\.", "^token_embd", r"exps\.weight$",
    "", "a|", "|", "(|a)", "()", "(?:)", "(?:a|b)+?", "(?=a)b", "(?!a)b", "(up|down)+", "a{2}", "a{2,}", "a{2,5}?",
    r"\t\n\r\f\v\0", r"\x41\u0041", r"[\b]", r"\bblk\B", r"[\d\w\s\D\W\S]", r"[^a-z_.]", "[]", "[^]", "a]}",
    "[[:digit:]]+", "[[:alpha:][:w:]]", r"[a-]", r"[-a]", r"[a-z-0]", r"(a)(b)\2\1", r"\.\\\-\/\_", "(a)" * 10 + r"\10",
]

REFUSED = [  # pattern, what the message says
    ("(x)?(?(1)|(.+)+#)", "conditional groups"),
    ("(?P<n>a)", "named groups (?P"),
    ("(?<n>a)", "named groups"),
    ("(?i)blk", "inline flags"),
    ("(?-i:a)", "inline flags"),
    ("(?>a+)", "atomic groups"),
    ("(?#note)", "comments"),
    ("a*+", "quantifier after a quantifier"),
    ("a++", "quantifier after a quantifier"),
    ("a{2}+", "quantifier after a quantifier"),
    ("a**", "quantifier after a quantifier"),
    ("(?<=a)b", "lookbehind"),
    ("(?<!a)b", "lookbehind"),
    (r"\Ablk", "anchors are ^ and $"),
    (r"weight\Z", "anchors are ^ and $"),
    (r"weight\z", "anchors are ^ and $"),
    (r"\p{L}", "not an ECMAScript escape"),
    (r"\cJ", "control character"),
    ("(blk", "'(' without a matching ')'"),
    ("blk)", "')' without a matching '('"),
    ("[abc", "'[' without a matching ']'"),
    ("*a", "nothing to repeat"),
    ("a|*", "nothing to repeat"),
    ("^*", "after an assertion"),
    (r"\b+", "after an assertion"),
    ("(?=a)*", "after an assertion"),
    ("a{3,2}", "minimum above its maximum"),
    ("a{,2}", "opens no count"),
    ("a{x}", "opens no count"),
    ("{2}", "nothing to repeat"),
    (r"(a)\2", "refers to group 2"),
    (r"\1(a)", "refers to group 1"),
    (r"(a\1)", "from inside it"),
    (r"(a)[\1]", "inside [...]"),
    (r"[\B]", "inside [...]"),
    ("[z-a]", "out of order"),
    (r"[\d-z]", "cannot bound a range"),
    (r"[a-\w]", "cannot bound a range"),
    ("[[:foo:]]", "unknown character class"),
    ("[[.a.]]", "collating"),
    (r"\x4", "two hex digits"),
    (r"\u12", "four hex digits"),
    ("blk\\", "backslash at the end"),
    ("(?", "opens no ECMAScript group"),
    ("(" * (MAX_NESTING + 1) + ")" * (MAX_NESTING + 1), "nested more than"),
    ("a{1000}{1000}", "quantifier after a quantifier"),
    ("(a{100}){100}", "too costly"),
    ("x{99999}", "too costly"),
]


@pytest.mark.parametrize("pattern", ACCEPTED)
def test_accepts_what_std_regex_accepts(pattern: str) -> None:
    assert compile_ecma(pattern).pattern == pattern


@pytest.mark.parametrize(("pattern", "problem"), REFUSED)
def test_refuses_what_std_regex_refuses_or_is_not_ecmascript(pattern: str, problem: str) -> None:
    with pytest.raises(BadInput, match=re.escape(problem)) as err:
        compile_ecma(pattern)
    assert "\n" not in str(err.value)


def test_a_refusal_is_one_safe_line_with_the_position() -> None:
    with pytest.raises(BadInput) as err:
        compile_ecma("\x1b]52;c;\x07\n(blk")
    message = str(err.value)
    assert "\x1b" not in message and "\x07" not in message and "\n" not in message
    assert "\\x1b]52;c;\\x07\\x0a(blk" in message and "(at position 9)" in message


def test_patterns_longer_than_max_chars_are_refused() -> None:
    compile_ecma("a" * 1000)
    with pytest.raises(BadInput, match="1,001 characters"):
        compile_ecma("a" * 1001)
    with pytest.raises(BadInput, match="at most 10"):
        compile_ecma("a" * 11, max_chars=10)


def test_the_attacker_patterns_are_refused_or_answered_over_a_model() -> None:
    with pytest.raises(BadInput, match="conditional groups"):
        compile_ecma("(x)?(?(1)|(.+)+#)=CPU".partition("=")[0])
    r = compile_ecma(r"_(up|down)+", total_steps=2_000_000)  # refused by the old guard: fine now
    assert [r.search(n) for n in NAMES] == [re.search(r"_(up|down)+", n) is not None for n in NAMES]


# --- matching -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("argument", "hits", "misses"), [
    (f"{EXPERTS}=CPU", {"blk.0.ffn_up_exps.weight", "blk.61.ffn_gate_up_exps.weight", "blk.3.ffn_down_chexps.weight"},
     {"blk.0.ffn_up_shexp.weight", "blk.0.ffn_up.weight", "blk.0.ffn_gate_inp.weight"}),
    (r"blk\.(1[0-9]|2[0-9])\.ffn_.*_exps=CPU", {"blk.12.ffn_up_exps.weight", "blk.29.ffn_gate_up_exps.weight"},
     {"blk.3.ffn_up_exps.weight", "blk.30.ffn_up_exps.weight", "blk.112.ffn_up_exps.weight", "blk.12.ffn_up.weight"}),
    (r"blk\.[0-9]*[02468]\.=CUDA0", {"blk.0.attn_q.weight", "blk.58.ffn_up.weight"},
     {"blk.1.attn_q.weight", "blk.57.ffn_up.weight", "token_embd.weight"}),
    ("^token_embd=CPU", {"token_embd.weight"}, {"blk.0.token_embd.weight", "output.weight"}),
    (r"exps\.weight$=CPU", {"blk.7.ffn_down_exps.weight", "blk.3.ffn_down_chexps.weight"},
     {"blk.7.ffn_down_exps.weight.1", "blk.7.ffn_up_shexp.weight"}),
])
def test_real_llama_cpp_patterns(argument: str, hits: set[str], misses: set[str]) -> None:
    pattern = argument.partition("=")[0]  # llama.cpp splits -ot at the first '='
    r = compile_ecma(pattern)
    assert all(r.search(n) for n in hits) and not any(r.search(n) for n in misses)
    found = [r.search(n) for n in NAMES]
    assert found == [re.search(pattern, n, re.ASCII) is not None for n in NAMES]  # Python's re agrees on these


SEMANTICS = [  # pattern, text, what ECMAScript (and a JavaScript engine) answers
    (r"(a)|b\1", "b", True),  # a group that did not take part matches the empty string
    (r"(a)?\1b", "b", True),
    (r"(?:(a)|b)+\1", "ab", True),  # captures restart at each iteration: Python says False
    (r"((a)|b)+\2$", "ab", True),
    (r"(?:(a)|b){2}\1c", "abc", True),
    (r"^(?:(?=(a)))*\1$", "a", False),  # an optional iteration that consumes nothing fails...
    (r"^(?:(?=(a))){1}\1$", "a", True),  # ...a mandatory one does not
    (r"(?=(a+))a*b\1", "baaabac", True),  # a lookahead's captures stay (ECMA-262's example)
    (r"(?!(a))\1b", "b", True),  # a negative lookahead's do not
    (r"(a)\1", "ab", False),
    (r"^(\w+)\.\1$", "blk.blk", True),
    (r"(\d)(?:x\1)*$", "1x1x2", True),
    ("a$", "a\n", False),  # $ is the end of the text only (Python's also matches before a final \n)
    ("a.b", "a\rb", False),
    ("a.b", "a\nb", False),
    ("a.b", "a\tb", True),
    (r"[\b]", "\b", True),
    (r"\bweight", "blk.0.weight", True),
    (r"\Bweight", "blk.0.weight", False),
    (r"\x41\u0042", "AB", True),
    ("[[:digit:]]+", "blk.12", True),
    (r"\d", "\u0663", False),  # std::regex<char> classifies in the C locale: ASCII only
    (r"\s", "\u00a0", False),
    (r"\w", "é", False),
    ("a|", "zzz", True),
    ("[]", "abc", False),
    ("[^]", "\n", True),
    ("a]}", "xa]}", True),
    ("x*?y", "xxy", True),
    ("a{2,3}", "a", False),
    ("a{2,}", "aaaa", True),
    ("a{0}b", "b", True),
    ("^$", "", True),
    (r"\b", "", False),
    (r"\B", "", True),
    ("", "", True),
]


@pytest.mark.parametrize(("pattern", "text", "expected"), SEMANTICS)
def test_ecmascript_semantics(pattern: str, text: str, expected: bool) -> None:
    assert search(pattern, text) is expected


@pytest.mark.parametrize(("pattern", "text", "expected"), [
    ("(a+)+$", "a" * 5000 + "b", False),
    ("(a|aa)*b", "a" * 5000, False),
    ("(x+x+)+y", "x" * 5000, False),
    ("(.*a){20}", "a" * 5000 + "b", True),
    ("(.*a){20}", "b" * 5000, False),
    (r"(.*)(.*)(.*)\1\2\3x", "a" * 100, None),  # None: too costly, BadInput
    (r"(.*)(.*)(.*)\1\2\3x", "aax", True),
    ("(?=a*b)a", "a" * 5000, None),
])
def test_pathological_patterns_answer_or_are_refused(pattern: str, text: str, expected: bool | None) -> None:
    if expected is None:
        with pytest.raises(BadInput, match=rf"too costly to match: more than {STEP_BUDGET:,} steps on the name"):
            search(pattern, text)
    else:
        assert search(pattern, text) is expected


def test_a_pattern_has_a_budget_over_all_its_names() -> None:
    r = compile_ecma(r"(.*)(.*)(.*)\1\2\3x", total_steps=100_000)
    with pytest.raises(BadInput, match=r"more than 100,000 steps over this model's names"):
        for name in NAMES:
            r.search(name)
    assert compile_ecma(r"blk\.(\d)\1\.", total_steps=300_000).search("blk.11.attn_q.weight")


def test_the_deepest_nesting_allowed_compiles_and_runs() -> None:
    half = MAX_NESTING // 2
    assert search("(?=" * MAX_NESTING + "a" + ")" * MAX_NESTING + "ab", "xab")
    assert search("(?:" * MAX_NESTING + "a" + ")*" * MAX_NESTING + "b", "aaab")
    assert search("(?=" * half + "(" * half + "a" + ")" * (2 * half) + r"a\1", "aa")


def test_engines_by_pattern_shape() -> None:
    assert compile_ecma(EXPERTS).engine == "dfa"
    assert compile_ecma(r"blk\.(?!1\.)\d+\.ffn").engine == "nfa"
    assert compile_ecma(r"blk\.(\d)\1").engine == "backtrack"


def test_the_dfa_cache_changes_speed_only(monkeypatch: pytest.MonkeyPatch) -> None:
    pattern = r"blk\.(1[0-9]|[02468])\.ffn_.*(_exps|gate)\b"
    expected = [compile_ecma(pattern).search(n) for n in NAMES]
    monkeypatch.setattr(ecma_regex, "_DFA_CACHE_LIMIT", 3)
    r = compile_ecma(pattern)
    assert [r.search(n) for n in NAMES] == expected == [r.search(n) for n in NAMES]
    assert len(r._dfa) <= 3


def test_a_compiled_pattern_is_immutable_and_compares_by_pattern() -> None:
    r = compile_ecma("blk")
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.pattern = "x"  # type: ignore[misc]
    assert r == compile_ecma("blk") and hash(r) == hash(compile_ecma("blk"))


# --- generated: the common subset of Python's re and ECMAScript agree --------------------------------------

_QUANT = st.sampled_from(["", "*", "+", "?", "*?", "+?", "??", "{2}", "{1,2}", "{0,}", "{2,3}?", "{0,1}"])
_ATOM = st.sampled_from([*"abefkpstuw_019", r"\.", ".", "[a-f]", "[^0-9]", "[._]", r"[\d_]", r"\d", r"\w", r"\W",
                         r"\D", r"\s", "[0-9a-z]", "[^.]", "blk", "exps"])
_LEAF = st.one_of(_ATOM, st.tuples(_ATOM, _QUANT).map("".join), st.sampled_from(["^", "$", r"\b", r"\B"]))


def _extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    many = st.lists(inner, min_size=2, max_size=3)
    return st.one_of(
        st.tuples(inner, _QUANT).map(lambda t: f"(?:{t[0]}){t[1]}"),
        st.tuples(inner, _QUANT).map(lambda t: f"({t[0]}){t[1]}"),
        many.map("".join),
        many.map(lambda xs: "(?:" + "|".join(xs) + ")"),
        inner.map(lambda x: f"(?={x})"),
        inner.map(lambda x: f"(?!{x})"),
    )


PATTERNS = st.recursive(_LEAF, _extend, max_leaves=7)
SHORT_NAMES = st.text(alphabet="abefkpstuw_.0123456789", max_size=12) | st.sampled_from(["blk.1.up", "exps.w", ""])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(PATTERNS, st.lists(SHORT_NAMES, min_size=1, max_size=4))
def test_agrees_with_python_re_on_the_common_subset(pattern: str, names: list[str]) -> None:
    r = compile_ecma(pattern)
    for name in names:  # short names: Python's re backtracks, and must finish too
        if not name and r"\B" in pattern:
            continue  # Python's \B never matches in an empty text (ECMAScript's and std::regex's do)
        assert r.search(name) == (re.search(pattern, name, re.ASCII) is not None), (pattern, name)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(PATTERNS, st.lists(st.sampled_from(NAMES) | SHORT_NAMES, min_size=1, max_size=4))
def test_the_three_engines_agree(pattern: str, names: list[str]) -> None:
    """Each engine on every pattern (the backtracker within its budget: it may take exponential time)."""
    program = compile_ecma(pattern).program
    for name in names:
        nfa = program.run(0, name, 0, False, ecma_regex._Meter(10**9), {})
        if "(?=" not in pattern and "(?!" not in pattern:
            assert program.dfa_search(name, ecma_regex._Meter(10**9), {}) == nfa, (pattern, name)
        with contextlib.suppress(ecma_regex._TooCostly):
            assert program.backtrack_search(name, ecma_regex._Meter(STEP_BUDGET)) == nfa, (pattern, name)
