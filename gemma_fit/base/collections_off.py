"""Python's cyclic garbage collector paused around bulk work that makes no cycles.

A whole-database report keeps ~430k cells and each worker keeps its caches (tensor plans, placements, searches):
every collection of the oldest generation walks all of them again, and a report triggers many. Measured on the
2-core VM (benchmarks/bench_report.py --whole): the workers spend 15-20% less CPU with collections paused, at the
same peak memory, as the cells, estimates and predictions are plain records and dicts (reference counting frees
them). Reference counting still frees everything that is not in a cycle; the young generations are collected
between units of work (`collect_young`) so that a cycle some path does make is freed soon after.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collections_paused() -> Iterator[None]:
    """No automatic collection inside; the collector's previous state after."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def collect_young() -> None:
    """Collect the two younger generations (cheap: the long-lived caches sit in the oldest)."""
    gc.collect(1)
