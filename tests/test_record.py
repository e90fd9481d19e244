"""`record` behaves as `dataclass(frozen=True)` wherever the package relies on it."""

from __future__ import annotations

import dataclasses
import pickle
from dataclasses import field
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gemma_fit.base.record import record


@record
class Point:
    x: int
    y: int = 2
    tags: tuple[str, ...] = field(default_factory=tuple)
    note: str = field(default="", compare=False, repr=False)


@record(slots=True)
class Slotted:
    a: int
    b: float = 0.5


@record
class CachedHash:
    n: int

    def __hash__(self) -> int:  # the body's own: a record must keep it
        return 7


@record
class KwOnly:
    a: int
    b: int = field(default=0, kw_only=True)
    c: list[int] = field(default_factory=list, init=False)


@record
class Checked:
    v: int

    def __post_init__(self) -> None:
        if self.v < 0:
            raise ValueError("negative")


@dataclasses.dataclass(frozen=True)
class DataPoint:
    x: int
    y: int = 2
    tags: tuple[str, ...] = field(default_factory=tuple)
    note: str = field(default="", compare=False, repr=False)


def test_fields_defaults_and_repr_as_dataclasses_gives_them() -> None:
    p = Point(1)
    assert (p.x, p.y, p.tags, p.note) == (1, 2, (), "")
    assert repr(p) == "Point(x=1, y=2, tags=())"
    assert [f.name for f in dataclasses.fields(p)] == ["x", "y", "tags", "note"]
    assert dataclasses.asdict(p) == {"x": 1, "y": 2, "tags": (), "note": ""}
    assert Point.__match_args__ == ("x", "y", "tags", "note")


def test_frozen() -> None:
    p = Point(1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.x = 3  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del p.x  # type: ignore[misc]
    s = Slotted(1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.a = 2  # type: ignore[misc]
    assert not hasattr(s, "__dict__")


def test_replace_and_pickle() -> None:
    p = dataclasses.replace(Point(1, tags=("a",)), y=5)
    assert p == Point(1, 5, ("a",))
    assert pickle.loads(pickle.dumps(p)) == p
    s = Slotted(3, 1.5)
    assert pickle.loads(pickle.dumps(s)) == s
    assert dataclasses.replace(s, a=4) == Slotted(4, 1.5)


def test_a_hash_of_the_body_is_kept() -> None:
    assert hash(CachedHash(1)) == hash(CachedHash(2)) == 7
    assert CachedHash(1) != CachedHash(2)


def test_kw_only_init_false_and_post_init() -> None:
    k = KwOnly(1, b=2)
    assert (k.a, k.b, k.c) == (1, 2, [])
    assert KwOnly(1).c is not KwOnly(1).c  # a fresh default each time
    with pytest.raises(TypeError):
        KwOnly(1, 2)  # type: ignore[misc]
    with pytest.raises(ValueError, match="negative"):
        Checked(-1)


def test_other_classes_do_not_compare_equal() -> None:
    assert Point(1) != DataPoint(1)
    assert Point(1).__eq__(DataPoint(1)) is NotImplemented


@given(st.integers(), st.integers(), st.lists(st.text(max_size=3), max_size=3), st.text(max_size=3),
       st.integers(), st.integers(), st.text(max_size=3))
def test_equality_and_hash_follow_dataclasses(x: int, y: int, tags: list[str], note: str, x2: int, y2: int,
                                              note2: str) -> None:
    a, b = Point(x, y, tuple(tags), note), Point(x2, y2, tuple(tags), note2)
    da, db = DataPoint(x, y, tuple(tags), note), DataPoint(x2, y2, tuple(tags), note2)
    assert (a == b) == (da == db)
    assert repr(a) == repr(da).replace("DataPoint", "Point")
    if a == b:
        assert hash(a) == hash(b)


def test_generated_code_is_kept_between_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """base.code_cache: a run that compiles new code writes it at exit; the next run reads it instead of compiling,
    and a cache file that is not marshal data is ignored."""
    from gemma_fit.base import code_cache

    monkeypatch.setenv("GEMMA_FIT_CACHE", str(tmp_path))
    for name, value in (("_codes", None), ("_added", False), ("_used", set())):
        monkeypatch.setattr(code_cache, name, value)
    source = "def f(x):\n  return x + 1\n"
    first = code_cache.compiled(source, "<test f>")
    code_cache._write()
    monkeypatch.setattr(code_cache, "_codes", None)
    monkeypatch.setattr(code_cache, "_added", False)
    second = code_cache.compiled(source, "<test f>")
    assert second == first and not code_cache._added  # read back, not compiled again
    namespace: dict[str, object] = {}
    exec(second, {}, namespace)  # noqa: S102
    assert namespace["f"](1) == 2  # type: ignore[operator]
    Path(code_cache._path()).write_bytes(b"not marshal data")
    monkeypatch.setattr(code_cache, "_codes", None)
    assert code_cache.compiled(source, "<test f>") == first  # compiled again, no error
