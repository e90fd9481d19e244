"""Every engine gemma-fit plans for, one line each, and the one way to ask one by name.

An engine's module is imported when the engine is first asked for: a cold `check` with llama.cpp does not
load vLLM's or transformers' modelling (about a tenth of its start-up).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import Any, cast

from gemma_fit.base.errors import BadInput
from gemma_fit.base.suggest import did_you_mean
from gemma_fit.base.text import printable
from gemma_fit.engines.base import CheckRequest, CheckResult, Engine, PlanEngine, option_names

# Each engine's name -> the module whose ENGINE it is: a new engine is one module and one line here.
_MODULES = {
    "llama.cpp": "gemma_fit.engines.llamacpp_engine",
    "ollama": "gemma_fit.engines.ollama",
    "vllm": "gemma_fit.engines.vllm",
    "transformers": "gemma_fit.engines.transformers_hf",
}
DEFAULT_ENGINE = "llama.cpp"


class _Engines(Mapping[str, Engine]):
    """Name -> Engine, each engine's module imported on first use."""

    def __getitem__(self, name: str) -> Engine:
        engine = cast(Engine, importlib.import_module(_MODULES[name]).ENGINE)
        assert engine.name == name, (engine.name, name)
        return engine

    def __iter__(self) -> Iterator[str]:
        return iter(_MODULES)

    def __len__(self) -> int:
        return len(_MODULES)


ENGINES: Mapping[str, Engine] = _Engines()


def _names() -> dict[str, Engine]:
    out: dict[str, Engine] = {}
    for e in ENGINES.values():
        for name in (e.name, *e.aliases):
            out[name] = e
    return out


def engine_named(name: str) -> Engine:
    """The engine --engine names (its name or an alias, any case); BadInput with a suggestion otherwise."""
    key = name.strip().lower()
    if key in _MODULES:
        return ENGINES[key]
    names = _names()
    if key in names:
        return names[key]
    hint = did_you_mean(key, list(ENGINES)) if key else ""
    raise BadInput(f"--engine {printable(name.strip() or repr(name), 60)} is not one of {', '.join(ENGINES)}{hint}")


def plan_engine(name: str, what: str) -> PlanEngine:
    """An engine whose plans are llama.cpp's, for `what` (recommend, buy) to rank; BadInput for the others."""
    engine = engine_named(name)
    if not engine.ranks_plans:
        raise BadInput(f"{what} ranks llama.cpp plans (and Ollama's, which are llama.cpp's); --engine {engine.name} "
                       f"is not ranked yet: use gemma-fit check --engine {engine.name}")
    return cast(PlanEngine, engine)


def option_owners() -> dict[str, str]:
    """Each engine option's name -> the engines that take it."""
    out: dict[str, list[str]] = {}
    for e in ENGINES.values():
        for option in sorted(option_names(e.options)):
            out.setdefault(option, []).append(e.name)
    return {k: " and ".join(v) for k, v in out.items()}


def check_options(engine: Engine, options: dict[str, Any]) -> None:
    """An option the engine does not take is bad input that says whose it is."""
    mine = option_names(engine.options)
    for key, value in options.items():
        if value is None or key in mine:
            continue
        flag = "--" + key.replace("_", "-")
        whose = option_owners().get(key)  # the other engines are loaded only to name the option's owner
        if whose is None:
            raise BadInput(f"{flag} is not an option of any engine")
        raise BadInput(f"{flag} is an option of {whose}, not of {engine.name}")


def estimate(name: str, request: CheckRequest) -> CheckResult[Any]:
    """The plan of the engine `name` (what a matrix of checks needs)."""
    engine = engine_named(name)
    check_options(engine, dict(request.options))
    return engine.estimate(request)


def check(name: str, request: CheckRequest) -> CheckResult[Any]:
    """The complete answer of the engine `name` for one check."""
    engine = engine_named(name)
    check_options(engine, dict(request.options))
    return engine.check(request)
