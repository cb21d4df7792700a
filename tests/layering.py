"""The repository's import graph, read from the AST: the one walker every layer rule uses.

`tests/test_layers.py` (the foundation imports no app; nothing imports `ops`) and
`tests/test_projection_layers.py` (what `runs` and the projection modules may import) are
rules over the same map, so they must read imports the same way. Imports are collected at
any depth, since a function-level import is still an arrow in the graph (it is how cycles
hide); relative imports are resolved to absolute names. Whether an `if TYPE_CHECKING:` body
counts is the rule's choice: it never runs, but it is still a dependency of the source.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Every top-level package of the repository except the tests, found rather than listed so
# that a new package is held to the rules from its first commit.
CODE_PACKAGES = tuple(
    sorted(
        path.name
        for path in ROOT.iterdir()
        if (path / "__init__.py").is_file() and path.name != "tests"
    )
)

# The layer of a package that the rules of `tests/test_layers.py` check by this table: the
# first-party packages it may import besides itself, and why it sits there. (The older
# apps' places are the rules written out in `tests/test_layers.py` and
# `tests/test_projection_layers.py`.)
LAYERS: dict[str, tuple[frozenset[str], str]] = {
    "webhooks": (
        frozenset({"agentrun", "runs", "outbox"}),
        "above outbox: sends the outbox's CloudEvents envelope; `runs` reaches it only "
        "through its projection module `webhooks.record`; ops reads its status",
    ),
}


@dataclass(frozen=True)
class Import:
    """One module a file imports: where (the file, relative to the root, and the line)
    and what (the absolute dotted name)."""

    path: Path
    line: int
    module: str

    @property
    def package(self) -> str:
        return self.module.split(".")[0]

    def within(self, names: set[str]) -> bool:
        """The module is one of `names` or inside one of them."""
        return any(self.module == name or self.module.startswith(f"{name}.") for name in names)

    def __str__(self) -> str:
        return f"{self.path}:{self.line} imports {self.module}"


def modules_of(package: str) -> list[Path]:
    """Every module of a top-level package, migrations left out."""
    return [
        path
        for path in sorted((ROOT / package).rglob("*.py"))
        if "migrations" not in path.relative_to(ROOT).parts
    ]


def imports_of_package(package: str, *, type_checking: bool) -> list[Import]:
    return [found for path in modules_of(package) for found in imports_of(path, type_checking)]


def imports_of(path: Path, type_checking: bool) -> list[Import]:
    """Each module the file imports. `from pkg import name` counts as `pkg.name` when that
    is a module of the repository, else as `pkg`."""
    here = _module_name(path)
    relative = path.relative_to(ROOT)
    found = []
    for node in _import_nodes(ast.parse(path.read_text(), filename=str(path)), type_checking):
        if isinstance(node, ast.Import):
            found += [Import(relative, node.lineno, alias.name) for alias in node.names]
            continue
        base = _absolute(node, here, is_package=path.name == "__init__.py")
        for alias in node.names:
            submodule = f"{base}.{alias.name}"
            found.append(Import(relative, node.lineno, submodule if is_module(submodule) else base))
    return found


def is_module(dotted: str) -> bool:
    path = ROOT.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _import_nodes(node: ast.AST, type_checking: bool) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement under `node`, at any depth; without `type_checking`, not the
    body of an `if TYPE_CHECKING:` (its `else:` still runs, so it is walked)."""
    for child in ast.iter_child_nodes(node):
        if not type_checking and isinstance(child, ast.If) and _is_type_checking(child):
            for other in child.orelse:
                yield from _import_nodes(other, type_checking)
            continue
        if isinstance(child, ast.Import | ast.ImportFrom):
            yield child
        yield from _import_nodes(child, type_checking)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _module_name(path: Path) -> list[str]:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return parts[:-1] if parts[-1] == "__init__" else parts


def _absolute(node: ast.ImportFrom, here: list[str], *, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    # A module's package is its parent; an `__init__`'s package is itself.
    anchor = here if is_package else here[:-1]
    anchor = anchor[: len(anchor) - (node.level - 1)]
    return ".".join([*anchor, *([node.module] if node.module else [])])
