"""The structure of the gemma_fit package, measured on the tree (issue 13).

Prints the number of modules, the import arrows between them (every `import`/`from` of another
gemma_fit module, including ones inside functions), the cycles (strongly connected groups),
the import floors (longest chain), the longest modules and the functions with the most
parameters. `--json` prints the same as one object. tests/test_house.py asserts the rules.
"""

from __future__ import annotations

import ast
import json
import sys
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "gemma_fit"


@dataclass(frozen=True)
class Module:
    name: str  # dotted, e.g. gemma_fit.memory.estimate
    path: Path
    tree: ast.Module

    @property
    def lines(self) -> int:
        return len(self.path.read_text(encoding="utf-8").splitlines())


def modules(package: Path = PACKAGE) -> dict[str, Module]:
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        name = ".".join(parts)
        found[name] = Module(name, path, ast.parse(path.read_text(encoding="utf-8")))
    return found


def _resolve(mod: Module, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = mod.name.split(".")
    if mod.path.name != "__init__.py":
        base.pop()
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def arrows(mods: dict[str, Module]) -> set[tuple[str, str]]:
    """(importer, imported) pairs inside the package; `from pkg import sub` counts as pkg.sub."""
    out: set[tuple[str, str]] = set()
    for mod in mods.values():
        for node in ast.walk(mod.tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(mod, node)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            for target in targets:
                while target and target not in mods:
                    target = target.rpartition(".")[0]
                if target and target != mod.name and target.startswith("gemma_fit"):
                    out.add((mod.name, target))
    return out


def cycles(names: list[str], edges: set[tuple[str, str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan)."""
    graph: dict[str, list[str]] = {n: [] for n in names}
    for a, b in edges:
        graph[a].append(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    sys.setrecursionlimit(10_000)
    for n in names:
        if n not in index:
            visit(n)
    return groups


def floors(names: list[str], edges: set[tuple[str, str]]) -> int:
    """The longest import chain, counted in modules (cycles collapsed by ignoring back edges)."""
    graph: dict[str, list[str]] = {n: [] for n in names}
    for a, b in edges:
        graph[a].append(b)
    depth: dict[str, int] = {}
    visiting: set[str] = set()

    def d(v: str) -> int:
        if v in depth:
            return depth[v]
        visiting.add(v)
        depth[v] = 1 + max((d(w) for w in graph[v] if w not in visiting), default=0)
        visiting.discard(v)
        return depth[v]

    return max((d(n) for n in names), default=0)


def parameters(mods: dict[str, Module]) -> list[tuple[int, str]]:
    out = []
    for mod in mods.values():
        for node in ast.walk(mod.tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                n = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs)
                n -= 1 if a.args and a.args[0].arg in ("self", "cls") else 0
                out.append((n, f"{mod.name}.{node.name}"))
    return sorted(out, reverse=True)


def stage(module: str) -> str:
    """A module's pipeline stage: its subpackage (gemma_fit itself is the API, __main__ the entry point)."""
    parts = module.split(".")
    if len(parts) == 1:
        return "api"
    return "main" if parts[1] == "__main__" else parts[1]


def measure(package: Path = PACKAGE) -> dict[str, object]:
    mods = modules(package)
    names = sorted(mods)
    edges = arrows(mods)
    stage_edges = {(stage(a), stage(b)) for a, b in edges if stage(a) != stage(b)}
    return {
        "modules": len(mods),
        "import_arrows": len(edges),
        "stages": len({stage(n) for n in names}),
        "stage_arrows": len(stage_edges),
        "cycles": cycles(names, edges),
        "floors": floors(names, edges),
        "longest_modules": sorted(((m.lines, n) for n, m in mods.items()), reverse=True)[:8],
        "most_parameters": parameters(mods)[:8],
    }


if __name__ == "__main__":
    figures = measure()
    if "--json" in sys.argv:
        print(json.dumps(figures, indent=1))
    else:
        for key, value in figures.items():
            print(f"{key}: {value}")
