"""The tenant gate (`agentrun.tenancy.Scope`) below the API: every selector and service
that reads or writes a tenant's rows takes a required `scope`, a tenant's scope never
reaches another tenant's run, command, runner job, session, task or attempt (404, and
nothing is written), and only the explicit operator scope sees every tenant.

The API-level attack (another tenant's keys on every operation) is `test_access.py`;
this file holds the services to it directly, where a forgotten argument used to mean
"every tenant" (`lock_task(task_id)` and `tenant_id=None`)."""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from django.db import connection, transaction

from agentrun.errors import AgentRunError
from agentrun.tenancy import Scope
from queues import selectors as queue_selectors
from queues.locks import lock_task
from queues.services import attempt_retries, tasks
from runs import selectors as run_selectors
from runs.services.command_lifecycle import create_command
from sessions import selectors as session_selectors
from sessions.services import lifecycle, steering
from sessions.services.lifecycle import StorageFacts
from tests.builders import make_run
from tests.security.world import World, make_world

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]
APPS = ("runs", "sessions", "queues", "dispatch", "outbox", "ops")


def _locked_task(**kwargs: Any) -> Any:
    with transaction.atomic():
        return lock_task(**kwargs)


# Every gated callable, with the arguments (other than `scope`) that name world's rows.
Gated = tuple[Callable[..., Any], Callable[[World], dict[str, Any]]]
SERVICES: dict[str, Gated] = {
    "admit_steer": (
        steering.admit_steer,
        lambda w: {"session_id": w.session_id, "payload": {"text": "x"}},
    ),
    "cancel_session": (
        steering.cancel_session,
        lambda w: {"session_id": w.session_id, "reason": "x", "requested_by": None},
    ),
    "mark_session_read": (
        lifecycle.mark_session_read,
        lambda w: {"session_id": w.session_id, "reader_id": "r"},
    ),
    "refresh_session_storage": (
        lifecycle.refresh_session_storage,
        lambda w: {"session_id": w.session_id, "facts": StorageFacts(storage_kind="none")},
    ),
    "mark_session_storage_evicted": (
        lifecycle.mark_session_storage_evicted,
        lambda w: {"session_id": w.session_id},
    ),
    "cancel_task": (tasks.cancel_task, lambda w: {"task_id": w.task_id, "reason": "x"}),
    "mark_task_read": (tasks.mark_task_read, lambda w: {"task_id": w.task_id, "reader_id": "r"}),
    "reserve_retry": (
        attempt_retries.reserve_retry,
        lambda w: {"task_id": w.task_id, "idempotency_key": "k", "reason": "r", "dry_run": False},
    ),
    "activate_retry": (
        attempt_retries.activate_retry,
        lambda w: {"task_id": w.task_id, "attempt_id": w.attempt_id},
    ),
    "record_attempt_failure": (
        attempt_retries.record_attempt_failure,
        lambda w: {
            "task_id": w.task_id,
            "attempt_id": w.attempt_id,
            "failure_kind": "backend-failed",
            "failure_message": "m",
        },
    ),
    "lock_task": (_locked_task, lambda w: {"task_id": w.task_id}),
}
SELECTORS: dict[str, Gated] = {
    "get_run_for": (run_selectors.get_run_for, lambda w: {"run_id": w.run_id}),
    "writable_run_id": (run_selectors.writable_run_id, lambda w: {"run_id": w.run_id}),
    "get_command_for": (run_selectors.get_command_for, lambda w: {"command_id": w.command_id}),
    "get_runner_job_for": (
        run_selectors.get_runner_job_for,
        lambda w: {"runner_job_id": w.runner_job_id},
    ),
    "get_session_for": (
        session_selectors.get_session_for,
        lambda w: {"session_id": w.session_id},
    ),
    "get_task_for": (queue_selectors.get_task_for, lambda w: {"task_id": w.task_id}),
}
GATED = {**SERVICES, **SELECTORS}
RUN_ROWS = ("get_run_for", "writable_run_id", "get_command_for", "get_runner_job_for")
LISTS = {
    "runs_for": run_selectors.runs_for,
    "sessions_for": session_selectors.sessions_for,
    "tasks_for": queue_selectors.tasks_for,
}


def _state() -> str:
    """A fingerprint of every row a gated service could have written."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT (SELECT count(*) FROM agentrun_commands), (SELECT count(*) FROM "
            "agentrun_cancel_requests), (SELECT max(version) FROM agentrun_sessions), "
            "(SELECT max(version) FROM agentrun_queue_tasks), (SELECT count(*) FROM "
            "agentrun_session_read_cursors), (SELECT count(*) FROM agentrun_queue_read_cursors),"
            " (SELECT string_agg(state || coalesce(failure_message, ''), ',' ORDER BY "
            "attempt_id) FROM agentrun_queue_attempts)"
        )
        return repr(cursor.fetchone())


def _status_of(function: Callable[..., Any], **kwargs: Any) -> int:
    """The HTTP status the call would answer with (200 when it returns)."""
    try:
        function(**kwargs)
    except AgentRunError as error:
        return error.http_status
    return 200


@pytest.mark.parametrize("name", [*GATED, *LISTS])
def test_scope_is_a_required_keyword_with_no_default(name: str) -> None:
    function = GATED[name][0] if name in GATED else LISTS[name]
    target = lock_task if function is _locked_task else function
    parameter = inspect.signature(target).parameters["scope"]
    assert parameter.kind is inspect.Parameter.KEYWORD_ONLY
    assert parameter.default is inspect.Parameter.empty
    assert parameter.annotation in ("Scope", Scope)


@pytest.mark.parametrize("name", GATED)
def test_calling_without_a_scope_is_a_type_error(name: str) -> None:
    world = make_world("tenant-a")
    function, arguments = GATED[name]
    before = _state()
    with pytest.raises(TypeError, match="scope"):
        function(**arguments(world))
    assert _state() == before


@pytest.mark.parametrize("name", GATED)
def test_a_tenant_scope_never_reaches_another_tenants_rows(name: str) -> None:
    victim, intruder = make_world("tenant-a"), make_world("tenant-b")
    function, arguments = GATED[name]
    before = _state()
    with pytest.raises(AgentRunError) as refused:
        function(**arguments(victim), scope=Scope.tenant(intruder.tenant))
    assert refused.value.http_status == 404, refused.value.as_json()
    assert _state() == before
    # The intruder's own rows are in its scope: the 404 above is the gate, not the call.
    own = _status_of(function, **arguments(intruder), scope=Scope.tenant("tenant-b"))
    assert own != 404, name


@pytest.mark.parametrize("name", GATED)
def test_the_operator_scope_reaches_every_tenant(name: str) -> None:
    worlds = [make_world("tenant-a"), make_world("tenant-b")]
    function, arguments = GATED[name]
    for world in worlds:
        status = _status_of(function, **arguments(world), scope=Scope.operator())
        assert status != 404, (name, world.tenant)


@pytest.mark.parametrize("name", LISTS)
def test_lists_hold_exactly_the_scopes_tenants(name: str) -> None:
    make_world("tenant-a")
    make_world("tenant-b")
    rows = LISTS[name]
    tenants = {
        scope: set(rows(scope=scope).values_list("tenant_id", flat=True))
        for scope in (Scope.tenant("tenant-a"), Scope.tenant("tenant-b"), Scope.operator())
    }
    assert tenants[Scope.tenant("tenant-a")] == {"tenant-a"}
    assert tenants[Scope.tenant("tenant-b")] == {"tenant-b"}
    assert tenants[Scope.operator()] == {"tenant-a", "tenant-b"}


def test_a_runner_scope_reaches_its_one_run_only() -> None:
    mine = make_world("tenant-a")
    other_run = make_run(tenant_id="tenant-a")  # same tenant, another run
    other_command = create_command(run_id=other_run.id, type="turn", payload={"text": "x"})
    other = replace(mine, run_id=other_run.id, command_id=other_command.command.id)
    runner = Scope(tenant_id="tenant-a", run_id=mine.run_id)
    assert list(run_selectors.runs_for(scope=runner).values_list("id", flat=True)) == [mine.run_id]
    for name, (function, arguments) in GATED.items():
        if name in RUN_ROWS:
            assert _status_of(function, **arguments(mine), scope=runner) == 200
        else:  # a runner's scope holds only rows addressed by its run: no session, no task
            assert _status_of(function, **arguments(mine), scope=runner) == 404
    for name in ("get_run_for", "writable_run_id", "get_command_for"):
        function, arguments = GATED[name]
        assert _status_of(function, **arguments(other), scope=runner) == 404, name


def test_no_scope_means_every_tenant_only_when_said() -> None:
    for bad in ({"tenant_id": None}, {"tenant_id": ""}, {"tenant_id": "t", "everyone": True}):
        with pytest.raises(ValueError):
            Scope(**bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Scope.tenant("")
    assert not Scope.tenant("t").is_operator and Scope.operator().is_operator


def _optional_tenant_parameters(path: Path, root: Path) -> list[str]:
    """Parameters that let a caller pass a tenant that may be None (the old "every tenant")
    or an API key (the old selector convention) instead of a `Scope`."""
    tree = ast.parse(path.read_text(), filename=str(path))
    where = path.relative_to(root)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        args = node.args
        for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
            annotation = ast.unparse(arg.annotation) if arg.annotation else ""
            optional_tenant = arg.arg == "tenant_id" and "None" in annotation
            if optional_tenant or annotation == "ApiKey":
                found.append(f"{where}:{node.lineno} {node.name}({arg.arg})")
    return found


def gate_offenders(root: Path = ROOT) -> list[str]:
    return [
        offender
        for app in APPS
        for path in sorted((root / app).rglob("*.py"))
        if "migrations" not in path.parts
        and (path.name in ("selectors.py", "locks.py", "projection.py") or "services" in path.parts)
        for offender in _optional_tenant_parameters(path, root)
    ]


def test_selectors_services_and_locks_take_a_scope_not_an_optional_tenant() -> None:
    assert gate_offenders() == []
