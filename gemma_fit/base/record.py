"""`record`: a frozen dataclass that costs a tenth as much to define and less to create.

`dataclasses.dataclass(frozen=True)` compiles six functions per class from source (`__init__`, `__repr__`,
`__eq__`, `__hash__`, `__setattr__`, `__delattr__`): ~0.7 ms a class on Python 3.11, and a cold `check` defines
~80 of them before it computes anything, 40% of its CPU time. A record lets `dataclasses` collect the fields
(so `fields`, `replace`, `asdict` and type checkers see a dataclass), compiles only `__init__`, at the class's first
use (its code kept between runs by base.code_cache), and shares one generic function for each of the other five,
written over `operator.attrgetter`: a comparison or hash costs about 0.3-0.5 us against the generated ones' 0.2 us,
which the caches' keys barely notice (the records
hashed most often cache their hash in their own body, and that is kept). Its `__init__` writes the instance dict
directly where the class has one: creating a record takes about half the time of creating a frozen dataclass, and a
report creates millions.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable
from typing import Any, TypeVar, dataclass_transform, overload

from gemma_fit.base.code_cache import compiled

T = TypeVar("T", bound=type)

_MISSING = dataclasses.MISSING


def _frozen_setattr(self: object, name: str, value: object) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")


def _frozen_delattr(self: object, name: str) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")


def _getstate(self: object) -> list[object]:
    """Pickle a record with slots by its field values (its slots have no __dict__ to copy)."""
    return [getattr(self, f.name) for f in dataclasses.fields(self)]  # type: ignore[arg-type]


def _setstate(self: object, state: list[object]) -> None:
    for f, value in zip(dataclasses.fields(self), state, strict=True):  # type: ignore[arg-type]
        object.__setattr__(self, f.name, value)


def _key(names: tuple[str, ...]) -> Callable[[object], tuple[object, ...]]:
    """The tuple of these attributes (attrgetter returns a bare value for one name and cannot take none)."""
    if not names:
        return lambda _self: ()
    if len(names) == 1:
        one = operator.attrgetter(names[0])
        return lambda self: (one(self),)
    return operator.attrgetter(*names)  # type: ignore[return-value]


def _compare_methods(cls: type, fields: tuple[dataclasses.Field[Any], ...], explicit_hash: bool) -> None:
    """Field-wise `__eq__` and `__hash__`, as dataclasses makes them: an `__eq__` or `__hash__` the class body
    writes itself is kept (a record that caches its hash, or compares by identity, says so on purpose)."""
    key = _key(tuple(f.name for f in fields if f.compare))
    hash_key = _key(tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash)))

    def __eq__(self: object, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return key(self) == key(other)

    def __hash__(self: object) -> int:
        return hash(hash_key(self))

    if "__eq__" not in cls.__dict__:
        cls.__eq__ = __eq__  # type: ignore[assignment]
    if not explicit_hash:
        cls.__hash__ = __hash__  # type: ignore[assignment]


def _repr_method(cls: type, fields: tuple[dataclasses.Field[Any], ...]) -> None:
    names = tuple(f.name for f in fields if f.repr)

    def __repr__(self: object) -> str:
        inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in names)
        return f"{self.__class__.__qualname__}({inner})"

    if "__repr__" not in cls.__dict__:
        cls.__repr__ = __repr__  # type: ignore[assignment]


def _init_source(cls: type, fields: tuple[dataclasses.Field[Any], ...]) -> tuple[str, dict[str, object]]:
    """The source of `__init__` and the names it refers to: dataclasses' own signature and defaults."""
    env: dict[str, object] = {"_MISSING": _MISSING, "_setattr": object.__setattr__}
    params: list[str] = []
    kw_only: list[str] = []
    body: list[str] = []
    has_dict = "__slots__" not in cls.__dict__
    if has_dict:
        body.append("  _d = self.__dict__")
    for f in fields:
        value = f.name
        if f.default is not _MISSING:
            env[f"_dflt_{f.name}"] = f.default
            default = f"=_dflt_{f.name}"
            if not f.init:
                value = f"_dflt_{f.name}"
        elif f.default_factory is not _MISSING:
            env[f"_fact_{f.name}"] = f.default_factory
            default = "=_MISSING"
            value = f"_fact_{f.name}() if {f.name} is _MISSING else {f.name}" if f.init else f"_fact_{f.name}()"
        else:
            default = ""
        if f.init:
            (kw_only if f.kw_only else params).append(f"{f.name}{default}")
        elif value == f.name:  # init=False and no default: dataclasses leaves it unset too
            continue
        body.append(f"  _d[{f.name!r}] = {value}" if has_dict else f"  _setattr(self, {f.name!r}, {value})")
    if hasattr(cls, "__post_init__"):
        body.append("  self.__post_init__()")
    signature = ", ".join(["self", *params, *(["*", *kw_only] if kw_only else [])])
    return f"def __init__({signature}):\n" + "\n".join(body or ["  pass"]) + "\n", env


def _compiled_init(cls: type) -> Callable[..., None]:
    source, env = _init_source(cls, dataclasses.fields(cls))
    namespace: dict[str, Any] = {}
    exec(compiled(source, f"<record {cls.__module__}.{cls.__qualname__}>"), env, namespace)  # noqa: S102
    init: Callable[..., None] = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    return init


def _first_init(cls: type) -> Callable[..., None]:
    """An `__init__` that compiles the record's own at its first use and puts it in its place: half the records
    a command defines are never created by it (a cold `check` compiles 61 of ~85)."""

    def __init__(self: object, *args: Any, **kwargs: Any) -> None:
        init = _compiled_init(cls)
        cls.__init__ = init  # type: ignore[misc]
        init(self, *args, **kwargs)

    return __init__


def _build(given: T, slots: bool) -> T:
    body = given.__dict__  # dataclasses' rule: a __hash__ of the body's own, not the None an __eq__ leaves
    explicit_hash = "__hash__" in body and not (body["__hash__"] is None and "__eq__" in body)
    # dataclasses writes a docstring for a class without one from inspect.signature, which tokenizes a signature
    # string (~0.1 ms a class): a placeholder stops it, and the fields' names replace it below
    undocumented = given.__doc__ is None
    if undocumented:
        given.__doc__ = given.__name__
    cls: Any = dataclasses.dataclass(given, init=False, repr=False, eq=False, slots=slots)  # fields only: no code
    fields = dataclasses.fields(cls)
    if undocumented:
        cls.__doc__ = f"{cls.__name__}({', '.join(f.name for f in fields if f.init)})"
    cls.__init__ = _first_init(cls)
    _repr_method(cls, fields)
    _compare_methods(cls, fields, explicit_hash)
    cls.__setattr__ = _frozen_setattr
    cls.__delattr__ = _frozen_delattr
    if slots:
        cls.__getstate__ = _getstate
        cls.__setstate__ = _setstate
    return cls  # type: ignore[no-any-return]


@overload
def record(cls: T, /) -> T: ...
@overload
def record(*, slots: bool = False) -> Callable[[T], T]: ...


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field, dataclasses.Field))
def record(cls: T | None = None, /, *, slots: bool = False) -> T | Callable[[T], T]:
    """`@record` or `@record(slots=True)`: as `@dataclass(frozen=True)`, with `eq` and a field-wise hash."""
    if cls is None:
        return lambda c: _build(c, slots)
    return _build(cls, slots)
