"""model_db: every contract model loads, resolves, and matches its published parameter count."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from gemma_fit.base.errors import BadInput, DatabaseError
from gemma_fit.gguf.tensors import build_plan
from gemma_fit.model.catalog import entry_spec, load_model_db, resolve_model
from gemma_fit.model.files import load_entry

CONTRACT_MODELS = [
    "gemma-2b", "gemma-7b", "gemma-2-2b", "gemma-2-9b", "gemma-2-27b", "gemma-3-270m", "gemma-3-1b",
    "gemma-3-4b", "gemma-3-12b", "gemma-3-27b", "gemma-3n-E2B", "gemma-3n-E4B", "gemma-4-E2B",
    "gemma-4-E4B", "gemma-4-12B", "gemma-4-26B-A4B", "gemma-4-31B",
]
REPO = Path(__file__).resolve().parent.parent


def test_every_contract_model_is_in_the_database() -> None:
    ids = {e.id for e in load_model_db().values()}
    assert ids == set(CONTRACT_MODELS)


@pytest.mark.parametrize("model_id", CONTRACT_MODELS)
def test_n_params_matches_published_count(model_id: str) -> None:
    """Parameters counted from the tensor plan (plus the towers the publisher counts) within 1%."""
    entry = load_model_db()[model_id.lower()]
    n_params = build_plan(entry_spec(entry), "BF16").n_params
    counted = n_params + entry.published_tower_params
    assert counted == pytest.approx(entry.params.published, rel=0.01), entry.params.note


@pytest.mark.parametrize("model_id", CONTRACT_MODELS)
def test_every_entry_is_sourced(model_id: str) -> None:
    entry = load_model_db()[model_id.lower()]
    assert entry.source.startswith("https://")
    assert entry.params.source.startswith("https://")
    assert entry.verification.strip()


@pytest.mark.parametrize(
    ("typed", "expected"),
    [
        ("gemma-2-9b", "gemma-2-9b"), ("GEMMA-2-9B-IT", "gemma-2-9b"), ("google/gemma-3-27b-it", "gemma-3-27b"),
        ("9b", "gemma-2-9b"), ("27b", "gemma-3-27b"), ("2b", "gemma-2-2b"), ("e4b", "gemma-4-E4B"),
        ("E2B", "gemma-4-E2B"), ("31b", "gemma-4-31B"), ("26b-a4b", "gemma-4-26B-A4B"), ("26b", "gemma-4-26B-A4B"),
        ("12b", "gemma-4-12B"), ("4b", "gemma-3-4b"), ("270m", "gemma-3-270m"), ("7b", "gemma-7b"),
    ],
)
def test_names_and_aliases_resolve(typed: str, expected: str) -> None:
    resolved = resolve_model(typed)
    assert resolved.spec.id == expected
    if typed.lower() != expected.lower() and not typed.lower().startswith(("gemma", "google")):
        assert "newest" in resolved.how  # the output says which model the alias chose


def test_unknown_model_is_bad_input() -> None:
    with pytest.raises(BadInput, match="unknown model 'gemma-99b'"):
        resolve_model("gemma-99b")


def _entry_dict(model_id: str) -> dict:
    return yaml.safe_load((REPO / "model_db" / f"{model_id}.yaml").read_text())


def test_hf_config_json_gives_the_same_layout_as_the_database(tmp_path: Path) -> None:
    config = _entry_dict("gemma-3-12b")["config"]
    folder = tmp_path / "my-gemma-finetune"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"architectures": config.pop("architectures"),
                                                    "model_type": "gemma3", "text_config": config}))
    from_file = resolve_model(str(folder))
    from_db = resolve_model("gemma-3-12b")
    assert from_file.entry is None
    a, b = build_plan(from_file.spec, "Q4_K_M"), build_plan(from_db.spec, "Q4_K_M")
    assert [(t.name, t.shape, t.type) for t in a.tensors] == [(t.name, t.shape, t.type) for t in b.tensors]


def test_config_json_of_another_architecture_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008,
                                "num_hidden_layers": 32, "num_attention_heads": 32, "vocab_size": 32000,
                                "max_position_embeddings": 4096}))
    with pytest.raises(BadInput, match="not a Gemma architecture"):
        resolve_model(str(path))


def test_malformed_yaml_names_the_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "broken.yaml"
    bad.write_text("id: x\nconfig: [unclosed\n")
    with pytest.raises(DatabaseError, match=r"broken\.yaml:\d+: malformed YAML"):
        load_entry(bad)


def test_invalid_field_names_the_file_and_field(tmp_path: Path) -> None:
    data = _entry_dict("gemma-2-2b")
    data["config"]["num_hidden_layers"] = -3
    bad = tmp_path / "gemma-2-2b.yaml"
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(DatabaseError, match=r"gemma-2-2b\.yaml: config\.num_hidden_layers: "):
        load_entry(bad)


def test_unknown_key_is_an_error(tmp_path: Path) -> None:
    data = _entry_dict("gemma-2-2b")
    data["licence"] = data.pop("license")
    bad = tmp_path / "gemma-2-2b.yaml"
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(DatabaseError, match=r"gemma-2-2b\.yaml: (license|licence): "):
        load_entry(bad)


def test_extra_model_db_folder_adds_entries(tmp_path: Path) -> None:
    data = _entry_dict("gemma-2-2b")
    data["id"] = "my-gemma-2-2b-clone"
    (tmp_path / "clone.yaml").write_text(yaml.safe_dump(data))
    shutil.copy(REPO / "model_db" / "gemma-2-9b.yaml", tmp_path / "gemma-2-9b.yaml")
    resolved = resolve_model("my-gemma-2-2b-clone", (tmp_path,))
    assert resolved.spec.n_layer == 26
