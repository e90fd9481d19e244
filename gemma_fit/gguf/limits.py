"""The GGUF reader's limits on hostile input, and the budget a (split) model's headers draw them from.

The reader's modules (parse, reader) read these as `limits.NAME` when they check them, so a test can
lower one here (monkeypatch this module) and every check and message sees the same value.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Limits on hostile input, far above any real file. llama.cpp itself bounds these only by memory
# (GGUF_MAX_ARRAY_ELEMENTS and GGUF_MAX_STRING_LENGTH are 2^30), which a hostile header turns into
# minutes of parsing and gigabytes of Python objects; real headers are small:
# - tensors: 65,536 = llama.cpp's LLAMA_MAX_LAYERS (512) x 128 tensors a layer. Real files hold 300 to
#   1,200 (gemma-3-27b 808, Llama-3.1-405B 1,138; MoE experts are stacked in one tensor per layer);
#   the limit holds for all shards of a split model together.
# - KV pairs: real files have 20 to 60.
# - array elements: 2^22 per array, 8 x the longest real one (gemma-4's 514,906 BPE merges; vocabularies
#   are 32k to 262k tokens), and 2^23 over the whole header (gemma-4: 1.3 M), which caps the Python
#   objects a header becomes at a few hundred MB.
# - strings: 64 MiB (the longest real value is an embedded tokenizer.json of ~33 MB); keys 64 KiB.
# - header: 256 MiB per file and over all shards (gemma-4's, the biggest, is 16 MB); shards: 1,024.
# - tensor data: 32 TiB over all shards, 16 x the biggest published GGUF (Kimi-K2 in BF16, ~2 TB). Each
#   tensor must also lie inside its own file, but a sparse file can be 8 EiB on tmpfs or XFS, and a
#   split model could name 1,024 of them.
MAX_TENSORS = 65_536
MAX_KV = 65_536
MAX_ARRAY_LEN = 1 << 22
MAX_ARRAY_ELEMENTS = 1 << 23
MAX_STRING_BYTES = 64 * 1024 * 1024
MAX_KEY_BYTES = 64 * 1024
MAX_HEADER_BYTES = 256 * 1024 * 1024
MAX_ARRAY_DEPTH = 8
MAX_SHARDS = 1024
MAX_TENSOR_DATA_BYTES = 1 << 45


@dataclass
class Budget:
    """What is left for the rest of a (split) model's headers (the limits are read when it is made)."""

    header_bytes: int = field(default_factory=lambda: MAX_HEADER_BYTES)
    tensors: int = field(default_factory=lambda: MAX_TENSORS)
    array_elements: int = field(default_factory=lambda: MAX_ARRAY_ELEMENTS)
    tensor_data_bytes: int = field(default_factory=lambda: MAX_TENSOR_DATA_BYTES)
