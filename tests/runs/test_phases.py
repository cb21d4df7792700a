"""`backend_status` phases are spelled once: `runs.phases` for the server, `runner.phases`
for the runner, and the two agree.

The scan reads the source with `ast`: a `"phase": ...` dict entry or a `phase=` keyword
whose value is a string literal (or an f-string) is a second spelling, and so is any
string constant equal to a server phase outside `runs/phases.py` (docstrings aside).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from runner.phases import LATE_WRITE_REJECTED, RunnerPhase
from runs.control_models import CancelStage
from runs.phases import RUNNER_PHASES, Phase

ROOT = Path(__file__).resolve().parents[2]
SERVER_PACKAGES = ("agentrun", "runs", "sessions", "queues", "dispatch", "outbox", "ops")
SERVER_PHASES = {phase.value for phase in Phase}


def _modules(packages: tuple[str, ...], owner: str) -> list[Path]:
    return [
        path
        for package in packages
        for path in sorted((ROOT / package).rglob("*.py"))
        if "migrations" not in path.parts and path.relative_to(ROOT).as_posix() != owner
    ]


def _is_literal(node: ast.expr | None) -> bool:
    string = isinstance(node, ast.Constant) and isinstance(node.value, str)
    return string or isinstance(node, ast.JoinedStr)


def _literal_phases(tree: ast.AST) -> list[ast.expr]:
    """Values of `"phase": ...` entries and `phase=...` keywords that are literals."""
    values: list[ast.expr | None] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            values += [v for k, v in zip(node.keys, node.values, strict=True) if _is_phase_key(k)]
        if isinstance(node, ast.Call):
            values += [keyword.value for keyword in node.keywords if keyword.arg == "phase"]
    return [value for value in values if value is not None and _is_literal(value)]


def _is_phase_key(key: ast.expr | None) -> bool:
    return isinstance(key, ast.Constant) and key.value == "phase"


def _server_phase_constants(tree: ast.AST) -> list[ast.Constant]:
    docstrings = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and node.value in SERVER_PHASES
        and id(node) not in docstrings
    ]


def _offenders(path: Path, *, server: bool) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = [*_literal_phases(tree), *(_server_phase_constants(tree) if server else [])]
    where = path.relative_to(ROOT)
    return sorted({f"{where}:{node.lineno} {ast.unparse(node)}" for node in found})


def test_no_server_phase_is_spelled_outside_runs_phases() -> None:
    offenders = [
        offence
        for path in _modules(SERVER_PACKAGES, owner="runs/phases.py")
        for offence in _offenders(path, server=True)
    ]
    assert offenders == []


def test_no_runner_phase_is_spelled_outside_runner_phases() -> None:
    offenders = [
        offence
        for path in _modules(("runner",), owner="runner/phases.py")
        for offence in _offenders(path, server=False)
    ]
    assert offenders == []


def test_the_runner_posts_only_phases_the_server_lists() -> None:
    assert {phase.value for phase in RunnerPhase} <= RUNNER_PHASES


def test_runner_and_server_phases_do_not_collide() -> None:
    """A runner's phase never reads as one the server wrote."""
    assert RUNNER_PHASES.isdisjoint(SERVER_PHASES)


def test_the_runner_reads_the_servers_late_write_phase() -> None:
    assert LATE_WRITE_REJECTED == Phase.LATE_WRITE_REJECTED


@pytest.mark.parametrize("stage", CancelStage.values)
def test_every_cancel_stage_has_a_phase(stage: str) -> None:
    assert Phase.cancel_stage(stage) == f"cancel-{stage}"


def test_an_unknown_cancel_stage_is_refused() -> None:
    with pytest.raises(ValueError):
        Phase.cancel_stage("misspelt")
