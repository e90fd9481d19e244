"""One call for every engine: `estimate(resolved, settings, hardware)` picks the engine's rules."""

from __future__ import annotations

from gemma_fit.base.errors import BadInput
from gemma_fit.engines.base import ENGINES, EngineResult, EngineSettings, validate_numbers
from gemma_fit.engines.ollama import estimate_ollama
from gemma_fit.engines.transformers_hf import estimate_transformers
from gemma_fit.engines.vllm import estimate_vllm
from gemma_fit.hardware.select import Hardware
from gemma_fit.model.catalog import ResolvedModel


def estimate(resolved: ResolvedModel, settings: EngineSettings, hardware: Hardware) -> EngineResult:
    """Dispatch to the engine named in `settings.engine`."""
    fn = {"vllm": estimate_vllm, "ollama": estimate_ollama, "transformers": estimate_transformers}.get(
        settings.engine)
    if fn is None:
        raise BadInput(f"--engine {settings.engine} is not one of {', '.join(ENGINES)}")
    validate_numbers(settings)
    return fn(resolved, resolved.spec, settings, hardware)
