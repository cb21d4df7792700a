"""The projection tier is fenced, not only described (SPEC §9.1, HOUSE-STYLE "layering").

`runs/` is the bottom domain layer, yet its services write other apps' rows in the run's
transaction. It may do that only through those apps' projection modules (and build
CloudEvents with `outbox.cloudevents`); any other import from an app above it is an arrow
running back up the layers. The projection modules in turn import only the models, locks
and versions of `runs` and of their own app, plus `agentrun`, so calling one from `runs`
can never import a `runs` service back.

Imports are collected at any depth (a function-level import counts), from the AST of every
module outside migrations. An import under `if TYPE_CHECKING:` is a type only and is not
counted: it never runs.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIRST_PARTY = {"agentrun", "runs", "sessions", "queues", "dispatch", "outbox", "runner", "ops"}
PROJECTION_MODULES = {
    "sessions.projection",
    "queues.projection",
    "dispatch.intents",
    "outbox.record",
}
RUNS_MAY_IMPORT = PROJECTION_MODULES | {"outbox.cloudevents"}
RUNS_FOUNDATION = {"runs.models", "runs.locks", "runs.versions"}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement under `node`, at any depth, except `if TYPE_CHECKING:` bodies
    (their `else:` still runs, so it is walked)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child):
            for other in child.orelse:
                yield from _import_nodes(other)
            continue
        if isinstance(child, ast.Import | ast.ImportFrom):
            yield child
        yield from _import_nodes(child)


def _is_module(dotted: str) -> bool:
    path = ROOT.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, dotted module) for each first-party module the file imports.
    `from pkg import name` counts as `pkg.name` when that is a module."""
    found = []
    for node in _import_nodes(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif node.level == 0 and node.module is not None:
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                found.append((node.lineno, submodule if _is_module(submodule) else node.module))
    return [(line, name) for line, name in found if name.split(".")[0] in FIRST_PARTY]


def _modules_of(package: str) -> list[Path]:
    return [
        path
        for path in sorted((ROOT / package).rglob("*.py"))
        if "migrations" not in path.relative_to(ROOT).parts
    ]


def _within(module: str, allowed: set[str]) -> bool:
    return any(module == name or module.startswith(f"{name}.") for name in allowed)


def test_runs_imports_only_projection_modules() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in _modules_of("runs")
        for line, module in imported_modules(path)
        if module.split(".")[0] not in {"runs", "agentrun", "runner"}
        and not _within(module, RUNS_MAY_IMPORT)
    ]
    assert offenders == []


def test_projection_modules_import_only_models_locks_versions() -> None:
    offenders = []
    for projection in sorted(PROJECTION_MODULES):
        app = projection.split(".")[0]
        path = ROOT.joinpath(*projection.split(".")).with_suffix(".py")
        allowed = RUNS_FOUNDATION | {app, "agentrun"}
        offenders += [
            f"{path.relative_to(ROOT)}:{line} imports {module}"
            for line, module in imported_modules(path)
            if not _within(module, allowed)
        ]
    assert offenders == []


def test_every_projection_module_exists() -> None:
    """The fence above is only as good as its list: a moved module must move the list."""
    assert [name for name in sorted(PROJECTION_MODULES) if not _is_module(name)] == []
