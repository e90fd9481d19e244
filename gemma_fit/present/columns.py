"""Tables that fit the terminal: every column has a priority; when the rows do not fit the width, the least
important columns go first. Ids (models, GPUs, quants) are never cut or wrapped: people copy them into the next
command. Text columns (names, notes) fold onto more lines instead of being cut."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from gemma_fit.base.record import record

if TYPE_CHECKING:
    from rich.table import Table

_GAP = 3  # between two columns: a cell's padding on each side and the box's (blank) divider


@record
class Col:
    header: str
    drop: int = 0  # 0: always shown; otherwise the higher, the sooner a narrow terminal drops it
    right: bool = False  # numbers, right-aligned
    fold: bool = False  # free text that may fold onto more lines (never an id)
    min_fold: int = 12  # the narrowest a folding column becomes


def _natural(col: Col, cells: Sequence[str]) -> int:
    """The width a column needs: its longest cell or header (a folding column, at least its min_fold)."""
    widest = max([len(col.header), *(len(c) for c in cells)])
    return min(widest, max(col.min_fold, len(col.header))) if col.fold else widest


def kept_columns(cols: Sequence[Col], rows: Sequence[Sequence[str]], width: int) -> list[int]:
    """The columns shown at `width` characters: all that fit, dropping the highest `drop` first."""
    keep = list(range(len(cols)))
    need = {i: _natural(c, [r[i] for r in rows]) for i, c in enumerate(cols)}
    droppable = sorted((i for i, c in enumerate(cols) if c.drop), key=lambda i: (-cols[i].drop, -i))
    for i in droppable:
        if sum(need[k] for k in keep) + _GAP * (len(keep) - 1) <= width:
            break
        keep.remove(i)
    return keep


def fitted_table(cols: Sequence[Col], rows: Sequence[Sequence[str]], width: int, title: str | None = None,
                 styles: Sequence[str | None] | None = None) -> Table:
    """A rich table of `rows` (already inert text: present.terminal.shown) that fits `width` as well as it can."""
    from rich import box
    from rich.table import Column, Table

    keep = kept_columns(cols, rows, width)
    columns = []
    for i in keep:
        c = cols[i]
        widest = max([len(c.header), *(len(r[i]) for r in rows)])
        columns.append(Column(c.header, justify="right" if c.right else "left", no_wrap=not c.fold,
                              overflow="fold", min_width=None if c.fold else widest, ratio=1 if c.fold else None))
    table = Table(*columns, box=box.SIMPLE_HEAD, title=title, title_justify="left", pad_edge=False, show_edge=False)
    for n, row in enumerate(rows):
        table.add_row(*(row[i] for i in keep), style=styles[n] if styles else None)
    return table
