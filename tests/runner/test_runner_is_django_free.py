"""The runner is a pure API client: nothing under `runner/` imports Django or the server.

It runs where the server does not (a laptop, a Kubernetes pod with only the runner
installed), and importing the server's settings would start an embedded PostgreSQL when
`DATABASE_URL` is unset. Two checks: a fresh interpreter imports the runner's entry points
without Django ending up in `sys.modules`, and no module under `runner/` names a forbidden
package in an import, even inside a function (which the first check would not reach).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from tests.layering import CODE_PACKAGES

ROOT = Path(__file__).resolve().parents[2]
RUNNER = ROOT / "runner"
# The framework and every server package, found rather than listed (a new app is forbidden
# from its first commit).
FORBIDDEN = {"django", "rest_framework", "celery", *CODE_PACKAGES} - {"runner"}


def _imported_packages(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


def test_no_module_under_runner_imports_django_or_a_server_package() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for path in sorted(RUNNER.rglob("*.py"))
        for line, name in _imported_packages(path)
        if name.split(".")[0] in FORBIDDEN
    ]
    assert offenders == []


def test_a_fresh_interpreter_imports_the_runner_without_django() -> None:
    check = (
        "import runner, runner.cli, runner.backends, runner.backends.codex, runner.loop; "
        "import sys; "
        f"server = sorted(m for m in sys.modules if m.split('.')[0] in {sorted(FORBIDDEN)}); "
        "assert not server, server"
    )
    done = subprocess.run(
        [sys.executable, "-c", check], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
