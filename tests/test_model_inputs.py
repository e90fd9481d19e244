"""--model PATH: a user's config.json (or its folder) is read safely and checked field by field.

Every bad file or value is one line on stderr and exit status 2 (BadInput in-process), found before any
work is done; a published config that leaves keys to transformers' defaults resolves to the same model
as the database entry.

tests/data/gemma-3-4b-it.config.json is the published config of Gemma 3 4B,
https://huggingface.co/google/gemma-3-4b-it/blob/main/config.json (see its .source sidecar).
"""

from __future__ import annotations

import codecs
import dataclasses
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gemma_fit.base.errors import BadInput
from gemma_fit.gguf.tensors import build_plan
from gemma_fit.model.catalog import entry_spec, load_model_db, resolve_model
from gemma_fit.model.files import MAX_CONFIG_BYTES
from gemma_fit.model.hf_config import HFTextConfig
from gemma_fit.model.hf_defaults import HF_DEFAULTS, _derived_defaults, fill_hf_defaults
from gemma_fit.model.limits import MAX_LAYERS
from gemma_fit.model.spec import spec_from_config

DATA = Path(__file__).resolve().parent / "data"
PUBLISHED_4B = DATA / "gemma-3-4b-it.config.json"
CLI = [sys.executable, "-c", "from gemma_fit.cli.entry import main; main()"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300, check=False)


def assert_one_line_exit_2(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith("gemma-fit: error: ") and "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in proc.stderr, proc.stderr


def published_4b() -> dict[str, Any]:
    return json.loads(PUBLISHED_4B.read_text(encoding="utf-8"))


def write(tmp_path: Path, doc: Any, name: str = "config.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def with_text(**changes: Any) -> dict[str, Any]:
    """The published 4B config with text_config keys changed (a value of ... removes the key)."""
    doc = published_4b()
    for key, value in changes.items():
        if value is ...:
            doc["text_config"].pop(key, None)
        else:
            doc["text_config"][key] = value
    return doc


def same_model(a: Any, b: Any) -> bool:
    return dataclasses.replace(a, id=b.id, name=b.name) == b


# --- item 4: transformers' defaults ------------------------------------------------------------


def test_published_gemma_3_4b_config_is_the_database_model(tmp_path: Path) -> None:
    resolved = resolve_model(str(PUBLISHED_4B))
    entry = resolve_model("gemma-3-4b").spec
    assert same_model(resolved.spec, entry)
    a, b = build_plan(resolved.spec, "Q4_K_M"), build_plan(entry, "Q4_K_M")
    assert a.n_params == b.n_params == 3_880_263_168
    assert [(t.name, t.shape, t.type) for t in a.tensors] == [(t.name, t.shape, t.type) for t in b.tensors]
    assert "Gemma3TextConfig defaults" in resolved.how and "num_attention_heads" in resolved.how
    folder = tmp_path / "gemma-3-4b-it"
    folder.mkdir()
    (folder / "config.json").write_bytes(PUBLISHED_4B.read_bytes())
    assert same_model(resolve_model(str(folder)).spec, entry)


def test_published_config_through_the_cli() -> None:
    proc = run("check", "--gpu", "rtx-4090", "--model", str(PUBLISHED_4B), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["model"]["n_params"] == 3_880_263_168


def _sparse(config: dict[str, Any]) -> dict[str, Any]:
    """A config as transformers saves it: only the keys that differ from the class defaults."""
    defaults = {**HF_DEFAULTS[config["model_type"]], **_derived_defaults(config["model_type"],
                                                                          config["num_hidden_layers"])}
    return {k: v for k, v in config.items() if not (k in defaults and defaults[k] == v)}


@pytest.mark.parametrize("model_id", sorted(load_model_db()))
def test_defaults_table_agrees_with_every_entry(model_id: str) -> None:
    """Each entry, stripped to the keys that differ from its class's defaults, fills back to the same model."""
    entry = load_model_db()[model_id]
    sparse = _sparse(entry.config.model_dump(exclude_unset=True))
    filled, class_name, keys = fill_hf_defaults(sparse)
    assert class_name and keys
    spec = spec_from_config(HFTextConfig.model_validate(filled), entry.id, entry.name)
    assert spec == entry_spec(entry)


def test_text_config_without_model_type_takes_the_composite_class(tmp_path: Path) -> None:
    path = write(tmp_path, with_text(model_type=...))
    assert same_model(resolve_model(str(path)).spec, resolve_model("gemma-3-4b").spec)


def test_missing_value_named_as_a_default_when_it_is_wrong(tmp_path: Path) -> None:
    """A default that does not fit the file's other values is named as the default it is."""
    path = write(tmp_path, with_text(num_attention_heads=2))
    with pytest.raises(BadInput, match=r"text_config\.num_key_value_heads: 4 must divide num_attention_heads 2"):
        resolve_model(str(path))


# --- items 1-3: reading the file ---------------------------------------------------------------


def test_utf8_with_bom_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(codecs.BOM_UTF8 + PUBLISHED_4B.read_bytes())
    assert resolve_model(str(path)).spec.n_layer == 34


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ('{"model_type": "gemma3_text", "name": "caf\u00e9"}'.encode("latin-1"), "not UTF-8 text (byte 0xe9"),
        (codecs.BOM_UTF16_LE + '{"model_type": "gemma"}'.encode("utf-16-le"), "is UTF-16 text"),
        (codecs.BOM_UTF16_BE + '{"model_type": "gemma"}'.encode("utf-16-be"), "is UTF-16 text"),
        (codecs.BOM_UTF32_LE + '{"model_type": "gemma"}'.encode("utf-32-le"), "is UTF-32 text"),
        ('{"model_type": "gemma"}'.encode("utf-16-le"), "not valid JSON"),  # no BOM: NUL bytes
        (bytes(range(256)) * 4, "not UTF-8 text"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "not UTF-8 text"),
        (b"", "not valid JSON"),
        (b"[" * 200_000 + b"]" * 200_000, "nested too deeply"),
        (b'{"hidden_size": ' + b"9" * 5000 + b"}", "not valid JSON"),
    ],
    ids=["latin-1", "utf-16-le", "utf-16-be", "utf-32", "utf-16-no-bom", "binary", "png", "empty", "deep", "bigint"],
)
def test_undecodable_file_is_bad_input(tmp_path: Path, data: bytes, message: str) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(data)
    with pytest.raises(BadInput, match="config.json: ") as exc:
        resolve_model(str(path))
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_latin1_and_utf16_through_the_cli(tmp_path: Path) -> None:
    latin = tmp_path / "latin.json"
    latin.write_bytes('{"model_type": "gemma", "x": "\u00e9"}'.encode("latin-1"))
    assert_one_line_exit_2(run("check", "--gpu", "rtx-4090", "--model", str(latin)), "latin.json", "not UTF-8")
    utf16 = tmp_path / "utf16.json"
    utf16.write_bytes(codecs.BOM_UTF16_LE + PUBLISHED_4B.read_text().encode("utf-16-le"))
    assert_one_line_exit_2(run("check", "--gpu", "rtx-4090", "--model", str(utf16)), "utf16.json", "UTF-16")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    """Nobody writes to the FIFO: a tool that opened it for reading would wait forever (the timeout)."""
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    assert_one_line_exit_2(run("check", "--gpu", "rtx-4090", "--model", str(fifo)), "FIFO", "config.json")
    assert_one_line_exit_2(run("check", "--gpu", "rtx-4090", "--model", str(tmp_path)), "FIFO")


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom", "/dev/null"])
def test_devices_are_refused_before_reading(device: str) -> None:
    if not os.path.exists(device):
        pytest.skip(f"no {device}")
    assert_one_line_exit_2(run("check", "--gpu", "rtx-4090", "--model", device), device, "character device")


def test_symlink_to_a_device_is_refused(tmp_path: Path) -> None:
    if not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero")
    link = tmp_path / "config.json"
    link.symlink_to("/dev/zero")
    with pytest.raises(BadInput, match="character device"):
        resolve_model(str(tmp_path))


def test_huge_file_is_refused_by_its_size(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    with path.open("wb") as f:
        f.truncate(MAX_CONFIG_BYTES + 1)  # sparse: no disk space used
    with pytest.raises(BadInput, match=r"too large for a config\.json .*16 MiB"):
        resolve_model(str(path))


@pytest.mark.parametrize(
    ("layout", "message"),
    [("empty", "a folder without a config.json"), ("dir", "is a directory"), ("missing.json", "not found")],
)
def test_folders_and_missing_files(tmp_path: Path, layout: str, message: str) -> None:
    target = tmp_path / "model"
    target.mkdir()
    if layout == "dir":
        (target / "config.json").mkdir()
    if layout == "missing.json":
        target = target / "missing.json"
    with pytest.raises(BadInput, match=message):
        resolve_model(str(target))


def test_path_with_a_newline_stays_on_one_line(tmp_path: Path) -> None:
    path = tmp_path / "bad\nname.json"
    path.write_text("[1]", encoding="utf-8")
    with pytest.raises(BadInput) as exc:
        resolve_model(str(path))
    assert "\n" not in str(exc.value) and "bad\\nname.json" in str(exc.value)


@pytest.mark.parametrize("value", [[1, 2], "gemma3_text", 3, 2.5, None, True], ids=repr)
def test_text_config_that_is_not_an_object(tmp_path: Path, value: Any) -> None:
    doc = published_4b()
    doc["text_config"] = value
    with pytest.raises(BadInput, match=r"config\.json: text_config: expected a JSON object, got "):
        resolve_model(str(write(tmp_path, doc)))


@pytest.mark.parametrize("doc", [[1, 2], "gemma", 3, None, True], ids=repr)
def test_top_level_that_is_not_an_object(tmp_path: Path, doc: Any) -> None:
    with pytest.raises(BadInput, match="expected a JSON object at the top level"):
        resolve_model(str(write(tmp_path, doc)))


def test_not_an_object_through_the_cli(tmp_path: Path) -> None:
    doc = published_4b()
    doc["text_config"] = None
    proc = run("check", "--gpu", "rtx-4090", "--model", str(write(tmp_path, doc)))
    assert_one_line_exit_2(proc, "text_config: expected a JSON object, got null")


# --- items 5-6: nonsense values and limits -------------------------------------------------------

NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        *[(k, v, m) for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                              "head_dim", "vocab_size", "max_position_embeddings")
          for v, m in ((0, "greater than or equal to 1"), (-5, "greater than or equal to 1"),
                       ("2560", "valid integer, got '2560' (str)"), (True, "valid integer, got True (bool)"),
                       (2560.0, "valid integer"), (None, "valid integer"))],
        ("sliding_window", -1, "greater than or equal to 0"),
        ("rms_norm_eps", 0, "greater than 0"),
        ("rms_norm_eps", -1e-6, "greater than 0"),
        ("rms_norm_eps", 1, "less than 1"),
        ("rms_norm_eps", NAN, "finite"),
        ("rms_norm_eps", "1e-6", "valid number"),
        ("num_key_value_heads", 16, "16 must divide num_attention_heads 8"),
        ("num_key_value_heads", 3, "3 must divide num_attention_heads 8"),
        ("num_key_value_heads", 0, "greater than or equal to 1"),
        ("rope_theta", NAN, "finite"),
        ("rope_theta", INF, "finite"),
        ("rope_theta", -1.0, "greater than 0"),
        ("rope_local_base_freq", INF, "finite"),
        ("query_pre_attn_scalar", NAN, "finite"),
        ("final_logit_softcapping", INF, "finite"),
        ("attn_logit_softcapping", -30.0, "greater than or equal to 0"),
        ("rope_scaling", {"factor": NAN, "rope_type": "linear"}, "nan is not a finite number"),
        ("rope_scaling", {"factor": -8.0, "rope_type": "linear"}, "is outside (0, 1e+06]"),
        ("rope_scaling", {"factor": "8", "rope_type": "linear"}, "expected a number"),
        ("rope_scaling", [8.0], "valid dictionary"),
        ("layer_types", ["sliding_attention"] * 33, "has 33 entries for 34 layers"),
        ("layer_types", ["sliding_attention"] * 33 + ["global"], "'sliding_attention' or 'full_attention'"),
        ("intermediate_size", [10240] * 35, "has 35 entries for 34 layers"),
        ("tie_word_embeddings", "yes", "valid boolean"),
        ("initializer_range", NAN, "nan is not a finite number"),  # an unknown key: still finite
        # item 6: far above any published model, refused before any work
        ("num_hidden_layers", 100_000, "less than or equal to 1024 (1024 layers is gemma-fit's limit"),
        ("hidden_size", 10**7, "65536 is gemma-fit's limit"),
        ("intermediate_size", 2**21, "1048576 is gemma-fit's limit"),
        ("vocab_size", 10**9, "2097152 tokens is gemma-fit's limit"),
        ("num_attention_heads", 4096, "1024 heads is gemma-fit's limit"),
        ("head_dim", 10**6, "4096 is gemma-fit's limit"),
        ("max_position_embeddings", 2**40, "16777216 tokens is gemma-fit's limit"),
        ("sliding_window", 2**40, "16777216 tokens is gemma-fit's limit"),
    ],
    ids=lambda v: repr(v)[:30],
)
def test_nonsense_value_names_the_field(tmp_path: Path, key: str, value: Any, message: str) -> None:
    path = write(tmp_path, with_text(**{key: value}))
    with pytest.raises(BadInput) as exc:
        resolve_model(str(path))
    text = str(exc.value)
    assert f"config.json: text_config.{key}" in text, text
    assert message in text and "\n" not in text, text


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"num_kv_shared_layers": 30}, "num_kv_shared_layers", "must be smaller than num_hidden_layers 30"),
        ({"enable_moe_block": True}, "enable_moe_block", "needs num_experts"),
        ({"enable_moe_block": True, "num_experts": 8, "top_k_experts": 9, "moe_intermediate_size": 64},
         "top_k_experts", "9 is more than num_experts 8"),
        ({"num_experts": 10**6}, "num_experts", "4096 experts is gemma-fit's limit"),
        ({"num_global_key_value_heads": 3}, "num_global_key_value_heads", "must divide num_attention_heads 8"),
        ({"rope_parameters": {"full_attention": {"rope_theta": NAN}}},
         "rope_parameters.full_attention.rope_theta", "not a finite number"),
        ({"rope_parameters": {"full_attention": {"rope_theta": 0}}},
         "rope_parameters.full_attention.rope_theta", "outside"),
        ({"rope_parameters": {"full_attention": 5}}, "rope_parameters.full_attention", "expected a mapping"),
        ({"rope_parameters": {"full_attention": {"partial_rotary_factor": 2}}},
         "rope_parameters.full_attention.partial_rotary_factor", "outside (0, 1]"),
        ({"global_head_dim": 0}, "global_head_dim", "greater than or equal to 1"),
        ({"hidden_size_per_layer_input": -256}, "hidden_size_per_layer_input", "greater than or equal to 0"),
    ],
)
def test_gemma4_fields(tmp_path: Path, changes: dict[str, Any], field: str, message: str) -> None:
    doc = {"model_type": "gemma4", "architectures": ["Gemma4ForConditionalGeneration"],
           "text_config": {"model_type": "gemma4_text", "hidden_size": 1536, "num_hidden_layers": 30, **changes}}
    with pytest.raises(BadInput) as exc:
        resolve_model(str(write(tmp_path, doc)))
    assert f"text_config.{field}: " in str(exc.value) and message in str(exc.value), str(exc.value)


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"activation_sparsity_pattern": [0.95] * 3}, "activation_sparsity_pattern", "has 3 entries for 35 layers"),
        ({"activation_sparsity_pattern": [1.5] * 35}, "activation_sparsity_pattern[0]", "less than 1"),
        ({"altup_num_inputs": 1}, "altup_num_inputs", "greater than or equal to 2"),
        ({"altup_active_idx": 4}, "altup_active_idx", "4 must be below altup_num_inputs 4"),
        ({"laurel_rank": 0}, "laurel_rank", "greater than or equal to 1"),
        ({"vocab_size_per_layer_input": -1}, "vocab_size_per_layer_input", "greater than or equal to 1"),
    ],
)
def test_gemma3n_fields(tmp_path: Path, changes: dict[str, Any], field: str, message: str) -> None:
    doc = {"model_type": "gemma3n", "text_config": {"model_type": "gemma3n_text", **changes}}
    with pytest.raises(BadInput) as exc:
        resolve_model(str(write(tmp_path, doc)))
    assert f"text_config.{field}: " in str(exc.value) and message in str(exc.value), str(exc.value)


def test_gemma3n_without_altup_is_bad_input(tmp_path: Path) -> None:
    doc = {"model_type": "gemma3n", "text_config": {"model_type": "gemma3n_text", "altup_num_inputs": None}}
    with pytest.raises(BadInput, match="needs altup_num_inputs"):
        resolve_model(str(write(tmp_path, doc)))


def test_not_a_gemma_model_type(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match=r"text_config\.model_type: model_type 'llama' is not a Gemma"):
        resolve_model(str(write(tmp_path, with_text(model_type="llama"))))
    with pytest.raises(BadInput, match=r"model_type: missing"):
        resolve_model(str(write(tmp_path, {"hidden_size": 8})))
    with pytest.raises(BadInput, match=r"model_type: model_type '7' is not a Gemma"):
        resolve_model(str(write(tmp_path, {"model_type": 7})))


def test_largest_allowed_config_is_accepted(tmp_path: Path) -> None:
    """The limits refuse nothing they allow: every size at its limit still resolves (the plan is not built)."""
    path = write(tmp_path, with_text(num_hidden_layers=MAX_LAYERS, hidden_size=65536, intermediate_size=2**20,
                                     vocab_size=2**21, num_attention_heads=1024, num_key_value_heads=1024,
                                     head_dim=4096, max_position_embeddings=2**24, sliding_window=2**24))
    assert resolve_model(str(path)).spec.n_layer == MAX_LAYERS


@pytest.mark.parametrize(
    ("key", "value", "needle"),
    [
        ("num_hidden_layers", 100_000, "text_config.num_hidden_layers: Input should be less than or equal to 1024"),
        ("hidden_size", -2560, "text_config.hidden_size: Input should be greater than or equal to 1"),
        ("hidden_size", "2560", "text_config.hidden_size: Input should be a valid integer"),
        ("rope_theta", NAN, "text_config.rope_theta"),  # json.dumps writes NaN, as Python's json reads it
    ],
)
def test_nonsense_through_the_cli(tmp_path: Path, key: str, value: Any, needle: str) -> None:
    path = write(tmp_path, with_text(**{key: value}))
    assert_one_line_exit_2(run("check", "--gpu", "rtx-4090", "--model", str(path)), needle)


# --- item 8: properties ---------------------------------------------------------------------------

NUMERIC_FIELDS = [
    "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "head_dim", "vocab_size", "max_position_embeddings", "rms_norm_eps", "sliding_window", "rope_theta",
    "rope_local_base_freq", "query_pre_attn_scalar", "final_logit_softcapping", "attn_logit_softcapping",
]
GEMMA4_FIELDS = [
    "global_head_dim", "num_global_key_value_heads", "num_kv_shared_layers", "hidden_size_per_layer_input",
    "vocab_size_per_layer_input", "num_experts", "top_k_experts", "moe_intermediate_size",
]
GEMMA3N_FIELDS = ["altup_num_inputs", "altup_active_idx", "laurel_rank", "num_kv_shared_layers",
                  "hidden_size_per_layer_input"]
# Values users and fuzzers write: small and huge, negative, zero, floats, strings, bools, null, NaN, inf.
values = st.one_of(
    st.integers(min_value=-4, max_value=64),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, 1, 2, 256, 1023, 1024, 1025, 2**16, 2**21, 2**24, 2**31, 2**63, -(2**63)]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.5, 1.0, 1e-6, 2560.0, -0.0]),
    st.text(max_size=8),
    st.sampled_from(["2560", "NaN", "", "1e-6"]),
    st.booleans(),
    st.none(),
    st.lists(st.integers(min_value=-2, max_value=64), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**40), max_value=2**40) | st.floats() | st.text(max_size=6),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=12,
)
PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _resolve_or_bad_input(path: Path, doc: Any) -> None:
    """Never anything but success or BadInput; on success the tensor plan builds and counts."""
    path.write_text(json.dumps(doc), encoding="utf-8")  # NaN / Infinity written as JSON's extension
    try:
        resolved = resolve_model(str(path))
    except BadInput as exc:
        message = str(exc)
        assert message and "\n" not in message and len(message) < 2000, message
        return
    spec = resolved.spec
    assert spec.n_layer <= MAX_LAYERS
    if spec.n_layer <= 64:  # build the plan where that is quick; larger ones resolve above
        plan = build_plan(spec, "Q4_K_M")
        assert plan.n_params > 0 and all(math.prod(t.shape) >= 0 for t in plan.tensors)


@PROPERTY
@given(field=st.sampled_from(NUMERIC_FIELDS), value=values)
def test_any_value_of_a_gemma3_field(tmp_path: Path, field: str, value: Any) -> None:
    _resolve_or_bad_input(tmp_path / "config.json", with_text(**{field: value}))


@PROPERTY
@given(field=st.sampled_from(NUMERIC_FIELDS + GEMMA4_FIELDS), value=values, moe=st.booleans())
def test_any_value_of_a_gemma4_field(tmp_path: Path, field: str, value: Any, moe: bool) -> None:
    text: dict[str, Any] = {"model_type": "gemma4_text", "hidden_size": 256, "num_hidden_layers": 12,
                            "intermediate_size": 512, field: value}
    if moe:
        text = {"enable_moe_block": True, "num_experts": 8, "top_k_experts": 2, "moe_intermediate_size": 64, **text}
    _resolve_or_bad_input(tmp_path / "config.json", {"model_type": "gemma4", "text_config": text})


@PROPERTY
@given(field=st.sampled_from(NUMERIC_FIELDS + GEMMA3N_FIELDS + ["activation_sparsity_pattern"]), value=values)
def test_any_value_of_a_gemma3n_field(tmp_path: Path, field: str, value: Any) -> None:
    text = {"model_type": "gemma3n_text", "hidden_size": 256, "num_hidden_layers": 10, "intermediate_size": 512,
            field: value}
    _resolve_or_bad_input(tmp_path / "config.json", {"model_type": "gemma3n", "text_config": text})


@PROPERTY
@given(changes=st.dictionaries(st.sampled_from(NUMERIC_FIELDS + ["layer_types", "rope_scaling", "model_type"]),
                               values | json_values, min_size=1, max_size=4))
def test_several_values_at_once(tmp_path: Path, changes: dict[str, Any]) -> None:
    _resolve_or_bad_input(tmp_path / "config.json", with_text(**changes))


@PROPERTY
@given(text_config=json_values, top=st.sampled_from(["gemma3", "gemma4", "gemma3n", "gemma2", None]))
def test_any_json_as_text_config(tmp_path: Path, text_config: Any, top: str | None) -> None:
    doc: dict[str, Any] = {"text_config": text_config}
    if top:
        doc["model_type"] = top
    _resolve_or_bad_input(tmp_path / "config.json", doc)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=200))
def test_any_bytes(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(data)
    try:
        resolve_model(str(path))
    except BadInput as exc:
        assert "\n" not in str(exc)
