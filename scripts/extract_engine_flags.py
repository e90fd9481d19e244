"""Extract the command-line flags of the engines gemma-fit prints commands for, from the engines' own sources.

The tests check every flag of a printed `vllm serve`, `ray start`, `llama-server` or `rpc-server` command against
the lists this script writes to tests/data/engine_flags/ (one option string per line, `#` lines are comments).
Nothing is imported from the engines and nothing is built: the Python sources are read with `ast`, the C++ ones
with a small tokenizer, so the script needs only the standard library and runs on newer sources as they come.

Run it from the repository root, one engine at a time (add --check to compare with the files already there
instead of writing them, --out DIR to write elsewhere):

    # vLLM: the unpacked wheel (the directory holding vllm/, or vllm/ itself) or the .whl file
    python scripts/extract_engine_flags.py vllm /tmp/vsrc/src/vllm
    # Ray: pip download --no-deps ray -d /tmp/raysrc; the .whl file or a directory holding ray/
    python scripts/extract_engine_flags.py ray /tmp/raysrc/ray-2.60.0-cp311-cp311-manylinux2014_x86_64.whl
    # llama.cpp: the source tree (common/arg.cpp, tools/rpc/rpc-server.cpp); the label names the files
    python scripts/extract_engine_flags.py llamacpp ~/.cache/gemma-fit/llama.cpp-0.3.36/src --label 0.3.36

What each file holds:

- vllm-serve-<version>.txt: every option string the `vllm serve` parser registers: the literal strings of
  the add_argument calls reached from ServeSubcommand.subparser_init (make_arg_parser, FrontendArgs and
  AsyncEngineArgs.add_cli_args), the `--<field-name>` flags generated from the FrontendArgs dataclass fields,
  argparse's -h/--help, and the `--no-X` forms BooleanOptionalAction adds to boolean flags (plus the
  `--enable-X`/`--disable-X` pairs of vLLM's EnableDisableAction). Whether a field is boolean is read from the
  config dataclass annotations (vllm/config/*.py), as get_kwargs does at run time.
- vllm-serve-<version>-choices.txt: `<flag> <enforced|not-enforced> <value> ...` for the options whose values
  come from a Literal type or a literal `choices=`; not-enforced means argparse accepts any string (the type
  also allows str, or the Literal is only seen by type checkers) and vLLM validates the value later, if at all.
- ray-start-<version>.txt: the click options of the `ray start` command (ray/scripts/scripts.py, and the
  logging options it takes from ray/autoscaler/_private/cli_logger.py), `--a/--b` flag pairs split, plus --help.
- llama-server-<label>.txt: the common_arg options of common/arg.cpp common_params_parser_init that
  LLAMA_EXAMPLE_SERVER keeps (its example set has SERVER, or COMMON, the default, and SERVER is not excluded),
  positive and negative (`--no-X`) spellings.
- rpc-server-<label>.txt: the strings rpc-server.cpp compares argv with in rpc_server_params_parse (checked
  against its print_usage text); the header names the executable tools/rpc/CMakeLists.txt builds (in recent
  llama.cpp it is ggml-rpc-server, not rpc-server) and the CMake switch it needs (GGML_RPC).

--example completion writes llama-completion-<label>.txt the same way, which can be compared with the output of
`llama-completion --help` from a build to check the example filtering.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "tests" / "data" / "engine_flags"
GENERATOR = "scripts/extract_engine_flags.py"


def warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


# --------------------------------------------------------------------------------------------------------------
# Reading sources: a directory or a wheel (zip)


class SourceTree:
    """Files of one package, from a directory or a wheel; paths are relative to the directory holding the package."""

    def __init__(self, path: Path, package: str):
        self.path = path
        self.package = package
        self.zip: zipfile.ZipFile | None = None
        if path.is_file() and zipfile.is_zipfile(path):
            self.zip = zipfile.ZipFile(path)
            self.names = {n for n in self.zip.namelist() if not n.endswith("/")}
            self.root = None
        else:
            if (path / package / "__init__.py").is_file():
                self.root = path
            elif path.name == package and (path / "__init__.py").is_file():
                self.root = path.parent
            else:
                raise SystemExit(f"{path}: neither a wheel nor a directory holding the {package} package")
            self.names = None
        self.read_files: list[str] = []

    def exists(self, rel: str) -> bool:
        if self.zip is not None:
            return rel in self.names
        return (self.root / rel).is_file()

    def read(self, rel: str) -> str | None:
        if not self.exists(rel):
            return None
        if rel not in self.read_files:
            self.read_files.append(rel)
        if self.zip is not None:
            return self.zip.read(rel).decode("utf-8")
        return (self.root / rel).read_text(encoding="utf-8")

    def py_files(self) -> list[str]:
        if self.zip is not None:
            return sorted(n for n in self.names if n.startswith(self.package + "/") and n.endswith(".py"))
        return sorted(str(p.relative_to(self.root)) for p in (self.root / self.package).rglob("*.py"))

    def raw(self, rel: str) -> str:
        """Read without recording the file as a source (for the fallback text search)."""
        if self.zip is not None:
            return self.zip.read(rel).decode("utf-8", errors="replace")
        return (self.root / rel).read_text(encoding="utf-8", errors="replace")


def module_version(tree: SourceTree, rel: str, names: tuple[str, ...]) -> dict[str, str]:
    """String constants assigned to `names` at module level (e.g. version, commit_id in _version.py)."""
    text = tree.read(rel)
    found: dict[str, str] = {}
    if text is None:
        return found
    for node in ast.parse(text).body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id in names:
                    found[target.id] = node.value.value
    return found


# --------------------------------------------------------------------------------------------------------------
# A small index of Python modules: top-level definitions, imports, TYPE_CHECKING branches


@dataclass
class Definition:
    node: ast.AST
    module: Module
    type_checking: bool  # only seen by type checkers (`if TYPE_CHECKING:` branch)


@dataclass
class Module:
    name: str
    rel: str
    tree: ast.Module
    defs: dict[str, list[tuple[ast.AST, bool]]] = field(default_factory=dict)
    imports: dict[str, list[tuple[str, str, bool]]] = field(default_factory=dict)  # local -> (module, name, tc)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


class PyIndex:
    def __init__(self, tree: SourceTree):
        self.tree = tree
        self.modules: dict[str, Module | None] = {}
        self._text_cache: dict[str, str] | None = None

    def module(self, dotted: str) -> Module | None:
        if dotted in self.modules:
            return self.modules[dotted]
        base = dotted.replace(".", "/")
        mod = None
        for rel in (base + ".py", base + "/__init__.py"):
            text = self.tree.read(rel)
            if text is not None:
                mod = Module(dotted, rel, ast.parse(text))
                self._collect(mod, mod.tree.body, False)
                break
        self.modules[dotted] = mod
        return mod

    def _package_of(self, mod: Module) -> str:
        return mod.name if mod.rel.endswith("__init__.py") else mod.name.rpartition(".")[0]

    def _collect(self, mod: Module, body: list[ast.stmt], tc: bool) -> None:
        for node in body:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                mod.defs.setdefault(node.name, []).append((node, tc))
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        mod.defs.setdefault(target.id, []).append((node, tc))
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                mod.defs.setdefault(node.target.id, []).append((node, tc))
            elif sys.version_info >= (3, 12) and isinstance(node, ast.TypeAlias):
                mod.defs.setdefault(node.name.id, []).append((node, tc))
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    package = self._package_of(mod).split(".")
                    package = package[: len(package) - node.level + 1]
                    source = ".".join(package + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                for alias in node.names:
                    mod.imports.setdefault(alias.asname or alias.name, []).append((source, alias.name, tc))
            elif isinstance(node, ast.If):
                if _is_type_checking(node.test):
                    self._collect(mod, node.body, True)
                    self._collect(mod, node.orelse, tc)
                else:
                    self._collect(mod, node.body, tc)
                    self._collect(mod, node.orelse, tc)
            elif isinstance(node, ast.Try):
                self._collect(mod, node.body, tc)
                for handler in node.handlers:
                    self._collect(mod, handler.body, tc)
                self._collect(mod, node.orelse, tc)

    def lookup(self, name: str, mod: Module, seen: set | None = None) -> list[Definition]:
        """Definitions `name` may refer to in `mod`: its own, then those of the modules it imports the name from."""
        seen = set() if seen is None else seen
        if (mod.name, name) in seen:
            return []
        seen.add((mod.name, name))
        found = [Definition(node, mod, tc) for node, tc in mod.defs.get(name, [])]
        for source, original, tc in mod.imports.get(name, []):
            if not source.startswith(self.tree.package):
                continue
            target = self.module(source)
            if target is None:  # `from pkg import submodule`
                continue
            for d in self.lookup(original, target, seen):
                found.append(Definition(d.node, d.module, d.type_checking or tc))
        return found

    def find_class(self, name: str, mod: Module | None) -> Definition | None:
        if mod is not None:
            for d in self.lookup(name, mod):
                if isinstance(d.node, ast.ClassDef):
                    return d
        # fallback: any module of the package defining the class at top level
        pattern = re.compile(rf"^class {re.escape(name)}\b", re.M)
        for rel in self._texts():
            if pattern.search(self._texts()[rel]):
                other = self.module(rel[: -len(".py")].replace("/", ".").removesuffix(".__init__"))
                if other is not None:
                    for node, tc in other.defs.get(name, []):
                        if isinstance(node, ast.ClassDef):
                            return Definition(node, other, tc)
        return None

    def _texts(self) -> dict[str, str]:
        if self._text_cache is None:
            self._text_cache = {rel: self.tree.raw(rel) for rel in self.tree.py_files()}
        return self._text_cache

    def find_function(self, name: str, mod: Module) -> Definition | None:
        for d in self.lookup(name, mod):
            if isinstance(d.node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return d
        return None

    # --- classes: bases, methods, dataclass fields

    def bases(self, cls: Definition) -> list[Definition]:
        out = []
        for base in cls.node.bases:
            name = base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else None
            if name is None:
                continue
            d = self.find_class(name, cls.module)
            if d is not None:
                out.append(d)
        return out

    def mro(self, cls: Definition) -> list[Definition]:
        order, todo = [], [cls]
        while todo:
            c = todo.pop(0)
            if all(c.node is not o.node for o in order):
                order.append(c)
                todo.extend(self.bases(c))
        return order

    def method(self, cls: Definition, name: str, after: ast.AST | None = None) -> tuple[Definition, ast.AST] | None:
        mro = self.mro(cls)
        if after is not None:
            idx = next((i for i, c in enumerate(mro) if c.node is after), -1)
            mro = mro[idx + 1:]
        for c in mro:
            for node in c.node.body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                    return c, node
        return None

    def fields(self, cls: Definition) -> dict[str, tuple[ast.expr, Module]]:
        """Dataclass fields (name -> annotation), base classes first, as dataclasses.fields() orders them."""
        out: dict[str, tuple[ast.expr, Module]] = {}
        for base in reversed(self.mro(cls)):
            for node in base.node.body:
                if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                    ann = node.annotation
                    head = ann.value if isinstance(ann, ast.Subscript) else ann
                    head_name = head.id if isinstance(head, ast.Name) else getattr(head, "attr", "")
                    if head_name in ("ClassVar", "InitVar"):
                        continue
                    out[node.target.id] = (ann, base.module)
        return out

    # --- type annotations, the way vllm.engine.arg_utils.get_type_hints flattens them

    def atoms(self, expr: ast.expr, mod: Module, runtime: bool, depth: int = 0) -> list[tuple]:
        """Flatten an annotation into ('bool'|'str'|'None'|'int'|'float',), ('Literal', values) or ('other', name).

        runtime=True follows only the definitions Python sees when running (not `if TYPE_CHECKING:` ones)."""
        if depth > 20:
            return [("other", "?")]
        if isinstance(expr, ast.Constant):
            if expr.value is None:
                return [("None",)]
            if isinstance(expr.value, str):  # forward reference
                try:
                    return self.atoms(ast.parse(expr.value, mode="eval").body, mod, runtime, depth + 1)
                except SyntaxError:
                    return [("other", expr.value)]
            return [("other", repr(expr.value))]
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.BitOr):
            return self.atoms(expr.left, mod, runtime, depth + 1) + self.atoms(expr.right, mod, runtime, depth + 1)
        if isinstance(expr, ast.Subscript):
            head = expr.value
            head_name = head.id if isinstance(head, ast.Name) else getattr(head, "attr", "")
            items = list(expr.slice.elts) if isinstance(expr.slice, ast.Tuple) else [expr.slice]
            if head_name == "Optional":
                return self.atoms(items[0], mod, runtime, depth + 1) + [("None",)]
            if head_name == "Union":
                return [a for item in items for a in self.atoms(item, mod, runtime, depth + 1)]
            if head_name == "Annotated":
                return self.atoms(items[0], mod, runtime, depth + 1)
            if head_name == "Literal":
                values = []
                for item in items:
                    if isinstance(item, ast.Constant):
                        values.append(item.value)
                    else:  # Literal[OtherLiteral, ...]
                        for a in self.atoms(item, mod, runtime, depth + 1):
                            if a[0] == "Literal":
                                values.extend(a[1])
                return [("Literal", tuple(values))]
            return [("other", head_name)]
        if isinstance(expr, ast.Name):
            if expr.id in ("bool", "str", "int", "float"):
                return [(expr.id,)]
            if expr.id == "None":
                return [("None",)]
            candidates = [d for d in self.lookup(expr.id, mod) if not (runtime and d.type_checking)]
            # an alias that is a Literal wins over a runtime stand-in (`X = str`) when not asked for run time
            candidates.sort(key=lambda d: d.type_checking)
            results = []
            for d in candidates:
                value = getattr(d.node, "value", None)
                if isinstance(d.node, ast.ClassDef) or value is None:
                    return [("other", expr.id)]
                results.append(self.atoms(value, d.module, runtime, depth + 1))
            if not results:
                return [("other", expr.id)]
            if not runtime:
                for r in results:
                    if any(a[0] == "Literal" for a in r):
                        return r
            return results[0]
        if isinstance(expr, ast.Attribute):
            return [("other", expr.attr)]
        return [("other", ast.dump(expr)[:40])]


# --------------------------------------------------------------------------------------------------------------
# vLLM: follow the argparse calls of `vllm serve`


@dataclass
class Option:
    strings: list[str]
    boolean_optional: bool  # argparse.BooleanOptionalAction: --no-X forms too
    where: str
    field_ref: tuple[Definition, str] | None = None
    explicit_choices: list[str] | None = None
    choices_removed: list[str] = field(default_factory=list)


_GROUP_FACTORIES = {"add_argument_group", "add_mutually_exclusive_group", "add_parser"}


def _is_boolean_optional(node: ast.expr) -> bool:
    return (isinstance(node, ast.Name) and node.id == "BooleanOptionalAction") or (
        isinstance(node, ast.Attribute) and node.attr == "BooleanOptionalAction"
    )


def _kwargs_key(node: ast.expr) -> tuple[str, str] | None:
    """`var["field"]` -> (var, field)."""
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
        key = node.slice
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            return node.value.id, key.value
    return None


def _eval_fstring(node: ast.JoinedStr, env: dict[str, str]) -> str | None:
    out = []
    for part in node.values:
        if isinstance(part, ast.Constant):
            out.append(str(part.value))
            continue
        value = part.value
        if isinstance(value, ast.Name) and value.id in env:
            out.append(env[value.id])
        elif (
            isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "replace"
            and isinstance(value.func.value, ast.Name) and value.func.value.id in env
            and len(value.args) == 2 and all(isinstance(a, ast.Constant) for a in value.args)
        ):
            out.append(env[value.func.value.id].replace(value.args[0].value, value.args[1].value))
        else:
            return None
    return "".join(out)


class VllmExtractor:
    def __init__(self, tree: SourceTree):
        self.tree = tree
        self.index = PyIndex(tree)
        self.options: list[Option] = []
        self.visited: set[int] = set()
        self.notes: list[str] = []

    def class_ref(self, node: ast.expr, mod: Module, cls_ctx: Definition | None) -> Definition | None:
        if isinstance(node, ast.Name):
            if node.id == "cls" and cls_ctx is not None:
                return cls_ctx
            return self.index.find_class(node.id, mod)
        return None

    def customize_overrides(self, cls: Definition) -> dict[str, dict]:
        """`kwargs["field"]["action"|"flags"] = ...` in the _customize_cli_kwargs methods of the class and its bases."""
        overrides: dict[str, dict] = {}
        for c in self.index.mro(cls):
            for node in c.node.body:
                if isinstance(node, ast.FunctionDef) and node.name == "_customize_cli_kwargs":
                    self._collect_overrides(node, None, overrides)
        return overrides

    def _collect_overrides(self, fn: ast.AST, var: str | None, overrides: dict[str, dict]) -> None:
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Subscript):
                outer = node.targets[0]
                inner = _kwargs_key(outer.value)
                if inner is None or (var is not None and inner[0] != var):
                    continue
                if isinstance(outer.slice, ast.Constant) and outer.slice.value in ("action", "flags", "choices"):
                    overrides.setdefault(inner[1], {})[outer.slice.value] = node.value
            elif (
                isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "remove"
                and isinstance(node.func.value, ast.Subscript)
            ):
                inner = _kwargs_key(node.func.value.value)
                if inner is not None and (var is None or inner[0] == var) and node.args:
                    overrides.setdefault(inner[1], {}).setdefault("remove", []).append(node.args[0])

    def scan(self, fn: ast.FunctionDef, mod: Module, cls_ctx: Definition | None, parser_params: set[str],
             owner: Definition | None = None) -> None:
        if id(fn) in self.visited:
            return
        self.visited.add(id(fn))
        where = f"{mod.rel}:{(owner.node.name + '.') if owner else ''}{fn.name}"
        parsers = set(parser_params)
        bindings: dict[str, tuple[Definition, str | None]] = {}
        overrides: dict[str, dict[str, dict]] = {}  # var -> field -> what

        for node in ast.walk(fn):
            if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
                continue
            target, value = node.targets[0].id, node.value
            sub_key = None
            if isinstance(value, ast.Subscript) and isinstance(value.value, ast.Call):
                if isinstance(value.slice, ast.Constant):
                    sub_key = value.slice.value
                value = value.value
            if isinstance(value, ast.Call):
                func = value.func
                fname = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
                if fname == "get_kwargs" and value.args:
                    cls = self.class_ref(value.args[0], mod, cls_ctx)
                    if cls is None:
                        warn(f"{where}: get_kwargs({ast.unparse(value.args[0])}) names no class found")
                        continue
                    if target in bindings and sub_key is None and bindings[target][0].node is not cls.node:
                        warn(f"{where}: {target} is bound to two config classes")
                    bindings[target] = (cls, sub_key)
                elif fname in _GROUP_FACTORIES or any(isinstance(a, ast.Name) and a.id in parsers
                                                      for a in value.args):
                    parsers.add(target)
        alias_overrides: dict[str, dict] = {}
        for node in ast.walk(fn):  # field = kwargs["field"]; field["action"] = ...
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target = node.targets[0]
                key = _kwargs_key(node.value)
                if isinstance(target, ast.Name) and key and key[0] in bindings and bindings[key[0]][1] is None:
                    bindings[target.id] = (bindings[key[0]][0], key[1])
                key = _kwargs_key(target)
                if key and key[1] in ("action", "choices"):
                    alias_overrides.setdefault(key[0], {})[key[1]] = node.value
        for var, (cls, sub) in bindings.items():
            if sub is not None and var in alias_overrides:
                overrides.setdefault(var, {})[sub] = alias_overrides[var]
            if sub is None:
                ov = self.customize_overrides(cls) if cls_ctx is not None and cls.node is cls_ctx.node else {}
                self._collect_overrides(fn, var, ov)
                overrides[var] = ov

        loop_calls: dict[int, tuple[str, str]] = {}
        for node in ast.walk(fn):
            if (
                isinstance(node, ast.For) and isinstance(node.iter, ast.Call)
                and isinstance(node.iter.func, ast.Attribute) and node.iter.func.attr == "items"
                and isinstance(node.iter.func.value, ast.Name) and node.iter.func.value.id in bindings
                and isinstance(node.target, ast.Tuple) and all(isinstance(e, ast.Name) for e in node.target.elts)
            ):
                for inner in ast.walk(node):
                    if isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute) \
                            and inner.func.attr == "add_argument":
                        loop_calls[id(inner)] = (node.iter.func.value.id, node.target.elts[0].id)

        for node in ast.walk(fn):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr == "add_argument":
                receiver = func.value.id if isinstance(func.value, ast.Name) else None
                if receiver not in parsers:
                    warn(f"{where}: add_argument on {ast.unparse(func.value)}, not a known parser; skipped")
                    continue
                if id(node) in loop_calls:
                    self.add_loop(node, loop_calls[id(node)], bindings, overrides, where)
                else:
                    self.add_call(node, mod, bindings, overrides, where)
                continue
            if not any(isinstance(a, ast.Name) and a.id in parsers for a in node.args):
                continue
            self.follow(node, mod, cls_ctx, owner, parsers, where)

    def follow(self, call: ast.Call, mod: Module, cls_ctx: Definition | None, owner: Definition | None,
               parsers: set[str], where: str) -> None:
        func = call.func
        target = None  # (definition of the owner class or None, function node, module, class context)
        if isinstance(func, ast.Name):
            d = self.index.find_function(func.id, mod)
            if d is not None:
                target = (None, d.node, d.module, None)
        elif isinstance(func, ast.Attribute):
            base = func.value
            cls = None
            after = None
            if isinstance(base, ast.Call) and isinstance(base.func, ast.Name) and base.func.id == "super":
                cls, after = cls_ctx, owner.node if owner is not None else None
            elif isinstance(base, ast.Name):
                cls = self.class_ref(base, mod, cls_ctx) if base.id[:1].isupper() or base.id == "cls" else None
            if cls is not None:
                found = self.index.method(cls, func.attr, after)
                if found is not None:
                    target = (found[0], found[1], found[0].module, cls)
        if target is None:
            name = ast.unparse(func)
            if name.split(".")[-1] not in ("parse_args", "parse_known_args", "set_defaults", "format_help"):
                self.notes.append(f"{where}: {name}(...) gets the parser but was not followed")
            return
        owner_def, fn, fmod, fcls = target
        params = [a.arg for a in fn.args.args]
        decorators = {d.id for d in fn.decorator_list if isinstance(d, ast.Name)}
        if owner_def is not None and "staticmethod" not in decorators:
            params = params[1:]  # cls / self
        mapped = {params[i] for i, a in enumerate(call.args)
                  if i < len(params) and isinstance(a, ast.Name) and a.id in parsers}
        self.scan(fn, fmod, fcls, mapped, owner_def)

    def _field_boolean(self, cls: Definition, name: str, override: dict | None, where: str) -> bool:
        if override and "action" in override:
            return _is_boolean_optional(override["action"])
        fields = self.index.fields(cls)
        if name not in fields:
            warn(f"{where}: {cls.node.name} has no field {name}")
            return False
        ann, fmod = fields[name]
        kinds = {a[0] for a in self.index.atoms(ann, fmod, runtime=True)}
        if kinds == {"bool", "str", "None"}:  # optional-valued flag (nargs="?"), not BooleanOptionalAction
            return False
        return "bool" in kinds

    def add_call(self, call: ast.Call, mod: Module, bindings, overrides, where: str) -> None:
        strings = []
        for a in call.args:
            if isinstance(a, ast.Constant) and isinstance(a.value, str):
                if a.value.startswith("-"):
                    strings.append(a.value)
            else:
                warn(f"{where}: add_argument positional {ast.unparse(a)} not understood")
        if not strings:
            return  # a positional argument such as model_tag
        option = Option(strings, False, where)
        explicit_action = None
        for kw in call.keywords:
            if kw.arg == "action":
                explicit_action = kw.value
            elif kw.arg == "choices":
                option.explicit_choices = self._choices_of(kw.value, mod, where)
            elif kw.arg is None:
                self._unpack(kw.value, mod, bindings, overrides, option, where)
                if isinstance(kw.value, ast.Dict):
                    for k, v in zip(kw.value.keys, kw.value.values, strict=True):
                        if isinstance(k, ast.Constant) and k.value == "action":
                            explicit_action = v
                        elif isinstance(k, ast.Constant) and k.value == "choices":
                            option.explicit_choices = self._choices_of(v, mod, where)
        if explicit_action is not None:
            option.boolean_optional = _is_boolean_optional(explicit_action)
        self.options.append(option)

    def _unpack(self, node: ast.expr, mod: Module, bindings, overrides, option: Option, where: str) -> None:
        ref = None
        key = _kwargs_key(node)
        if key is not None and key[0] in bindings and bindings[key[0]][1] is None:
            ref = (bindings[key[0]][0], key[1], overrides.get(key[0], {}).get(key[1]))
        elif isinstance(node, ast.Name) and node.id in bindings and bindings[node.id][1] is not None:
            ref = (bindings[node.id][0], bindings[node.id][1], overrides.get(node.id, {}).get(bindings[node.id][1]))
        elif isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values, strict=True):
                if k is None:
                    self._unpack(v, mod, bindings, overrides, option, where)
            return
        if ref is None:
            warn(f"{where}: **{ast.unparse(node)} not understood")
            return
        cls, name, override = ref
        option.field_ref = (cls, name)
        option.boolean_optional = self._field_boolean(cls, name, override, where)
        if override and "remove" in override:
            option.choices_removed = [self._constant(r, mod) for r in override["remove"]]

    def add_loop(self, call: ast.Call, loop: tuple[str, str], bindings, overrides, where: str) -> None:
        var, key_name = loop
        cls = bindings[var][0]
        ov = overrides.get(var, {})
        for name in self.index.fields(cls):
            strings = []
            for a in call.args:
                if isinstance(a, ast.Starred):  # *extra_flags = value.pop("flags", [])
                    flags = ov.get(name, {}).get("flags")
                    if isinstance(flags, (ast.List, ast.Tuple)):
                        strings.extend(e.value for e in flags.elts if isinstance(e, ast.Constant))
                elif isinstance(a, ast.JoinedStr):
                    flag = _eval_fstring(a, {key_name: name})
                    if flag is None:
                        warn(f"{where}: f-string {ast.unparse(a)} not understood")
                    else:
                        strings.append(flag)
                elif isinstance(a, ast.Constant) and isinstance(a.value, str):
                    strings.append(a.value)
            boolean = self._field_boolean(cls, name, ov.get(name), where)
            self.options.append(Option(strings, boolean, f"{where} ({cls.node.name}.{name})", (cls, name)))

    def _constant(self, node: ast.expr, mod: Module) -> str:
        if isinstance(node, ast.Constant):
            return str(node.value)
        if isinstance(node, ast.Name):
            for d in self.index.lookup(node.id, mod):
                value = getattr(d.node, "value", None)
                if isinstance(value, ast.Constant):
                    return str(value.value)
        warn(f"{mod.rel}: value of {ast.unparse(node)} not found")
        return ast.unparse(node)

    def _choices_of(self, node: ast.expr, mod: Module, where: str) -> list[str]:
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)) and all(isinstance(e, ast.Constant) for e in node.elts):
            return [str(e.value) for e in node.elts]
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "get_args" and node.args:
            values = [v for a in self.index.atoms(node.args[0], mod, runtime=False) if a[0] == "Literal" for v in a[1]]
            if values:
                return [str(v) for v in values]
        values = [str(e.value) for lst in ast.walk(node) if isinstance(lst, ast.List)
                  for e in lst.elts if isinstance(e, ast.Constant)]
        self.notes.append(f"{where}: choices={ast.unparse(node)[:70]}... partly computed at run time; "
                          f"listed: {values} and '...'")
        return values + ["..."]

    # --- the whole serve parser

    def run(self) -> tuple[list[str], list[tuple[str, str, list[str]]], dict[str, str]]:
        version = module_version(self.tree, "vllm/_version.py", ("__version__", "version", "__commit_id__"))
        serve = self.index.module("vllm.entrypoints.cli.serve")
        if serve is None:
            raise SystemExit("vllm/entrypoints/cli/serve.py not found")
        entry = None
        for node in serve.tree.body:
            if isinstance(node, ast.ClassDef) and any(
                isinstance(s, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "name" for t in s.targets)
                and isinstance(s.value, ast.Constant) and s.value.value == "serve" for s in node.body
            ):
                entry = (node, next(s for s in node.body if isinstance(s, ast.FunctionDef)
                                    and s.name == "subparser_init"))
        if entry is None:
            raise SystemExit("no CLISubcommand with name = 'serve' in vllm/entrypoints/cli/serve.py")
        cls_def = Definition(entry[0], serve, False)
        self.scan(entry[1], serve, None, set(), cls_def)
        add_help = True
        for node in ast.walk(entry[1]):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_parser":
                for kw in node.keywords:
                    if kw.arg == "add_help" and isinstance(kw.value, ast.Constant) and not kw.value.value:
                        add_help = False
        if add_help:
            self.options.append(Option(["-h", "--help"], False, "argparse add_help"))

        prefixes = self.enable_disable_prefixes()
        flags: dict[str, str] = {}
        for option in self.options:
            expanded = list(option.strings)
            if option.boolean_optional:
                expanded += ["--no-" + s[2:] for s in option.strings if s.startswith("--")]
                for s in option.strings:
                    for prefix, inverse in prefixes.items():
                        if s.startswith(prefix):
                            expanded.append(inverse + s.removeprefix(prefix))
            for s in expanded:
                if s in flags and flags[s] != option.where:
                    warn(f"{s} registered twice: {flags[s]} and {option.where} (argparse would refuse this)")
                flags.setdefault(s, option.where)

        choices = []
        for option in self.options:
            row = self.choices_row(option)
            if row is not None:
                choices.append((option.strings[0], row[0], row[1]))
        return sorted(flags), sorted(choices), version

    def enable_disable_prefixes(self) -> dict[str, str]:
        """vLLM's FlexibleArgumentParser maps BooleanOptionalAction to EnableDisableAction (--enable-X/--disable-X)."""
        mod = self.index.module("vllm.utils.argparse_utils")
        if mod is None:
            return {}
        registered = any(
            isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "register"
            and len(n.args) == 3 and _is_boolean_optional(n.args[1]) for n in ast.walk(mod.tree)
        )
        if not registered:
            return {}
        for node in ast.walk(mod.tree):
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_inverse_prefixes"
                                                    for t in node.targets) and isinstance(node.value, ast.Dict):
                return {k.value: v.value for k, v in zip(node.value.keys, node.value.values, strict=True)
                        if isinstance(k, ast.Constant) and isinstance(v, ast.Constant)}
        warn("EnableDisableAction registered but its _inverse_prefixes were not found")
        return {}

    def choices_row(self, option: Option) -> tuple[str, list[str]] | None:
        if option.explicit_choices is not None:
            return "enforced", option.explicit_choices
        if option.field_ref is None or option.boolean_optional:
            return None
        cls, name = option.field_ref
        fields = self.index.fields(cls)
        if name not in fields:
            return None
        ann, fmod = fields[name]
        run = self.index.atoms(ann, fmod, runtime=True)
        kinds = {a[0] for a in run}
        if "bool" in kinds:
            return None
        literal = [v for a in run if a[0] == "Literal" for v in a[1]]
        enforced = bool(literal) and "str" not in kinds
        if not literal:
            literal = [v for a in self.index.atoms(ann, fmod, runtime=False) if a[0] == "Literal" for v in a[1]]
        if not literal:
            return None
        removed = set(option.choices_removed)
        values = [str(v) for v in sorted(set(literal), key=lambda v: (str(type(v)), v)) if str(v) not in removed]
        return ("enforced" if enforced else "not-enforced"), values


def run_vllm(args: argparse.Namespace) -> list[tuple[str, str]]:
    tree = SourceTree(Path(args.src).expanduser(), "vllm")
    ex = VllmExtractor(tree)
    flags, choices, version = ex.run()
    ver = version.get("__version__") or version.get("version")
    if not ver:
        raise SystemExit("vllm/_version.py has no version")
    for note in ex.notes:
        print(f"note: {note}", file=sys.stderr)
    commit = version.get("__commit_id__")
    label = f"vllm {ver}" + (f" (commit {commit})" if commit else "")
    sources = sorted(tree.read_files)
    main_sources = [s for s in sources if not s.startswith("vllm/config/")]
    config_sources = [s for s in sources if s.startswith("vllm/config/")]
    header = [
        f"# source: {label}: " + ", ".join(main_sources),
        "#   field types from: " + ", ".join(config_sources),
        f"# generated by {GENERATOR}",
        f"# {len(flags)} option strings of `vllm serve` (argparse; --no-X and --enable-X/--disable-X forms of",
        "# boolean flags included). vLLM also accepts --foo_bar for --foo-bar, --json-flag.key value for the",
        "# JSON (config) flags and -O3 for --optimization-level 3; only the registered spellings are listed.",
    ]
    choice_header = [
        f"# source: {label}: " + ", ".join(sources),
        f"# generated by {GENERATOR}",
        "# <flag> <enforced|not-enforced> <value> ...: values from the flag's Literal type or its choices=;",
        "# not-enforced: argparse takes any string (the type also allows str, or only type checkers see the",
        "# Literal) and vLLM checks the value later, if at all. '...' ends a list completed at run time.",
    ]
    out = Path(args.out)
    return [
        (str(out / f"vllm-serve-{ver}.txt"), "\n".join(header + flags) + "\n"),
        (str(out / f"vllm-serve-{ver}-choices.txt"),
         "\n".join(choice_header + [" ".join([f, e, *v]) for f, e, v in choices]) + "\n"),
    ]


# --------------------------------------------------------------------------------------------------------------
# Ray: the click options of `ray start`


def _click_decls(call: ast.Call) -> tuple[list[str], bool, bool]:
    """Option strings of click.option(...) (`--a/--b` pairs split), whether hidden, whether is_flag."""
    strings = []
    for a in call.args:
        if not (isinstance(a, ast.Constant) and isinstance(a.value, str)):
            warn(f"click.option declaration {ast.unparse(a)} not understood")
            continue
        decl = a.value
        if decl.isidentifier():  # the parameter name
            continue
        if "/" in decl:
            first, second = decl.split("/", 1)
            strings += [s.strip() for s in (first, second) if s.strip()]
        else:
            strings.append(decl)
    kw = {k.arg: k.value for k in call.keywords if k.arg}
    hidden = isinstance(kw.get("hidden"), ast.Constant) and bool(kw["hidden"].value)
    is_flag = isinstance(kw.get("is_flag"), ast.Constant) and bool(kw["is_flag"].value)
    return strings, hidden, is_flag


def _is_click(call: ast.expr, name: str, mod: Module | None = None) -> bool:
    """A call of click.<name>(...), or of <name>(...) imported from click (or any <obj>.<name> for `command`)."""
    if not isinstance(call, ast.Call):
        return False
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr == name:
        return name == "command" or (isinstance(func.value, ast.Name) and func.value.id == "click")
    if isinstance(func, ast.Name) and func.id == name and mod is not None:
        return any(source == "click" for source, _, _ in mod.imports.get(name, []))
    return False


def run_ray(args: argparse.Namespace) -> list[tuple[str, str]]:
    tree = SourceTree(Path(args.src).expanduser(), "ray")
    index = PyIndex(tree)
    version = module_version(tree, "ray/_version.py", ("version", "commit"))
    scripts = index.module("ray.scripts.scripts")
    if scripts is None:
        raise SystemExit("ray/scripts/scripts.py not found")
    command = None
    for node in scripts.tree.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        for dec in node.decorator_list:
            if _is_click(dec, "command"):
                names = [k.value.value for k in dec.keywords if k.arg == "name" and isinstance(k.value, ast.Constant)]
                if (names[0] if names else node.name.replace("_", "-")) == args.command:
                    command = (node, dec)
    if command is None:
        raise SystemExit(f"no click command named {args.command!r} in ray/scripts/scripts.py")
    fn, command_call = command
    flags: list[str] = []
    hidden: list[str] = []
    used = ["ray/_version.py", scripts.rel]

    def add(call: ast.Call) -> None:
        strings, is_hidden, _ = _click_decls(call)
        flags.extend(strings)
        if is_hidden:
            hidden.extend(strings)

    for dec in fn.decorator_list:
        if _is_click(dec, "option"):
            add(dec)
        elif _is_click(dec, "version_option"):
            flags.append("--version")
        elif isinstance(dec, (ast.Name, ast.Attribute)) and not _is_click(dec, "command"):
            name = dec.id if isinstance(dec, ast.Name) else dec.attr
            d = index.find_function(name, scripts)
            if d is None:
                continue
            # options the decorator applies: click.option calls in it or in module-level lists it names
            found = [n for n in ast.walk(d.node) if _is_click(n, "option", d.module)]
            for n in ast.walk(d.node):
                if isinstance(n, ast.Name):
                    for ld in d.module.defs.get(n.id, []):
                        value = getattr(ld[0], "value", None)
                        if isinstance(value, (ast.List, ast.Tuple)):
                            found += [e for e in value.elts if _is_click(e, "option", d.module)]
            if found and d.module.rel not in used:
                used.append(d.module.rel)
            for call in found:
                add(call)
    help_names = ["--help"]
    for kw in command_call.keywords:
        if kw.arg == "add_help_option" and isinstance(kw.value, ast.Constant) and not kw.value.value:
            help_names = []
        if kw.arg == "context_settings" and isinstance(kw.value, ast.Dict):
            for k, v in zip(kw.value.keys, kw.value.values, strict=True):
                if isinstance(k, ast.Constant) and k.value == "help_option_names" and isinstance(v, ast.List):
                    help_names = [e.value for e in v.elts if isinstance(e, ast.Constant)]
    flags += help_names
    dupes = sorted({f for f in flags if flags.count(f) > 1})
    if dupes:
        warn(f"ray {args.command}: repeated option strings {dupes}")
    ver = version.get("version")
    if not ver:
        raise SystemExit("ray/_version.py has no version")
    label = f"ray {ver}" + (f" (commit {version['commit']})" if version.get("commit") else "")
    header = [
        f"# source: {label}: " + ", ".join(sorted(used)),
        f"# generated by {GENERATOR}",
        f"# {len(set(flags))} option strings of `ray {args.command}` (click), --help included.",
        "# hidden (accepted, not shown by --help): " + (" ".join(sorted(set(hidden))) or "none"),
    ]
    out = Path(args.out) / f"ray-{args.command}-{ver}.txt"
    return [(str(out), "\n".join(header + sorted(set(flags))) + "\n")]


# --------------------------------------------------------------------------------------------------------------
# llama.cpp: a small C++ tokenizer, enough for common/arg.cpp and tools/rpc/rpc-server.cpp

_TOKEN = re.compile(
    r"""(?P<ws>\s+)
    |(?P<lcomment>//[^\n]*)
    |(?P<bcomment>/\*.*?\*/)
    |(?P<raw>(?:u8|[uUL])?R"(?P<delim>[^(\s]*)\((?P<rawbody>.*?)\)(?P=delim)")
    |(?P<str>(?:u8|[uUL])?"(?:[^"\\\n]|\\.)*")
    |(?P<char>(?:u8|[uUL])?'(?:[^'\\\n]|\\.)*')
    |(?P<num>\.?\d(?:[\w.']|[eEpP][+-])*)
    |(?P<ident>[A-Za-z_]\w*)
    |(?P<op>::|->|==|!=|<=|>=|&&|\|\||<<|>>|\+\+|--|[-+*/%&|^!~<>=?:;,.(){}\[\]#])
    """,
    re.S | re.X,
)


@dataclass
class Tok:
    kind: str  # str, ident, num, op, char, pp
    value: str
    line: int


def _unescape(body: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), body)


def cpp_tokens(text: str) -> list[Tok]:
    toks: list[Tok] = []
    pos, line, at_line_start = 0, 1, True
    while pos < len(text):
        if at_line_start:
            m = re.match(r"[ \t]*#(?:[^\n\\]|\\.)*", text[pos:], re.S)
            if m:
                toks.append(Tok("pp", m.group(0).strip(), line))
                line += m.group(0).count("\n")
                pos += m.end()
                continue
        m = _TOKEN.match(text, pos)
        if m is None:
            raise SystemExit(f"C++ tokenizer stuck at line {line}: {text[pos:pos + 40]!r}")
        kind = m.lastgroup if m.lastgroup not in ("delim", "rawbody") else "raw"
        chunk = m.group(0)
        if kind == "raw":
            toks.append(Tok("str", m.group("rawbody"), line))
        elif kind == "str":
            toks.append(Tok("str", _unescape(chunk[chunk.index('"') + 1:-1]), line))
        elif kind not in ("ws", "lcomment", "bcomment"):
            toks.append(Tok(kind, chunk, line))
        newlines = chunk.count("\n")
        line += newlines
        if newlines:
            at_line_start = True
        elif kind not in ("ws", "bcomment"):
            at_line_start = False
        pos = m.end()
    merged: list[Tok] = []  # adjacent string literals concatenate
    for t in toks:
        if t.kind == "str" and merged and merged[-1].kind == "str":
            merged[-1] = Tok("str", merged[-1].value + t.value, merged[-1].line)
        else:
            merged.append(t)
    return merged


_CLOSE = {"(": ")", "{": "}", "[": "]"}


def matching(toks: list[Tok], i: int) -> int:
    """Index of the bracket closing toks[i]."""
    opener, depth = toks[i].value, 0
    closer = _CLOSE[opener]
    for j in range(i, len(toks)):
        if toks[j].kind == "op":
            if toks[j].value == opener:
                depth += 1
            elif toks[j].value == closer:
                depth -= 1
                if depth == 0:
                    return j
    raise SystemExit(f"unbalanced {opener} at line {toks[i].line}")


def function_body(toks: list[Tok], name: str) -> tuple[int, int]:
    """(first, last) token indexes inside the braces of the definition of function `name`."""
    for i, t in enumerate(toks):
        if t.kind == "ident" and t.value == name and i + 1 < len(toks) and toks[i + 1].value == "(":
            j = matching(toks, i + 1) + 1
            while j < len(toks) and toks[j].kind == "ident":  # const, noexcept, ...
                j += 1
            if j < len(toks) and toks[j].value == "{":
                return j + 1, matching(toks, j) - 1
    raise SystemExit(f"definition of {name}() not found")


def split_top(toks: list[Tok]) -> list[list[Tok]]:
    """Split a token list at the commas not nested in brackets."""
    parts, cur, depth = [], [], 0
    for t in toks:
        if t.kind == "op" and t.value in "({[":
            depth += 1
        elif t.kind == "op" and t.value in ")}]":
            depth -= 1
        if depth == 0 and t.kind == "op" and t.value == ",":
            parts.append(cur)
            cur = []
        else:
            cur.append(t)
    parts.append(cur)
    return parts


def eval_example_condition(cond: list[Tok], example: str) -> bool | None:
    """Evaluate `ex == LLAMA_EXAMPLE_X || ...`; None when the condition uses anything else."""
    words = []
    for t in cond:
        if t.kind == "ident" and t.value == "ex":
            words.append(repr(example))
        elif t.kind == "ident" and t.value.startswith("LLAMA_EXAMPLE_"):
            words.append(repr(t.value))
        elif t.kind == "op" and t.value in ("==", "!=", "(", ")"):
            words.append(t.value)
        elif t.kind == "op" and t.value in ("||", "&&", "!"):
            words.append({"||": " or ", "&&": " and ", "!": " not "}[t.value])
        else:
            return None
    try:
        return bool(eval("".join(words), {"__builtins__": {}}))  # only quoted names and operators
    except SyntaxError:
        return None


@dataclass
class CommonArg:
    args: list[str]
    args_neg: list[str]
    examples: list[str]
    excludes: list[str]
    preset_only: bool
    line: int
    conditional: bool
    build_checks: list[str]


def example_sets(toks: list[Tok]) -> dict[str, list[str]]:
    """Named example lists such as `static std::initializer_list<enum llama_example> mmproj_examples = {...};`."""
    sets = {}
    for i in range(1, len(toks) - 2):
        if toks[i].value == "=" and toks[i + 1].value == "{" and toks[i - 1].kind == "ident":
            body = toks[i + 2:matching(toks, i + 1)]
            names = [t.value for t in body if t.kind == "ident"]
            if names and all(n.startswith("LLAMA_EXAMPLE_") for n in names) \
                    and all(t.kind == "ident" or t.value == "," for t in body):
                sets[toks[i - 1].value] = names
    return sets


def parse_add_opt(inner: list[Tok], conditional: bool, named: dict[str, list[str]]) -> CommonArg | None:
    """Tokens inside add_opt( ... ): common_arg(...) followed by .set_xxx(...) calls."""
    if not (len(inner) > 2 and inner[0].value == "common_arg" and inner[1].value == "("):
        return None
    end = matching(inner, 1)
    params = split_top(inner[2:end])

    def strings(part: list[Tok]) -> list[str] | None:
        if part and part[0].value == "{" and part[-1].value == "}":
            body = part[1:-1]
            if all(t.kind == "str" or t.value == "," for t in body):
                return [t.value for t in body if t.kind == "str"]
        return None

    args = strings(params[0]) or []
    args_neg = (strings(params[1]) if len(params) > 1 else None) or []
    checks = set()  # "llama_supports_x refuses" (the if block throws) or "llama_supports_x warns"
    for k, t in enumerate(inner[:end]):
        if t.kind == "ident" and t.value.startswith("llama_supports_"):
            brace = next((j for j in range(k, end) if inner[j].value == "{"), None)
            block = inner[brace:matching(inner, brace) + 1] if brace is not None else []
            refuses = any(x.kind == "ident" and x.value == "throw" for x in block)
            checks.add(f"{t.value} {'refuses' if refuses else 'warns'}")
    ca = CommonArg(args, args_neg, ["LLAMA_EXAMPLE_COMMON"], [], False, inner[0].line, conditional, sorted(checks))
    i = end + 1
    while i + 2 < len(inner) and inner[i].value == "." and inner[i + 2].value == "(":
        method, close = inner[i + 1].value, matching(inner, i + 2)
        names = []
        for t in inner[i + 3:close]:
            if t.kind != "ident":
                continue
            if t.value.startswith("LLAMA_EXAMPLE_"):
                names.append(t.value)
            elif t.value in named:
                names.extend(named[t.value])
            elif method in ("set_examples", "set_excludes"):
                warn(f"arg.cpp:{t.line}: {method}({t.value}) names an unknown example list")
        if method == "set_examples":
            ca.examples = names
        elif method == "set_excludes":
            ca.excludes = names
        elif method == "set_preset_only":
            ca.preset_only = True
        i = close + 1
    return ca


def common_args(toks: list[Tok], example: str) -> list[CommonArg]:
    """The add_opt(common_arg(...)) calls of common_params_parser_init that run for `example`."""
    first, last = function_body(toks, "common_params_parser_init")
    named = example_sets(toks)
    frames: list[tuple[str, bool | None, bool | None]] = []  # (kind, this branch runs, some branch of chain ran)
    last_chain: bool | None | str = "none"
    found: list[CommonArg] = []
    unknown: list[str] = []  # conditions not understood
    i = first
    while i <= last:
        t = toks[i]
        if t.kind == "pp":
            warn(f"arg.cpp:{t.line}: preprocessor line inside common_params_parser_init ignored: {t.value}")
        elif t.kind == "ident" and t.value in ("if", "else"):
            chain_before = last_chain
            j = i
            if t.value == "else":
                j += 1
                if toks[j].value == "if":
                    pass
                elif toks[j].value == "{":
                    taken = None if chain_before in (None, "none") else not chain_before
                    frames.append(("if", taken, True))
                    last_chain = "none"
                    i = j + 1
                    continue
            if toks[j].value == "if":
                close = matching(toks, j + 1)
                cond = eval_example_condition(toks[j + 2:close], example)
                if cond is None:
                    unknown.append(f"arg.cpp:{toks[j].line}: " + " ".join(x.value for x in toks[j + 2:close]))
                if t.value == "else":
                    if chain_before in (None, "none") or cond is None:
                        taken, chain = None, None
                    else:
                        taken, chain = (not chain_before) and cond, chain_before or cond
                else:
                    taken, chain = cond, cond
                if toks[close + 1].value != "{":
                    warn(f"arg.cpp:{toks[j].line}: if without braces; condition ignored")
                    i = close + 1
                    continue
                frames.append(("if", taken, chain))
                last_chain = "none"
                i = close + 2
                continue
        elif t.kind == "op" and t.value == "{":
            frames.append(("block", True, None))
            last_chain = "none"
        elif t.kind == "op" and t.value == "}":
            kind, _, chain = frames.pop()
            last_chain = chain if kind == "if" else "none"
            i += 1
            continue
        elif t.kind == "ident" and t.value == "add_opt" and toks[i + 1].value == "(":
            close = matching(toks, i + 1)
            runs = [f[1] for f in frames]
            if None in runs:
                warn(f"arg.cpp:{t.line}: option kept under a condition not understood ({unknown[-1:]})")
            if all(r is not False for r in runs):
                ca = parse_add_opt(toks[i + 2:close], any(f[0] == "if" for f in frames), named)
                if ca is None:
                    warn(f"arg.cpp:{t.line}: add_opt without common_arg(...) not understood")
                else:
                    found.append(ca)
            i = close + 1
            last_chain = "none"
            continue
        elif t.kind == "ident" and t.value == "push_back" and any(
                x.value == "common_arg" for x in toks[i:i + 4]):
            warn(f"arg.cpp:{t.line}: option pushed without add_opt; not filtered by example")
        i += 1
    return found


def keeps(ca: CommonArg, example: str) -> bool:
    """arg.cpp add_opt: in the example, or in COMMON (all but DOWNLOAD inherit it), and not excluded."""
    inherit_common = example != "LLAMA_EXAMPLE_DOWNLOAD"
    in_example = example in ca.examples or (inherit_common and "LLAMA_EXAMPLE_COMMON" in ca.examples)
    return in_example and example not in ca.excludes and not ca.preset_only


def run_llamacpp(args: argparse.Namespace) -> list[tuple[str, str]]:
    src = Path(args.src).expanduser()
    arg_cpp = src / "common" / "arg.cpp"
    rpc_cpp = src / "tools" / "rpc" / "rpc-server.cpp"
    for p in (arg_cpp, rpc_cpp):
        if not p.is_file():
            raise SystemExit(f"{p} not found")
    example = "LLAMA_EXAMPLE_" + args.example.upper()
    toks = cpp_tokens(arg_cpp.read_text(encoding="utf-8"))
    if not any(t.kind == "ident" and t.value == example for t in toks):
        raise SystemExit(f"{example} does not appear in common/arg.cpp")
    kept = [ca for ca in common_args(toks, example) if keeps(ca, example)]
    flags: dict[str, int] = {}
    for ca in kept:
        for s in ca.args + ca.args_neg:
            if not s.startswith("-"):
                warn(f"arg.cpp:{ca.line}: option {s!r} does not start with '-'")
            if s in flags and flags[s] != ca.line:
                warn(f"{s} defined twice (arg.cpp lines {flags[s]} and {ca.line}); the later one wins")
            flags.setdefault(s, ca.line)
    refused = sorted({f"{ca.args[-1]} ({c.split()[0]})" for ca in kept for c in ca.build_checks
                      if c.endswith("refuses")})
    warned = sorted({f"{ca.args[-1]} ({c.split()[0]})" for ca in kept for c in ca.build_checks
                     if c.endswith("warns")})
    program = "llama-server" if example == "LLAMA_EXAMPLE_SERVER" else f"llama ({example})"
    header = [
        f"# source: llama.cpp {args.label}: common/arg.cpp (common_params_parser_init, {example})",
        f"# generated by {GENERATOR}",
        f"# {len(flags)} option strings of {program}, negative (--no-X) forms included. llama.cpp turns '_'",
        "# into '-' in arguments starting with --; it has no --flag=value form.",
        "# registered in every build; without the feature the build refuses: " + ("; ".join(refused) or "none"),
        "#   and only warns (the value is ignored): " + ("; ".join(warned) or "none"),
    ]
    name = "llama-server" if example == "LLAMA_EXAMPLE_SERVER" else "llama-" + args.example.lower()
    files = [(str(Path(args.out) / f"{name}-{args.label}.txt"), "\n".join(header + sorted(flags)) + "\n")]

    rtoks = cpp_tokens(rpc_cpp.read_text(encoding="utf-8"))
    first, last = function_body(rtoks, "rpc_server_params_parse")
    rpc = []
    for k in range(first, last):
        a, op, b = rtoks[k - 1], rtoks[k], rtoks[k + 1]
        if op.kind == "op" and op.value == "==" and (a.kind == "str" or b.kind == "str"):
            s = a.value if a.kind == "str" else b.value
            if s not in rpc:
                rpc.append(s)
    usage: set[str] = set()
    try:
        ufirst, ulast = function_body(rtoks, "print_usage")
        for t in rtoks[ufirst:ulast]:
            m = re.match(r"\s+(-[\w-]+(?:, *-[\w-]+)*)", t.value) if t.kind == "str" else None
            if m:
                usage.update(s.strip() for s in m.group(1).split(","))
    except SystemExit:
        pass
    if usage and usage != set(rpc):
        warn(f"rpc-server: parsed {sorted(set(rpc) - usage)} not in usage, usage {sorted(usage - set(rpc))} "
             "not parsed")
    exe, guard = "rpc-server", None
    cmake = src / "tools" / "rpc" / "CMakeLists.txt"
    if cmake.is_file():
        m = re.search(r"set\(TARGET\s+([\w.-]+)\)", cmake.read_text(encoding="utf-8"))
        exe = m.group(1) if m else exe
    tools_cmake = src / "tools" / "CMakeLists.txt"
    if tools_cmake.is_file():
        m = re.search(r"if\s*\(([^)]*)\)\s*add_subdirectory\(rpc\)", tools_cmake.read_text(encoding="utf-8"))
        guard = m.group(1).strip() if m else None
    rpc_header = [
        f"# source: llama.cpp {args.label}: tools/rpc/rpc-server.cpp (rpc_server_params_parse), "
        "tools/rpc/CMakeLists.txt",
        f"# generated by {GENERATOR}",
        f"# {len(rpc)} option strings of the RPC server; the executable is {exe}"
        + (f", built only if {guard} (-D{guard}=ON)" if guard else "") + ".",
        "# Exact matches: no '_' folding, no --flag=value form."
        + ("" if not usage or usage == set(rpc) else " The usage text differs from the parser."),
    ]
    files.append((str(Path(args.out) / f"rpc-server-{args.label}.txt"), "\n".join(rpc_header + sorted(rpc)) + "\n"))
    return files


# --------------------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="directory of the flag files (default: %(default)s)")
    parser.add_argument("--check", action="store_true", help="compare with the files there instead of writing")
    sub = parser.add_subparsers(dest="engine", required=True)
    p = sub.add_parser("vllm", help="`vllm serve` flags from a vLLM wheel or its unpacked sources")
    p.add_argument("src", help="vllm wheel, or the directory holding vllm/ (or vllm/ itself)")
    p.set_defaults(run=run_vllm)
    p = sub.add_parser("ray", help="`ray start` flags from a Ray wheel or its unpacked sources")
    p.add_argument("src", help="ray wheel, or the directory holding ray/ (or ray/ itself)")
    p.add_argument("--command", default="start", help="the ray subcommand (default: %(default)s)")
    p.set_defaults(run=run_ray)
    p = sub.add_parser("llamacpp", help="llama-server and rpc-server flags from a llama.cpp source tree")
    p.add_argument("src", help="llama.cpp source directory (holding common/arg.cpp)")
    p.add_argument("--label", required=True, help="llama.cpp commit or release naming the files, e.g. 0.3.36")
    p.add_argument("--example", default="server",
                   help="the LLAMA_EXAMPLE_* whose options to list (default: %(default)s; e.g. completion to "
                        "compare with `llama-completion --help`)")
    p.set_defaults(run=run_llamacpp)
    args = parser.parse_args(argv)
    files = args.run(args)
    status = 0
    for path, text in files:
        target = Path(path)
        count = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
        if args.check:
            same = target.is_file() and target.read_text(encoding="utf-8") == text
            print(f"{'ok' if same else 'DIFFERS'}: {target} ({count} lines)")
            status |= 0 if same else 1
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
            print(f"wrote {target} ({count} lines)")
    return status


if __name__ == "__main__":
    sys.exit(main())
