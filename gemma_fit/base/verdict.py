"""The one answer vocabulary: go, tight, offload, no-go, with their order and exit statuses.

Every engine, table, ranking and exit path uses this enum. It is a str (``Verdict.GO == "go"``), so documents
and JSON carry the plain words the contract fixes. A report cell that could not be checked is not a verdict:
it is ``CELL_ERROR``, ranked after every verdict.
"""

from __future__ import annotations

from enum import StrEnum

from gemma_fit.base.errors import EXIT_NO_GO, EXIT_OFFLOAD, EXIT_OK


class Verdict(StrEnum):
    GO = "go"  # everything on the GPU(s), with the margin free
    TIGHT = "tight"  # everything on the GPU(s), under the margin
    OFFLOAD = "offload"  # runs, with layers or experts in system memory
    NO_GO = "no-go"  # does not run

    @property
    def rank(self) -> int:
        """0 for the best answer (go), 3 for the worst (no-go)."""
        return _ORDER.index(self)

    @property
    def exit_code(self) -> int:
        """The contract's exit status: 0 for go and tight, 3 for offload, 4 for no-go."""
        return _EXIT[self]

    @property
    def runs_on_gpu(self) -> bool:
        """The whole model stays in GPU (or unified) memory."""
        return self in (Verdict.GO, Verdict.TIGHT)

    @classmethod
    def worst(cls, verdicts: list[Verdict]) -> Verdict:
        """The worst of several answers (a plan over several stages is as good as its worst stage)."""
        return max(verdicts, key=lambda v: v.rank) if verdicts else cls.GO


_ORDER = (Verdict.GO, Verdict.TIGHT, Verdict.OFFLOAD, Verdict.NO_GO)
_EXIT = {Verdict.GO: EXIT_OK, Verdict.TIGHT: EXIT_OK, Verdict.OFFLOAD: EXIT_OFFLOAD, Verdict.NO_GO: EXIT_NO_GO}
VERDICTS = tuple(v.value for v in _ORDER)

CELL_ERROR = "error"  # a report cell no verdict could be given for (a setting that model refuses)
CELL_STATES = (*VERDICTS, CELL_ERROR)  # a report's summary, in this order


def cell_rank(state: str) -> int:
    """The order of a report cell's state: the verdicts, then an error."""
    return CELL_STATES.index(state)
