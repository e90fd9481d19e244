"""gemma-fit: will a Gemma model run on this hardware under llama.cpp, and how well.

The Python API (gemma_fit.api, loaded on first use so that `import gemma_fit` stays cheap):
`check`, `report`, `inspect`, `to_json`, `RunSettings`, and the result and error types.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gemma_fit.base.version import LLAMA_CPP_COMMIT, __version__

if TYPE_CHECKING:
    from gemma_fit.api import (
        BadInput,
        CheckResult,
        EngineResult,
        GemmaFitError,
        InspectResult,
        MachineFlags,
        RunSettings,
        check,
        inspect,
        report,
        to_json,
    )

__all__ = ["LLAMA_CPP_COMMIT", "__version__", "BadInput", "CheckResult", "EngineResult", "GemmaFitError",
           "InspectResult", "MachineFlags", "RunSettings", "check", "inspect", "report", "to_json"]
_API = frozenset(__all__[2:])  # what gemma_fit.api provides, imported when first asked for


def __getattr__(name: str) -> Any:
    if name in _API:
        from gemma_fit import api

        return getattr(api, name)
    raise AttributeError(f"module 'gemma_fit' has no attribute {name!r}")
