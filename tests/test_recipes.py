"""Published recipes as quants: Google's QAT Q4_0 files against their published sizes and tensor mix
(model_db/llamacpp/recipes.yaml holds the sizes with their sources)."""

from __future__ import annotations

import pytest

from gemma_fit.base.errors import BadInput
from gemma_fit.gguf.layout import estimated_file_bytes
from gemma_fit.gguf.tensors import build_plan
from gemma_fit.gguf.types import file_type, recipes
from gemma_fit.model.catalog import resolve_model

PUBLISHED = recipes()["QAT_Q4_0"]["published_bytes"]
# Byte counts published to the byte: our file differs only by metadata (tokenizer, key order), a few KiB.
EXACT = ("gemma-4-12B", "gemma-4-26B-A4B", "gemma-4-31B")
# Gemma 4 E2B/E4B: the per-layer embedding table's type in Google's file is not published (taken as
# token_embd's Q6_K): within 1%. The rest are shown rounded to 3 significant digits: within 0.5%.
UNCERTAIN = ("gemma-4-E2B", "gemma-4-E4B")


@pytest.mark.parametrize("model_id", sorted(PUBLISHED))
def test_qat_file_sizes_match_the_published_files(model_id: str) -> None:
    plan = build_plan(resolve_model(model_id).spec, "qat-q4_0")
    ours, theirs = estimated_file_bytes(plan), int(PUBLISHED[model_id]["bytes"])
    if model_id in EXACT:
        assert abs(ours - theirs) < 16 * 1024
    else:
        assert abs(ours / theirs - 1) < (0.01 if model_id in UNCERTAIN else 0.005)


def test_gemma_4_12b_qat_has_the_published_tensor_mix() -> None:
    plan = build_plan(resolve_model("gemma-4-12B").spec, "QAT_Q4_0")
    assert len(plan.tensors) == 667  # "GGUF v3 - 667 tensors"
    assert plan.by_name()["token_embd.weight"].type.name == "Q6_K"
    assert plan.type_counts()["Q4_0"] == 328
    assert plan.ftype.id == file_type("Q4_0").id  # general.file_type 2, as the file says


def test_gemma_3_qat_keeps_an_f16_embedding_and_no_q4_1() -> None:
    plan = build_plan(resolve_model("gemma-3-27b").spec, "qat")
    assert plan.by_name()["token_embd.weight"].type.name == "F16"
    assert set(plan.type_counts()) == {"F32", "F16", "Q4_0"}


def test_qat_for_a_model_google_did_not_publish_is_refused() -> None:
    with pytest.raises(BadInput, match="not published for gemma3n"):
        build_plan(resolve_model("gemma-3n-E4B").spec, "qat-q4_0")
