"""What `llama-server -m FILE` does with neither -c nor -np, by llama.cpp version (model_db/llamacpp/
server_defaults.yaml): the context (the trained one, lowered by --fit to what memory holds, in the pinned tree)
and the slots (4 sharing one unified KV cache). `check` answers for that when the user gives neither, and says so.
"""

from __future__ import annotations

import re
from dataclasses import replace
from functools import cache

from gemma_fit.base.errors import BadInput
from gemma_fit.base.record import record
from gemma_fit.base.text import printable
from gemma_fit.base.version import LLAMA_CPP_COMMIT
from gemma_fit.db.rules import read_packaged_yaml
from gemma_fit.gguf.tensors import TensorPlan
from gemma_fit.hardware.spec import Hardware
from gemma_fit.memory.llamacpp_fit import FIT_TARGET_BYTES, llamacpp_fit
from gemma_fit.memory.search import max_ctx_fit
from gemma_fit.memory.settings import RunSettings


@record
class ServerDefaults:
    since: int  # the first release (bNNNN) with these defaults
    label: str
    n_ctx: int  # 0: the model's trained context
    n_parallel: int
    kv_unified: bool
    flash_attn: str  # -fa's default: "off" before b6325, then "auto"
    fit: bool  # --fit on: the context shrinks to what memory holds, never under fit_min_ctx
    fit_min_ctx: int
    sources: tuple[str, ...]


@cache
def _table() -> tuple[str, tuple[ServerDefaults, ...]]:
    data = read_packaged_yaml("llamacpp/server_defaults.yaml")
    rows = tuple(ServerDefaults(int(v["since"]), v["label"], int(v["n_ctx"]), int(v["n_parallel"]),
                                bool(v["kv_unified"]), str(v["flash_attn"]), bool(v["fit"]), int(v["fit_min_ctx"]),
                                tuple(v["sources"]))
                 for v in data["versions"])
    return str(data["pinned"]), tuple(sorted(rows, key=lambda r: r.since))


def server_defaults(version: str | None) -> tuple[str, ServerDefaults]:
    """The defaults of a llama.cpp version ("b6890", "6890" as `llama-server --version` prints it, or the pinned
    commit; None: the pinned tree) and the version's name for the answer. BadInput for anything else."""
    pinned, rows = _table()
    if version is None or version.strip().lower() in (pinned, LLAMA_CPP_COMMIT):
        return f"llama-server {pinned}", rows[-1]
    m = re.fullmatch(r"\s*b?([0-9]{1,6})\s*", version, re.IGNORECASE)
    if m is None:
        raise BadInput(f"--engine-version '{printable(version, 60)}' is not a llama.cpp release: give its build "
                       f"number as `llama-server --version` prints it (b6890 or 6890), or {pinned}")
    build = int(m.group(1))
    row = [r for r in rows if r.since <= build][-1]
    return f"llama-server b{build}", row


def with_server_defaults(plan: TensorPlan, s: RunSettings, hw: Hardware, version: str | None) -> RunSettings:
    """`s` with llama-server's own -c and -np for `version` (and the note of where they come from)."""
    name, d = server_defaults(version)
    base = replace(s, n_ctx=d.n_ctx, n_parallel=d.n_parallel, kv_unified=d.kv_unified, defaults_from=name)
    if s.flash_attn == "auto":  # -fa not given: the version's own default
        base = replace(base, flash_attn=d.flash_attn)  # type: ignore[arg-type]
    if not d.fit or d.n_ctx != 0:
        return base
    trained = plan.model.n_ctx_train
    if hw.gpus:
        choice = llamacpp_fit(plan, base, hw.gpus, hw.host_capacity_bytes)
        return replace(base, n_ctx=choice.n_ctx if choice else trained)
    host = hw.host_capacity_bytes
    if host is None:  # memory unknown: the trained context, whose host side the answer says is not checked
        return replace(base, n_ctx=trained)
    # no GPU: the fit lowers the context against system memory, keeping its target free
    fitted = max_ctx_fit(plan, base, (), 0, host - FIT_TARGET_BYTES)
    return replace(base, n_ctx=max(min(fitted, trained), min(d.fit_min_ctx, trained)))


def defaults_note(s: RunSettings, version: str | None) -> str:
    """What the answer says when it is for the engine's own defaults."""
    _, d = server_defaults(version)
    flags = f"-c {s.n_ctx} -np {s.n_parallel}" + (" --kv-unified" if s.kv_unified else "")
    return (f"no --ctx or --parallel given: the answer is for what {s.defaults_from} does by itself ({d.label}): "
            f"{flags}, set explicitly in the command")
