"""Every engine gemma-fit plans for, one line each, and the one way to ask one by name."""

from __future__ import annotations

from typing import Any, cast

from gemma_fit.base.errors import BadInput
from gemma_fit.base.suggest import did_you_mean
from gemma_fit.base.text import printable
from gemma_fit.engines import llamacpp_engine, ollama, transformers_hf, vllm
from gemma_fit.engines.base import CheckRequest, CheckResult, Engine, PlanEngine, option_names

ENGINES: dict[str, Engine] = {
    llamacpp_engine.ENGINE.name: llamacpp_engine.ENGINE,
    ollama.ENGINE.name: ollama.ENGINE,
    vllm.ENGINE.name: vllm.ENGINE,
    transformers_hf.ENGINE.name: transformers_hf.ENGINE,
}
DEFAULT_ENGINE = llamacpp_engine.ENGINE.name


def _names() -> dict[str, Engine]:
    out: dict[str, Engine] = {}
    for e in ENGINES.values():
        for name in (e.name, *e.aliases):
            out[name] = e
    return out


def engine_named(name: str) -> Engine:
    """The engine --engine names (its name or an alias, any case); BadInput with a suggestion otherwise."""
    key = name.strip().lower()
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
    owners = option_owners()
    for key, value in options.items():
        if value is None or key in mine:
            continue
        flag = "--" + key.replace("_", "-")
        whose = owners.get(key)
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
