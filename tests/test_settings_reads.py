"""`AGENTRUN_*` settings are read through `agentrun.conf` only (layout issue, item 4).

`django.conf.settings` types every attribute as `Any`: read directly, one app casts and
another does not, and a misspelt name fails only when the line runs. `agentrun/conf.py`
gives each setting one accessor and one type (`tests/test_conf.py` calls them all); this
test finds, with `ast`, any other module that reads `settings.AGENTRUN_…` or
`getattr(settings, "AGENTRUN_…")`. `agentrun/settings.py` defines them, so it is exempt.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.layering import CODE_PACKAGES

ROOT = Path(__file__).resolve().parents[1]
# Found, not listed, so a new app is checked from its first commit; `bench` sets settings
# for its cells the way tests do.
PACKAGES = tuple(package for package in CODE_PACKAGES if package != "bench")
EXEMPT = {"agentrun/settings.py", "agentrun/conf.py"}


def _is_settings(node: ast.expr) -> bool:
    """`settings` or `<anything>.settings` (as in `django.conf.settings`)."""
    name = node.id if isinstance(node, ast.Name) else getattr(node, "attr", None)
    return name == "settings"


def _read_name(node: ast.AST) -> str | None:
    """The setting `node` reads directly, if it is `settings.AGENTRUN_X` or
    `getattr(settings, "AGENTRUN_X")`."""
    if isinstance(node, ast.Attribute) and _is_settings(node.value):
        return node.attr
    if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "getattr":
        target, name = [*node.args, None, None][:2]
        if target is not None and _is_settings(target) and isinstance(name, ast.Constant):
            return str(name.value)
    return None


def _direct_reads(tree: ast.AST) -> list[tuple[int, str]]:
    return [
        (getattr(node, "lineno", 0), name)
        for node in ast.walk(tree)
        if (name := _read_name(node) or "").startswith("AGENTRUN_")
    ]


def test_agentrun_settings_are_read_only_through_conf() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{line} {name}"
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if path.relative_to(ROOT).as_posix() not in EXEMPT and "migrations" not in path.parts
        for line, name in _direct_reads(ast.parse(path.read_text(), filename=str(path)))
    ]
    assert offenders == []
