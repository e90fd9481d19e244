"""llama.cpp's log, parsed as it arrives: the buffer sizes (model, KV, compute, output per buffer), the
prompt and decode speeds, whether it ran out of memory, and a short tail of the last lines.

Lines are capped at MAX_LINE_BYTES and only the figures and the tail are kept, so a log of any size
takes bounded memory (`gemma-fit smoke` feeds it from llama.cpp's output pipe, line by line).
"""

from __future__ import annotations

import re
import threading
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

MIB = 1024**2
MAX_LINE_BYTES = 4096  # a longer log line is cut here
PARSED_LINE_BYTES = 512  # the buffer and timing lines are under 200 bytes: longer ones are not searched
OOM_SEARCH_BYTES = 1024  # "out of memory" / "failed to allocate" is looked for in each line's start
TAIL_LINES = 20  # kept for the error message and the document
MAX_BUFFERS = 64  # distinct buffer names kept (llama.cpp prints a few per device)
TAIL_LINE_CHARS = 300

_BUFFER = re.compile(
    r"(?P<what>model|KV|compute|output) buffer size\s*=\s*(?P<mib>[\d.]+) MiB"
)
_BUFFER_NAME = re.compile(r"(?:load_tensors|llama_kv_cache\w*|sched_reserve|llama_context):\s+(?P<buf>\S+)\s+"
                          r"(?:model|KV|compute|output) buffer size")
_PROMPT = re.compile(r"prompt eval time =\s*[\d.]+ ms /\s*(\d+) tokens \(.*?([\d.]+) tokens per second\)")
_EVAL = re.compile(r"\beval time =\s*[\d.]+ ms /\s*(\d+) runs\s*\(.*?([\d.]+) tokens per second\)")

@dataclass
class Measured:
    buffers: dict[str, dict[str, int]] = field(default_factory=dict)  # buffer name -> {model, KV, compute, output}
    prefill_tokens_per_s: float | None = None
    decode_tokens_per_s: float | None = None
    peak_rss_bytes: int = 0
    peak_device_bytes: dict[int, int] = field(default_factory=dict)  # NVML: GPU index -> process peak
    log_tail: str = ""


_OOM = re.compile(rb"out of memory|failed to allocate", re.I)


class LogParser:
    """llama.cpp's log, one line at a time: the buffer and timing figures, whether it ran out of memory, and the
    last TAIL_LINES non-empty lines (each cut to TAIL_LINE_CHARS). Its state does not grow with the log."""

    def __init__(self) -> None:
        self.measured = Measured()
        self.out_of_memory = False
        self.n_lines = 0
        self._tail: deque[bytes] = deque(maxlen=TAIL_LINES)
        self._lock = threading.Lock()  # the reader thread feeds while the caller may read the tail

    def feed(self, raw: bytes | str) -> None:
        line = raw.encode("utf-8", "replace") if isinstance(raw, str) else raw
        line = line[:MAX_LINE_BYTES].strip()
        if not line:
            return
        with self._lock:
            self.n_lines += 1
            self._tail.append(line[:TAIL_LINE_CHARS * 4])
            head = line[:OOM_SEARCH_BYTES]
            if not self.out_of_memory and (b"emory" in head or b"EMORY" in head or b"lloc" in head or b"LLOC" in head) \
                    and _OOM.search(head):
                self.out_of_memory = True
            if len(line) > PARSED_LINE_BYTES:
                return
            if b"buffer size" in line:
                self._buffer_line(line.decode("utf-8", "replace"))
            elif b"eval time" in line:
                self._timing_line(line.decode("utf-8", "replace"))

    def _buffer_line(self, line: str) -> None:
        size, name = _BUFFER.search(line), _BUFFER_NAME.search(line)
        if size and name and (name.group("buf") in self.measured.buffers
                              or len(self.measured.buffers) < MAX_BUFFERS):
            slot = self.measured.buffers.setdefault(name.group("buf"), {"model": 0, "KV": 0, "compute": 0,
                                                                        "output": 0})
            slot[size.group("what")] += int(round(float(size.group("mib")) * MIB))

    def _timing_line(self, line: str) -> None:
        if (p := _PROMPT.search(line)) is not None:
            self.measured.prefill_tokens_per_s = float(p.group(2))
        elif (e := _EVAL.search(line)) is not None:
            self.measured.decode_tokens_per_s = float(e.group(2))

    def snapshot(self) -> Measured:
        """A copy of the figures so far (the reader thread may still be feeding)."""
        with self._lock:
            m = self.measured
            return Measured(buffers={k: dict(v) for k, v in m.buffers.items()},
                            prefill_tokens_per_s=m.prefill_tokens_per_s, decode_tokens_per_s=m.decode_tokens_per_s)

    def tail(self, n: int = 3) -> str:
        with self._lock:
            lines = list(self._tail)[-n:]
        return " | ".join(x.decode("utf-8", "replace")[:TAIL_LINE_CHARS] for x in lines) or "(no output)"


def parse_lines(lines: Iterable[bytes | str]) -> LogParser:
    parser = LogParser()
    for line in lines:
        parser.feed(line)
    return parser


def parse_log(text: str) -> Measured:
    return parse_lines(text.splitlines()).measured


def read_lines(stream: Any, limit: int = MAX_LINE_BYTES) -> Iterator[bytes]:
    """Lines of a binary stream, each cut to `limit` bytes (the rest of a longer line is skipped, never held)."""
    cut = False
    while True:
        chunk = stream.readline(limit)
        if not chunk:
            return
        whole = chunk.endswith(b"\n")
        if not cut:
            yield chunk
        cut = not whole
