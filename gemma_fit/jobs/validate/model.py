"""`gemma-fit db validate`'s checks of one model_db entry: the schema (a cross-field config error placed on
the field it names), the file name, URLs and repo ids, and the parameter count its config gives against
the published one (naming the size field a slipped digit most likely sits in).
"""

from __future__ import annotations

import math
import re

from pydantic import BaseModel, ValidationError

from gemma_fit.base.errors import BadInput
from gemma_fit.db.yaml_lines import explain, field_path
from gemma_fit.gguf import tensors as tensor_plan
from gemma_fit.jobs.validate.common import Doc, Problem, Report, Seen, check_unique
from gemma_fit.model.hf_config import HFTextConfig, error_loc, explain_config_error
from gemma_fit.model.schema import ModelEntry
from gemma_fit.model.spec import spec_from_config

# A model entry's published parameter count against the count its config gives (the tensor plan, as
# tests/test_model_db.py checks): all 17 entries agree within 0.71% (gemma-3-270m, whose published
# "270M" is rounded; the others within 0.45%), while a slip in one size field (a digit added or dropped,
# a layer more or less on the smaller models) moves the count by several percent or more.
PARAMS_TOLERANCE = 0.01
# The config fields a wrong parameter count is traced to, most likely first.
PARAMS_SUSPECTS = ("hidden_size", "intermediate_size", "num_hidden_layers", "vocab_size", "num_attention_heads",
                   "num_key_value_heads", "head_dim", "global_head_dim", "moe_intermediate_size", "num_experts",
                   "hidden_size_per_layer_input", "vocab_size_per_layer_input")
MODEL_FIELDS: list[type[BaseModel]] = [ModelEntry, HFTextConfig]


def _validate_model(doc: Doc, report: Report) -> ModelEntry | None:
    """ModelEntry validation; a cross-field config error is placed on the field it names."""
    try:
        return ModelEntry.model_validate(doc.data)
    except ValidationError as exc:
        for err in exc.errors():
            loc = error_loc(dict(err))
            if loc and loc[0] == "config":
                msg = explain_config_error(dict(err))
                if err["type"] in ("missing", "extra_forbidden"):
                    msg = explain(dict(err), MODEL_FIELDS)
            else:
                msg = explain(dict(err), MODEL_FIELDS)
            report.problems.append(Problem(doc.path, doc.line(loc), field_path(doc.data, loc), msg))
        return None


def _count_params(config: HFTextConfig, entry: ModelEntry) -> int:
    """Parameters llama.cpp's tensors hold for `config` (the BF16 tensor plan's count), plus the towers
    the published figure counts."""
    spec = spec_from_config(config, model_id=entry.id, name=entry.name)
    return sum(math.prod(t.shape) for t in tensor_plan.raw_tensors(spec)) + entry.published_tower_params


def _culprit(entry: ModelEntry, published: int) -> tuple[str, int] | None:
    """The one size field that, with a digit added or dropped (x10, /10), would give the published count."""
    data = entry.config.model_dump(exclude_unset=True)
    hits = []
    for name in PARAMS_SUSPECTS:
        value = data.get(name)
        if not isinstance(value, int) or isinstance(value, bool) or not value:
            continue
        for factor in (10, 0.1):
            guess = round(value * factor)
            if guess < 1 or guess == value:
                continue
            try:
                config = HFTextConfig.model_validate({**data, name: guess})
                counted = _count_params(config, entry)
            except (ValidationError, BadInput):
                continue
            if abs(counted / published - 1) <= PARAMS_TOLERANCE:
                hits.append((name, guess))
                break
    return hits[0] if len(hits) == 1 else None


def _check_params(doc: Doc, report: Report, entry: ModelEntry) -> None:
    """The parameters the config gives must match the published count (a wrong size in config is caught)."""
    try:
        counted = _count_params(entry.config, entry)
    except BadInput as exc:
        report.add(doc, ("config",), "config", str(exc))
        return
    published = entry.params.published
    off = counted / published - 1
    if abs(off) <= PARAMS_TOLERANCE:
        return
    towers = f" + {entry.published_tower_params:,} tower" if entry.published_tower_params else ""
    said = (f"the config gives {counted:,} parameters (tensor plan{towers}) but params.published is {published:,} "
            f"({off:+.1%}, more than the {PARAMS_TOLERANCE:.0%} tolerance)")
    culprit = _culprit(entry, published)
    if culprit is not None:
        name, guess = culprit
        value = getattr(entry.config, name)
        ratio = counted / published
        either = next((f" (or params.published is off by {f:g}x)" for f in (10, 0.1)
                       if abs(ratio / f - 1) <= PARAMS_TOLERANCE), "")
        report.add(doc, ("config", name), f"config.{name}",
                   f"{value} looks wrong: {said}; {name} {guess} would match{either}")
    else:
        report.add(doc, ("params", "published"), "params.published", f"{said}; check the config sizes "
                   f"({', '.join(PARAMS_SUSPECTS[:4])}) and the published figure")


def check_model(doc: Doc, report: Report, seen: Seen) -> None:
    if not isinstance(doc.data, dict):
        report.add(doc, (), "(top level)", "expected a mapping (one model entry)")
        return
    entry = _validate_model(doc, report)
    model_id = doc.data.get("id")
    if isinstance(model_id, str):
        check_unique(doc, report, seen, "model", model_id, (), "id")
        if doc.path.stem.lower() != model_id.lower():
            report.add(doc, ("id",), "id", f"'{model_id}' differs from the file name {doc.path.name}")
    if entry is None:
        return
    report.counts["models"] = report.counts.get("models", 0) + 1
    for i, url in enumerate(entry.corroborating_sources):
        if not url.startswith(("http://", "https://")):
            report.add(doc, ("corroborating_sources", i), f"corroborating_sources[{i}]", "must be a URL")
    for i, repo in enumerate(entry.hf_repos):
        if not re.fullmatch(r"[\w.-]+/[\w.-]+", repo):
            report.add(doc, ("hf_repos", i), f"hf_repos[{i}]", f"'{repo}' is not a Hugging Face repo id (org/name)")
    if not entry.verification.strip():
        report.add(doc, ("verification",), "verification", "say how the values were checked")
    _check_params(doc, report, entry)
