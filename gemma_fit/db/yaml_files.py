"""Reading YAML with clear errors, in bounded time and memory: at most MAX_YAML_BYTES, at most MAX_YAML_NODES
values after following aliases (a "billion laughs" file is refused), no repeated keys where asked."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from gemma_fit.base.errors import DatabaseError
from gemma_fit.db.files import MAX_YAML_BYTES, MAX_YAML_NODES, read_text, shown

# libyaml's safe loader is ~10x faster than the pure-Python one.
_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_MERGE_TAG = "tag:yaml.org,2002:merge"
# An alias (`*name`) follows a space, a flow indicator or the start of a line; files without one
# cannot expand, so the expansion count is skipped for them (the packaged databases have none).
_STAR_NAME = re.compile(r"\*[^\s\]},]")


def _may_have_alias(text: str) -> bool:
    """Cheap (a plain `in` first, then only around each `*`): a single regex with a look-behind
    alternative costs ~15 ms over the databases, more than all the rest of this check."""
    if "*" not in text:
        return False
    return any(m.start() == 0 or text[m.start() - 1] in " \t\r\n[{,-?:" for m in _STAR_NAME.finditer(text))


class _YAMLLimit(yaml.YAMLError):
    def __init__(self, problem: str, mark: Any = None) -> None:
        super().__init__(problem)
        self.problem = problem
        self.problem_mark = mark


def expanded_size(root: yaml.Node, limit: int) -> int:
    """How many nodes the document has once every alias is followed (a shared node counts each time
    it is used); _YAMLLimit past `limit` or on an alias that refers to itself. Iterative: no recursion."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            open_nodes.discard(key)
            total = 1
            if isinstance(node, yaml.SequenceNode):
                total += sum(sizes[id(c)] for c in node.value)
            elif isinstance(node, yaml.MappingNode):
                total += sum(sizes[id(k)] + sizes[id(v)] for k, v in node.value)
            if total > limit:
                raise _YAMLLimit(f"more than {limit:,} values (each use of a YAML alias counts again)",
                                 node.start_mark)
            sizes[key] = total
            continue
        if key in sizes:
            continue
        if key in open_nodes:
            raise _YAMLLimit("a YAML alias refers to a node that contains it (a recursive structure)",
                             node.start_mark)
        open_nodes.add(key)
        stack.append((node, True))
        if isinstance(node, yaml.SequenceNode):
            stack.extend((c, False) for c in node.value)
        elif isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                stack.extend(((k, False), (v, False)))
    return sizes[id(root)]


class UniqueKeyLoader(_LOADER):  # type: ignore[valid-type,misc]
    """The safe loader, refusing a mapping that repeats a key (PyYAML silently keeps the last one)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            seen: set[Any] = set()
            for key_node, _ in node.value:
                if key_node.tag == _MERGE_TAG:
                    continue  # `<<: *base` merges: keys given beside it override, as YAML says
                key = self.construct_object(key_node, deep=deep)
                try:
                    duplicate = key in seen
                    seen.add(key)
                except TypeError:
                    continue  # an unhashable key: the base constructor reports it
                if duplicate:
                    raise _YAMLLimit(f"duplicate key '{key}' (a key may appear once in a mapping)",
                                     key_node.start_mark)
        return super().construct_mapping(node, deep=deep)  # type: ignore[no-any-return]


def parse_yaml(text: str, path: Path, *, unique_keys: bool = False,
               max_nodes: int = MAX_YAML_NODES) -> tuple[Any, yaml.Node | None]:
    """The data of one YAML document and its node tree (for line numbers); DatabaseError naming the
    file and line on malformed YAML, a repeated key (with `unique_keys`) or an alias bomb."""
    loader = (UniqueKeyLoader if unique_keys else _LOADER)(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return None, None
        if unique_keys or _may_have_alias(text):
            expanded_size(root, max_nodes)
        return loader.construct_document(root), root
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{shown(path)}:{mark.line + 1}" if mark else shown(path)
        problem = getattr(exc, "problem", None) or (str(exc).splitlines() or [type(exc).__name__])[0]
        context = getattr(exc, "context", None)
        if context and problem.startswith("but "):  # "expected a single document in the stream, but found ..."
            problem = f"{context}, {problem}"
        raise DatabaseError(f"{where}: malformed YAML: {problem}") from None
    except (ValueError, OverflowError, RecursionError) as exc:  # e.g. a date 2001-02-30, a 5,000-digit int
        text_of = str(exc).split(";")[0].splitlines()[0] if str(exc) else type(exc).__name__
        raise DatabaseError(f"{shown(path)}: malformed YAML: a value cannot be read ({text_of})") from None
    finally:
        loader.dispose()


def read_yaml(path: Path, max_bytes: int = MAX_YAML_BYTES, *, unique_keys: bool = False,
              max_nodes: int = MAX_YAML_NODES) -> Any:
    """One YAML file's data. At most `max_bytes` are read (a FIFO, device or directory is refused
    without blocking); the text must be UTF-8; `unique_keys` refuses repeated keys (for files people
    write by hand; the packaged databases skip that check to keep a cold start fast)."""
    return parse_yaml(read_text(path, max_bytes), path, unique_keys=unique_keys, max_nodes=max_nodes)[0]


