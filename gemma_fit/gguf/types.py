"""ggml tensor types and llama.cpp file types, read from model_db/llamacpp/*.yaml."""

from __future__ import annotations

from functools import cache

from gemma_fit.base.errors import BadInput
from gemma_fit.base.record import record
from gemma_fit.base.text import has_unsafe, printable
from gemma_fit.db.rules import read_packaged_yaml


@record
class GGMLType:
    name: str
    id: int
    block: int  # elements per block
    bytes: int  # bytes per block

    def row_bytes(self, n_cols: int) -> int:
        """Bytes of one row of `n_cols` elements; the caller guarantees divisibility."""
        if n_cols % self.block:
            raise ValueError(f"{n_cols} columns are not a multiple of the {self.name} block ({self.block})")
        return n_cols // self.block * self.bytes

    def tensor_bytes(self, shape: tuple[int, ...]) -> int:
        rows = 1
        for dim in shape[1:]:
            rows *= dim
        return rows * self.row_bytes(shape[0])

    @property
    def is_quantized(self) -> bool:
        return self.block > 1

    @property
    def bits_per_weight(self) -> float:
        return self.bytes * 8 / self.block


@record
class FileType:
    """A llama.cpp file type (llama_ftype), e.g. Q4_K_M."""

    name: str
    id: int
    default_type: GGMLType
    recipe: bool = False  # a published mix (model_db/llamacpp/recipes.yaml), not a llama-quantize type
    mix_of: str | None = None  # an unpublished mix (Unsloth UD-*), modelled as this llama-quantize type's


@cache
def ggml_types() -> dict[str, GGMLType]:
    data = read_packaged_yaml("llamacpp/ggml_types.yaml")
    return {name: GGMLType(name=name, **fields) for name, fields in data["types"].items()}


@cache
def file_types() -> dict[str, FileType]:
    data = read_packaged_yaml("llamacpp/ftypes.yaml")
    types = ggml_types()
    out = {
        name: FileType(name=name, id=f["id"], default_type=types[f["default_type"]])
        for name, f in data["ftypes"].items()
    }
    for name, r in recipes().items():
        out[name] = FileType(name=name, id=out[r["ftype"]].id, default_type=types[r["default_type"]], recipe=True)
    for name, u in unsloth_ud().items():
        base = out[u["mix_of"]]
        out[name] = FileType(name=name, id=base.id, default_type=base.default_type, mix_of=base.name)
    for name, base_name in ud_plain_names().items():
        base = out[base_name]
        out.setdefault(name, FileType(name=name, id=base.id, default_type=base.default_type, mix_of=base.name))
    return out


def ud_plain_names() -> dict[str, str]:
    """UD-<llama.cpp type> -> that type, for every quantized type the contract names: Unsloth's Gemma 4 files are
    named so (gemma-4-26B-A4B-it-UD-Q4_K_M.gguf), and a user copies the name from the file."""
    return {f"UD-{q}": q for q in CONTRACT_QUANTS if q not in UNQUANTIZED}


def mix_type(ft: FileType) -> FileType:
    """The file type whose llama-quantize mix `ft`'s tensors follow: itself, or a UD recipe's base."""
    return file_types()[ft.mix_of] if ft.mix_of else ft


@cache
def recipes() -> dict[str, dict]:
    """Published tensor mixes by name (model_db/llamacpp/recipes.yaml)."""
    return dict(read_packaged_yaml("llamacpp/recipes.yaml")["recipes"])


@cache
def unsloth_ud() -> dict[str, dict]:
    """Unsloth's dynamic quants by name (model_db/llamacpp/unsloth_ud.yaml): their base mix and published sizes."""
    return dict(read_packaged_yaml("llamacpp/unsloth_ud.yaml")["unsloth_ud"])


@cache
def _aliases() -> dict[str, str]:
    out = {alias.upper().replace("-", "_"): name for name, r in recipes().items() for alias in r.get("aliases", [])}
    out |= {name.replace("-", "_"): name for name in (*unsloth_ud(), *ud_plain_names())}  # UD_Q4_K_XL, ud-q4_k_xl
    return out


def ggml_type(name: str) -> GGMLType:
    try:
        return ggml_types()[name.upper()]
    except KeyError:
        raise BadInput(f"unknown ggml type '{name}'") from None


# The file types the contract names; `gemma-fit list quants` shows these.
CONTRACT_QUANTS = (
    "Q2_K", "Q3_K_S", "Q3_K_M", "Q3_K_L", "Q4_0", "Q4_1", "Q4_K_S", "Q4_K_M", "Q5_0", "Q5_1",
    "Q5_K_S", "Q5_K_M", "Q6_K", "Q8_0", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M", "IQ3_XXS", "IQ3_S",
    "IQ3_M", "IQ4_NL", "IQ4_XS", "BF16", "F16", "F32",
)
UNQUANTIZED = ("F32", "F16", "BF16")  # the file types llama-quantize leaves unquantized


def quant_names() -> tuple[str, ...]:
    """The names `gemma-fit list quants` shows (the contract's file types, published mixes, Unsloth's): what a
    "did you mean" for a quant picks from."""
    return (*CONTRACT_QUANTS, *recipes(), *unsloth_ud())


def file_type(name: str) -> FileType:
    if has_unsafe(name):  # 'q4_k_m\n' or a bidi mark: refused as typed, never stripped into a valid name
        raise BadInput(f"unknown quant '{printable(name, 60)}': it holds a control or bidi character")
    key = name.strip().upper()
    key = _aliases().get(key.replace("-", "_"), key)
    if key not in file_types():
        key = key.replace("-", "_")
    try:
        return file_types()[key]
    except KeyError:
        from gemma_fit.base.suggest import did_you_mean

        hint = did_you_mean(name, quant_names()) or "; see gemma-fit list quants"
        raise BadInput(f"unknown quant '{printable(name.strip(), 60)}'{hint}") from None
