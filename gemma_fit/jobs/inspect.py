"""`inspect FILE.gguf`: what a GGUF header holds and, given hardware, what the file needs there."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from gemma_fit.db.catalog import BUILTIN, Catalog
from gemma_fit.engines.base import Workload
from gemma_fit.engines.llamacpp import InspectResult, run_check
from gemma_fit.engines.projector import projector_bytes
from gemma_fit.hardware.select import hardware_of
from gemma_fit.hardware.spec import Hardware
from gemma_fit.jobs.inputs import check_workload
from gemma_fit.memory.settings import RunSettings
from gemma_fit.model.catalog import ResolvedModel


def read_file(path: Path) -> InspectResult:
    """The header alone: the model and tensor plan it describes (nothing checked against hardware)."""
    from gemma_fit.gguf.from_file import model_from_gguf

    header, spec, plan = model_from_gguf(path)
    return InspectResult(path, header, spec, plan, None)


def check_file(info: InspectResult, hardware: Hardware, settings: RunSettings, prompt_tokens: int = 512,
               ) -> InspectResult:
    """The file's check on `hardware`, beside what its header holds."""
    resolved = ResolvedModel(info.spec, None, f"from {info.path}")
    check_workload(Workload(prompt_tokens))
    result = run_check(resolved, info.plan.ftype.name, settings, hardware, prompt_tokens=prompt_tokens,
                       plan=info.plan, gguf_path=info.path)
    return InspectResult(info.path, info.header, info.spec, info.plan, result)


def inspect(path: Path | str, hardware: Hardware | str | Sequence[str] | Path | None = None, *,
            settings: RunSettings | None = None, prompt_tokens: int = 512, mmproj: Path | None = None,
            backend: str | None = None, catalog: Catalog = BUILTIN) -> InspectResult:
    """What a GGUF file holds (header only: no weights are read) and, with `hardware`, its check there."""
    info = read_file(Path(path))
    if hardware is None:
        return info
    hw = hardware_of(hardware, backend, catalog.hardware_dirs)
    settings = settings or RunSettings()
    if mmproj is not None and not settings.mmproj_bytes:
        settings = replace(settings, mmproj_bytes=projector_bytes(mmproj, settings.flash_attn != "off"))
    return check_file(info, hw, settings, prompt_tokens)
