"""Stage 10, the command line: a thin typer front-end over gemma_fit.api and the presenters."""
