"""gemma-fit: will a Gemma model run on this hardware, and how well.

The Python API (gemma_fit.api, loaded on first use so that `import gemma_fit` stays cheap): a function for every
command (`check`, `report`, `recommend`, `buy`, `serve_plan`, `inspect`, `smoke` ...), `to_json`, the settings
types and the result and error types.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gemma_fit.base.version import LLAMA_CPP_COMMIT, __version__

if TYPE_CHECKING:
    from gemma_fit.api import (
        BadInput,
        Catalog,
        CheckResult,
        GemmaFitError,
        InspectResult,
        MachineFlags,
        RunSettings,
        Verdict,
        Workload,
        buy,
        check,
        inspect,
        recommend,
        report,
        serve_plan,
        to_json,
    )

__all__ = ["LLAMA_CPP_COMMIT", "__version__", "BadInput", "Catalog", "CheckResult", "GemmaFitError", "InspectResult",
           "MachineFlags", "RunSettings", "Verdict", "Workload", "buy", "check", "inspect", "recommend", "report",
           "serve_plan", "to_json"]
_API = frozenset(__all__[2:])  # what gemma_fit.api provides, imported when first asked for


def __getattr__(name: str) -> Any:
    if name in _API:
        from gemma_fit import api

        return getattr(api, name)
    raise AttributeError(f"module 'gemma_fit' has no attribute {name!r}")
