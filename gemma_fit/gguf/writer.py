"""`gemma-fit synth`: a zero-weight GGUF of a model's exact layout, sparse on disk.

The header (metadata and tensor infos) is written with the gguf package; the tensor data region is
left as a hole (the file is extended with truncate), so a 27B model costs no disk space and about a
second. Written to a temporary file beside the target and renamed, so a failure leaves nothing.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFValueType, GGUFWriter

from gemma_fit.base.errors import BadInput
from gemma_fit.base.files import new_file_mode, refuse_input
from gemma_fit.base.text import printable
from gemma_fit.gguf.layout import pad, synth_file_bytes, synth_metadata
from gemma_fit.gguf.projector import ProjectorPlan, projector_metadata
from gemma_fit.gguf.tensors import TensorPlan


def _writer_for(plan: TensorPlan, path: Path) -> GGUFWriter:
    writer = GGUFWriter(path, arch=plan.model.arch)
    for kv in synth_metadata(plan):
        if kv.key == "general.architecture":
            continue  # GGUFWriter adds it from `arch`
        sub = GGUFValueType(int(kv.subtype)) if kv.subtype is not None else None
        writer.add_key_value(kv.key, kv.value, GGUFValueType(int(kv.vtype)), sub)
    for t in plan.tensors:
        # numpy order is the reverse of ggml's; a non-uint8 dtype keeps the shape as given
        writer.add_tensor_info(
            t.name, tuple(reversed(t.shape)), np.dtype(np.float32), t.n_bytes,
            raw_dtype=GGMLQuantizationType(t.type.id),
        )
    return writer


def write_synthetic_gguf(plan: TensorPlan, out: Path) -> int:
    """Write the zero-weight file for `plan` to `out`; return its size in bytes."""
    try:  # a name past the system's limit (ENAMETOOLONG) or an unreadable folder fails the first stat
        out = _target(Path(out))
    except OSError as exc:
        raise BadInput(f"cannot write {printable(str(out), 120)}: {exc.strerror or exc}") from None
    folder = out.parent if str(out.parent) else Path(".")
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".part", dir=folder)
    except OSError as exc:
        raise BadInput(f"cannot write to {printable(str(folder), 120)}: {exc.strerror or exc}") from None
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        writer = _writer_for(plan, tmp)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        writer.close()
        size = synth_file_bytes(plan)
        with open(tmp, "r+b") as f:
            header_end = f.seek(0, os.SEEK_END)
            if pad(header_end) + sum(pad(t.n_bytes) for t in plan.tensors) != size:
                raise RuntimeError("internal error: header size differs from the computed layout")
            f.truncate(size)  # zero-filled hole: sparse on disk
        os.chmod(tmp, new_file_mode(out))
        os.replace(tmp, out)
        return size
    except OSError as exc:
        raise BadInput(f"cannot write {printable(str(out), 120)}: {exc.strerror or exc}") from None
    finally:
        tmp.unlink(missing_ok=True)


def _target(out: Path) -> Path:
    """The file to write (a link's target: the link is kept), refused when it is an input of this command, a folder,
    or not a regular file."""
    refuse_input(out)
    shown = printable(str(out), 120)
    if out.is_dir():
        raise BadInput(f"output path is a folder: {shown}")
    if out.exists() and not out.is_file():
        # the file is written beside its target and renamed over it: that would replace /dev/null or a
        # pipe with a regular file (as root, for every program on the machine)
        raise BadInput(f"{shown}: is not a regular file; synth writes a GGUF file (give a file path)")
    if out.is_symlink():
        try:
            out = out.resolve()  # rename over the link's target, keeping the link
        except RuntimeError:  # a loop (RuntimeError before Python 3.13; OSError ELOOP after)
            raise BadInput(f"{shown}: a symbolic link loop") from None
    folder = out.parent if str(out.parent) else Path(".")
    if not folder.is_dir():
        raise BadInput(f"output folder does not exist: {printable(str(folder), 120)}")
    return out


def write_synthetic_projector(plan: ProjectorPlan, out: Path) -> int:
    """A zero-weight mmproj GGUF of `plan` (sparse, like write_synthetic_gguf); its size in bytes."""
    out = Path(out)
    try:
        odd = out.exists() and not out.is_file()
    except OSError as exc:  # a name past the system's limit
        raise BadInput(f"cannot write {printable(str(out), 120)}: {exc.strerror or exc}") from None
    if odd:
        raise BadInput(f"{printable(str(out), 120)}: is not a regular file")
    writer = GGUFWriter(out, arch="clip")
    for key, value in projector_metadata(plan):
        writer.add_key_value(key, value, _value_type(value),
                             GGUFValueType.FLOAT32 if isinstance(value, list) else None)
    for t in plan.tensors:
        writer.add_tensor_info(t.name, tuple(reversed(t.shape)), np.dtype(np.float32), t.n_bytes,
                               raw_dtype=GGMLQuantizationType(t.type.id))
    try:
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        writer.close()
        with open(out, "r+b") as f:
            header_end = f.seek(0, os.SEEK_END)
            size = pad(header_end) + sum(pad(t.n_bytes) for t in plan.tensors)
            f.truncate(size)
        return size
    except OSError as exc:
        raise BadInput(f"cannot write {printable(str(out), 120)}: {exc.strerror or exc}") from None


def _value_type(value: object) -> GGUFValueType:
    if isinstance(value, bool):
        return GGUFValueType.BOOL
    if isinstance(value, int):
        return GGUFValueType.UINT32
    if isinstance(value, float):
        return GGUFValueType.FLOAT32
    if isinstance(value, list):
        return GGUFValueType.ARRAY
    return GGUFValueType.STRING
