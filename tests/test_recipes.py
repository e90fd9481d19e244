"""Published recipes as quants: Google's QAT Q4_0 files against their published sizes and tensor mix
(model_db/llamacpp/recipes.yaml holds the sizes with their sources)."""

from __future__ import annotations

import pytest

from gemma_fit.base.errors import BadInput
from gemma_fit.gguf.layout import estimated_file_bytes
from gemma_fit.gguf.tensors import build_plan
from gemma_fit.gguf.types import file_type, recipes, unsloth_ud
from gemma_fit.gguf.unsloth import unpublished_mix
from gemma_fit.model.catalog import resolve_model
from gemma_fit.model.ollama_tags import OllamaTag, ollama_tags

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


QAT_UD = recipes()["QAT_UD_Q4_K_XL"]["published_bytes"]


@pytest.mark.parametrize("model_id", sorted(QAT_UD))
def test_unsloth_qat_files_are_all_q4_0(model_id: str) -> None:
    plan = build_plan(resolve_model(model_id).spec, "qat-ud-q4_k_xl")
    assert set(plan.type_counts()) - {"F32", "BF16"} == {"Q4_0"}  # E4B's per-layer projection stays BF16
    # 12B and 26B-A4B to 0.1% ("6.72 GB"; "200MB smaller"), E4B shown as "~4.22 GB": within 2%
    assert abs(estimated_file_bytes(plan) / int(QAT_UD[model_id]["bytes"]) - 1) < (0.02 if "E4B" in model_id else 0.001)


UD_FILES = [(name, m) for name, u in unsloth_ud().items() for m in u["published_bytes"]]


@pytest.mark.parametrize(("recipe", "model_id"), UD_FILES)
def test_unsloth_ud_plans_keep_free_what_every_published_file_weighs_more(recipe: str, model_id: str) -> None:
    """A UD file is modelled as its base mix; the base mix plus the excess kept free covers the published file,
    and a model with no published file of that recipe gets at least the excess of every published one."""
    published = int(unsloth_ud()[recipe]["published_bytes"][model_id]["bytes"])
    plan = build_plan(resolve_model(model_id).spec, recipe)
    ud = unpublished_mix(plan)
    assert ud is not None and plan.ftype.mix_of == ud.mix_of
    assert estimated_file_bytes(plan) + ud.excess_bytes >= published
    assert plan.tensors == build_plan(resolve_model(model_id).spec, ud.mix_of).tensors
    other = build_plan(resolve_model("gemma-2-9b").spec, recipe)  # no published UD file of Gemma 2 here
    other_ud = unpublished_mix(other)
    assert other_ud is not None
    assert other_ud.excess_ratio >= ud.excess_ratio


def test_a_ud_plan_says_its_mix_is_not_published_and_keeps_the_excess_free() -> None:
    from gemma_fit.jobs.check import check

    room = check("gemma-3-27b", "rtx-4090", quant="Q4_K_M").detail.estimate.devices[0].headroom_bytes
    ud_mix = unpublished_mix(build_plan(resolve_model("gemma-3-27b").spec, "UD-Q4_K_XL"))
    assert ud_mix is not None
    margin_gib = (room - ud_mix.excess_bytes / 2) / 2**30  # the plain plan keeps it, the UD plan does not
    plain = check("gemma-3-27b", "rtx-4090", quant="Q4_K_M", margin_gib=margin_gib)
    ud = check("gemma-3-27b", "rtx-4090", quant="UD-Q4_K_XL", margin_gib=margin_gib)
    assert (plain.verdict, ud.verdict) == ("go", "tight")
    assert ud.detail.plan.ftype.name == "UD-Q4_K_XL" and "UD-Q4_K_XL" in ud.command
    assert any("does not publish the UD-Q4_K_XL tensor mix: modelled as Q4_K_M" in r for r in ud.reasons)
    assert ud.detail.estimate.devices[0].total_bytes == plain.detail.estimate.devices[0].total_bytes


@pytest.mark.parametrize(("typed", "mix_of", "evidence"), [
    ("UD-Q4_K_M", "Q4_K_M", "UD-Q4_K_M"),  # published for 26B-A4B: its own file elsewhere, the most it shows
    ("ud_q5_k_m", "Q5_K_M", "UD-Q6_K"),  # nearest published types: UD-Q4_K_M below, UD-Q6_K above
    ("UD-Q8_0", "Q8_0", "UD-Q6_K"),  # nothing above: the nearest below
    ("UD-IQ4_XS", "IQ4_XS", "UD-IQ3_XXS"),
])
def test_a_ud_name_after_a_plain_type_is_that_type_with_the_nearest_published_excess(
        typed: str, mix_of: str, evidence: str) -> None:
    """Unsloth's Gemma 4 files are named UD-Q4_K_M, UD-Q6_K ...: the name a user copies from the file is accepted,
    planned as the plain type's mix, and keeps free what the nearest published UD types weigh more."""
    ft = file_type(typed)
    assert ft.name == typed.upper().replace("UD_", "UD-") and ft.mix_of == mix_of
    plan = build_plan(resolve_model("gemma-4-31b").spec, ft.name)
    assert plan.tensors == build_plan(resolve_model("gemma-4-31b").spec, mix_of).tensors
    ud = unpublished_mix(plan)
    assert ud is not None and ud.excess_ratio > 0
    nearest = [r for r in unsloth_ud() if r == evidence]
    assert nearest and (evidence in ud.evidence or typed.upper() == evidence)


def test_ud_is_not_a_prefix_for_unquantized_types() -> None:
    with pytest.raises(BadInput, match="unknown quant 'UD-F16'"):
        file_type("UD-F16")


TAGS = sorted({t.tag: t for t in ollama_tags().values()}.values(), key=lambda t: t.tag)


@pytest.mark.parametrize("tag", TAGS, ids=[t.tag for t in TAGS])
def test_ollama_tags_are_their_model_and_quant_and_the_blob_size(tag: OllamaTag) -> None:
    """Text plan plus the modelled vision tower is the published blob to its rounding; where a tower (audio) is
    not modelled, the plan is smaller than the blob and the difference is kept free."""
    from gemma_fit.engines.projector import tag_unmodelled
    from gemma_fit.gguf.projector import projector_plan, tower_for

    resolved = resolve_model(tag.model)
    plan = build_plan(resolved.spec, tag.quant)
    text = estimated_file_bytes(plan)
    entry = resolved.entry
    tower = tower_for(entry.towers.vision.type if entry and entry.towers and entry.towers.vision else None,
                      resolved.spec.id)
    unmodelled = tag_unmodelled(tag, resolved, plan, images=0)
    audio = bool(entry and entry.towers and entry.towers.audio)  # Gemma 4 E2B/E4B/12B: not modelled
    if (tower or resolved.spec.id == "gemma-3-1b") and not audio:  # 1B: text only
        tower_bytes = projector_plan(tower, resolved.spec.n_embd).tensor_data_bytes if tower else 0
        # Ollama quantizes with its own tool: its 1B blob is 815 MB where llama-quantize's mix gives 806 MB
        # (ours, and Unsloth's plain Q4_K_M file: "806 MB"); 12B 8.16 GB against "8.1 GB". Within 1.5%.
        assert abs(text + tower_bytes - tag.blob_bytes) <= tag.rounding_bytes + 0.015 * tag.blob_bytes
        assert unmodelled.bytes == max(tower_bytes, tag.blob_bytes - text)  # 1B: 815 - 806 MB kept free
    else:
        assert text < tag.blob_bytes
        assert text + unmodelled.bytes >= tag.blob_bytes - tag.rounding_bytes


def test_an_ollama_tag_names_model_and_quant_and_refuses_another_quant() -> None:
    from gemma_fit.jobs.check import check

    r = check("gemma3:27b", "rtx-4090")
    assert (r.resolved.spec.id, r.detail.plan.ftype.name) == ("gemma-3-27b", "Q4_K_M")
    assert any(x.startswith("Ollama tag gemma3:27b: Gemma 3 27B Q4_K_M, a 17 GB blob") for x in r.reasons)
    assert check("gemma3:27b-it-qat", "rtx-4090").detail.plan.ftype.name == "QAT_Q4_0"
    assert check("gemma3", "rtx-4090").resolved.spec.id == "gemma-3-4b"  # the library's default tag
    with pytest.raises(BadInput, match="the Ollama tag gemma3:27b is Q4_K_M, not q8_0"):
        check("gemma3:27b", "rtx-4090", quant="q8_0")


def test_a_ud_q8_k_xl_prompt_multiplies_its_excess_in_bf16() -> None:
    """No quantized type is wider than Q8_0: what Gemma 3 12B's published UD-Q8_K_XL weighs beyond the Q8_0 mix is
    BF16 weights (2 bytes each where Q8_0 takes 34/32), a share of the layer matrices that a prompt multiplies with the
    BF16 kernels, which on a Vulkan GPU without BF16 cooperative matrices are the scalar shaders: slower prompts."""
    from gemma_fit.api import check
    from gemma_fit.gguf.unsloth import bf16_share, published_excess

    for model_id in ("gemma-3-12b", "gemma-3-4b"):
        plan = build_plan(resolve_model(model_id).spec, "UD-Q8_K_XL")
        assert 0 < bf16_share(plan) < 1 and published_excess(plan) > 0
    assert bf16_share(build_plan(resolve_model("gemma-3-12b").spec, "UD-Q6_K_XL")) == 0  # upgrades stay quantized
    assert bf16_share(build_plan(resolve_model("gemma-4-31B").spec, "UD-Q8_K_XL")) == 0  # no published file: no guess
    ud, plain = (check("gemma-3-12b", "ryzen-ai-max-395-128gb", quant=q, backend="vulkan").performance
                 for q in ("UD-Q8_K_XL", "Q8_0"))
    assert ud is not None and plain is not None
    assert ud.prefill_tokens_per_s < 0.8 * plain.prefill_tokens_per_s
