"""The package's structure, measured on the tree (scripts/house.py): one subpackage per pipeline
stage, imports only down the pipeline (or within a stage), no cycles, small modules, short
parameter lists. A move that breaks one of these fails here, not in a review."""

from __future__ import annotations

import house  # scripts/house.py (conftest puts scripts/ on the path)

# The pipeline, bottom to top: a module may import its own stage or one below it.
STAGES = ("base", "db", "model", "gguf", "hardware", "memory", "speed", "engines", "present", "jobs",
          "api", "cli", "main")
MAX_MODULE_LINES = 400
MAX_PARAMETERS = 15
# Typer reads a command's options from its signature: those declarations are the CLI's surface.
CLI_DECLARATIONS = "gemma_fit.cli."


stage = house.stage


def test_every_module_is_in_a_stage() -> None:
    assert {stage(m) for m in house.modules()} <= set(STAGES)


def test_no_import_cycles() -> None:
    mods = house.modules()
    assert house.cycles(sorted(mods), house.arrows(mods)) == []


def test_imports_point_down_the_pipeline() -> None:
    mods = house.modules()
    rank = {name: i for i, name in enumerate(STAGES)}
    upward = sorted((a, b) for a, b in house.arrows(mods) if rank[stage(b)] > rank[stage(a)])
    assert upward == []


# The command line stands on the public API: it imports the API, the presenters and the foundation, nothing else.
CLI_MAY_IMPORT = ("api", "present", "base", "cli", "main")


def test_the_cli_imports_only_the_api_the_presenters_and_the_foundation() -> None:
    mods = house.modules()
    below_api = sorted((a, b) for a, b in house.arrows(mods)
                       if stage(a) == "cli" and stage(b) not in CLI_MAY_IMPORT)
    assert below_api == []


def test_modules_are_small() -> None:
    long = [(n, m.lines) for n, m in house.modules().items() if m.lines > MAX_MODULE_LINES]
    assert long == []


def test_functions_take_few_parameters() -> None:
    many = [(n, f) for n, f in house.parameters(house.modules())
            if n > MAX_PARAMETERS and not f.startswith(CLI_DECLARATIONS)]
    assert many == []
