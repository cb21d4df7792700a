"""Which package may import which (SPEC §9.1), checked on the source, not described.

`imported_modules(package)` reads every module of a package (migrations excluded) with
`ast` and returns the modules each one imports, at any depth: inside functions, under
`if TYPE_CHECKING:` and in `try` blocks too, since a function-level import is still an
arrow in the graph (it is how cycles hide). Relative imports are resolved to absolute
names. Each rule below is one test over that map; add new rules the same way.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SERVER_APPS = ("runs", "sessions", "queues", "dispatch", "outbox", "ops", "runner")
# Every top-level package of the repository except the tests, found rather than listed so
# that a new package is held to the rules from its first commit.
CODE_PACKAGES = tuple(
    sorted(
        path.name
        for path in ROOT.iterdir()
        if (path / "__init__.py").is_file() and path.name != "tests"
    )
)


def imported_modules(package: str) -> dict[Path, set[str]]:
    """Each module of `package` (a top-level directory of the repository, migrations left
    out) → the absolute names of the modules it imports anywhere in its body."""
    return {
        path.relative_to(ROOT): _imports_of(path, package)
        for path in sorted((ROOT / package).rglob("*.py"))
        if "migrations" not in path.parts
    }


def _imports_of(path: Path, package: str) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    here = _module_name(path)
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, here, is_package=path.name == "__init__.py")
            found.add(base)
            # `from x import y` may import the submodule x.y; name both so a rule on either
            # catches it.
            found.update(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
    return found


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


def _offenders(package: str, forbidden: tuple[str, ...]) -> list[str]:
    return sorted(
        f"{path}: {module}"
        for path, modules in imported_modules(package).items()
        for module in modules
        if module.split(".")[0] in forbidden
    )


def test_agentrun_imports_no_app() -> None:
    """The foundation imports no app, not even inside a function: every app imports it."""
    assert _offenders("agentrun", SERVER_APPS) == []


def test_nothing_imports_ops() -> None:
    """`ops` composes every app, so it is the top: only ops itself and the tests import it."""
    offenders = [
        line
        for package in CODE_PACKAGES
        if package != "ops"
        for line in _offenders(package, ("ops",))
    ]
    assert offenders == []
