"""`python -m gemma_fit ...`: the same as the gemma-fit command."""

from gemma_fit.cli.entry import run

run()
