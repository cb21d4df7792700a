"""House rules that a reviewer would otherwise have to remember (HOUSE-STYLE rule 8).

Row locks and advisory locks are spelled only in `agentrun/locks.py` and the apps'
`locks.py`: nowhere else may code call `select_for_update()` or put `FOR UPDATE` or
`pg_advisory` into SQL. Docstrings and comments may talk about them.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.layering import CODE_PACKAGES

ROOT = Path(__file__).resolve().parents[1]
# Every code package, found rather than listed so that a new app is held to the rules from
# its first commit; `bench` spells the hand-written baseline SQL it measures the ORM against.
PACKAGES = [package for package in CODE_PACKAGES if package != "bench"]
SQL_WORDS = ("FOR UPDATE", "pg_advisory")


def _lock_spellings(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    docstrings = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "select_for_update":
            found.append(f"{path.relative_to(ROOT)}:{node.lineno} select_for_update")
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
            and any(word in node.value for word in SQL_WORDS)
        ):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.value[:40]!r}")
    return found


def test_locks_are_spelled_only_in_locks_modules() -> None:
    offenders = [
        spelling
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if path.name != "locks.py" and "migrations" not in path.parts
        for spelling in _lock_spellings(path)
    ]
    assert offenders == []


def test_no_grab_bag_modules() -> None:
    bags = [
        str(path.relative_to(ROOT))
        for package in PACKAGES
        for name in ("utils.py", "helpers.py", "common.py")
        for path in (ROOT / package).rglob(name)
    ]
    assert bags == []
