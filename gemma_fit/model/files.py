"""Reading what users and the database give as files: a Hugging Face config.json (bounded, typed,
transformers' defaults filled in) and one model_db entry. The pydantic schema is imported here, only
when a file is actually read; resolving a database id needs none of it (gemma_fit.db.snapshot).
"""

from __future__ import annotations

import codecs
import json
import os
import stat
from collections.abc import Collection
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gemma_fit.base.errors import BadInput, DatabaseError
from gemma_fit.base.files import note_input
from gemma_fit.db.files import shown as _shown
from gemma_fit.db.files import stat_path
from gemma_fit.db.yaml_files import read_yaml
from gemma_fit.model.schema import (
    TEXT_MODEL_TYPE,
    HFTextConfig,
    ModelEntry,
    dotted,
    error_loc,
    explain_config_error,
    fill_hf_defaults,
)
from gemma_fit.model.spec import ModelSpec, gemma_arch, spec_from_config


def _format_validation(path: Path, exc: ValidationError, prefix: tuple[str | int, ...] = (),
                       filled: Collection[str] = (), class_name: str | None = None) -> str:
    """`path: field: problem` for the first error; `prefix` is where the validated object sits in the file."""
    errors = exc.errors()
    err = errors[0]
    loc = error_loc(dict(err))
    msg = explain_config_error(dict(err))
    if loc and loc[0] in filled:
        msg += f" (the file has no {loc[0]}: this is transformers' {class_name} default)"
    more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
    return _shown(f"{path}: {dotted((*prefix, *loc))}: {msg}{more}")


def load_entry(path: Path) -> ModelEntry:
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise DatabaseError(f"{path}: expected a mapping at the top level")
    try:
        return ModelEntry.model_validate(data)
    except ValidationError as exc:
        raise DatabaseError(_format_validation(path, exc)) from None


# A real config.json is a few KiB (the largest Gemma one, with every layer_types entry, under 10 KiB);
# reading stops at 16 MiB, so /dev/zero or a multi-GB file cannot exhaust memory.
MAX_CONFIG_BYTES = 16 * 2**20
_FILE_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
               (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _not_regular(path: Path, mode: int) -> BadInput:
    kind = next((name for test, name in _FILE_KINDS if test(mode)), "something else")
    return BadInput(f"{_shown(path)}: is {kind}, not a config.json file; give a config.json or the folder "
                    "that holds it")


def _read_bounded(path: Path) -> bytes:
    """The bytes of a regular file of at most MAX_CONFIG_BYTES, checked before and after opening."""
    st = stat_path(path)
    if st is None:
        raise BadInput(f"config file not found: {_shown(path)}")
    if not stat.S_ISREG(st.st_mode):
        raise _not_regular(path, st.st_mode)
    limit = f"a config.json is a few KiB; gemma-fit reads at most {MAX_CONFIG_BYTES // 2**20} MiB"
    if st.st_size > MAX_CONFIG_BYTES:
        raise BadInput(f"{_shown(path)}: {st.st_size} bytes is too large for a config.json ({limit})")
    try:
        # O_NONBLOCK: should the path have become a FIFO since the stat, opening it cannot hang.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise BadInput(f"cannot read {_shown(path)}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        mode = st.st_mode
        if not stat.S_ISREG(mode):
            raise _not_regular(path, mode)
        note_input(st)
        try:
            data = f.read(MAX_CONFIG_BYTES + 1)
        except OSError as exc:
            raise BadInput(f"cannot read {_shown(path)}: {exc.strerror or exc}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise BadInput(f"{_shown(path)}: more than {MAX_CONFIG_BYTES} bytes is too large for a config.json ({limit})")
    return data


def _decode(path: Path, data: bytes) -> str:
    """UTF-8 text (a UTF-8 byte-order mark is dropped, as Python's utf-8-sig does); anything else is refused."""
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8):]
    for bom, name in ((codecs.BOM_UTF32_LE, "UTF-32"), (codecs.BOM_UTF32_BE, "UTF-32"),
                      (codecs.BOM_UTF16_LE, "UTF-16"), (codecs.BOM_UTF16_BE, "UTF-16")):
        if data.startswith(bom):
            raise BadInput(f"{_shown(path)}: is {name} text; a config.json must be UTF-8 (re-save it as UTF-8)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput(f"{_shown(path)}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
                       "a config.json is UTF-8 JSON") from None


def _json_type(value: object) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "a number",
             float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _parse(path: Path, text: str) -> dict[str, Any]:
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInput(f"{_shown(path)}: not valid JSON: {exc.msg} at line {exc.lineno}") from None
    except RecursionError:
        raise BadInput(f"{_shown(path)}: not valid JSON: nested too deeply") from None
    except ValueError as exc:  # e.g. an integer with more digits than Python converts
        raise BadInput(f"{_shown(path)}: not valid JSON: {str(exc).splitlines()[0]}") from None
    if not isinstance(raw, dict):
        raise BadInput(f"{_shown(path)}: expected a JSON object at the top level, got {_json_type(raw)}")
    return raw


def _text_config(path: Path, raw: dict[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The text model's config (a multimodal config's text_config) and where it sits in the file."""
    if "text_config" not in raw:
        return dict(raw), ()
    text = raw["text_config"]
    if not isinstance(text, dict):
        raise BadInput(f"{_shown(path)}: text_config: expected a JSON object, got {_json_type(text)}")
    text = dict(text)
    top_type = raw.get("model_type")
    if "model_type" not in text and isinstance(top_type, str) and top_type in TEXT_MODEL_TYPE:
        text["model_type"] = TEXT_MODEL_TYPE[top_type]  # the composite class's text_config class
    if "architectures" not in text and "architectures" in raw:
        text["architectures"] = raw["architectures"]
    return text, ("text_config",)


def from_config_file(path: Path, st: os.stat_result) -> tuple[ModelSpec, str]:
    if stat.S_ISDIR(st.st_mode):
        cfg_path = path / "config.json"
        if stat_path(cfg_path) is None:
            raise BadInput(f"{_shown(path)}: a folder without a config.json")
    else:
        cfg_path = path
    raw = _parse(cfg_path, _decode(cfg_path, _read_bounded(cfg_path)))
    text, prefix = _text_config(cfg_path, raw)
    if "model_type" not in text:
        raise BadInput(f"{_shown(cfg_path)}: {dotted((*prefix, 'model_type'))}: missing (a Gemma config names its "
                       "model_type, e.g. gemma3_text)")
    try:
        gemma_arch(text["model_type"])
    except BadInput as exc:
        raise BadInput(_shown(f"{cfg_path}: {dotted((*prefix, 'model_type'))}: {exc}")) from None
    text, class_name, filled = fill_hf_defaults(text)
    try:
        config = HFTextConfig.model_validate(text)
    except ValidationError as exc:
        raise BadInput(_format_validation(cfg_path, exc, prefix, filled, class_name)) from None
    model_id = (path if stat.S_ISDIR(st.st_mode) else path.parent).name or cfg_path.stem
    try:
        spec = spec_from_config(config, model_id=model_id, name=model_id)
    except BadInput as exc:
        raise BadInput(_shown(f"{cfg_path}: {exc}")) from None
    how = f"from {_shown(cfg_path)}"
    if filled:
        shown = ", ".join(filled[:6]) + (", ..." if len(filled) > 6 else "")
        how += f" ({len(filled)} keys it leaves out from transformers' {class_name} defaults: {shown})"
    return spec, how
