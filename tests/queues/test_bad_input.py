"""Bad input to the queue endpoints is a 400 naming the field, and writes nothing."""

from __future__ import annotations

from typing import Any

import pytest

from agentrun.validation import KIB
from queues.models import QueueAttempt, QueueReadCursor, QueueTask
from tests.api.helpers import error_of
from tests.builders import key_client
from tests.queues.helpers import call, file_task, finish, run_of, schedule, task_body

pytestmark = pytest.mark.django_db

LONG_ID = "x" * 201


def _written() -> tuple[int, ...]:
    return tuple(m.objects.count() for m in (QueueTask, QueueAttempt, QueueReadCursor))


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"priority": -(2**31) - 1}, "priority"),
        ({"priority": 1.5}, "priority"),
        ({"priority": 2.0}, "priority"),
        ({"priority": "3"}, "priority"),
        ({"priority": True}, "priority"),
        ({"priority": 10**12}, "priority"),
        ({"payload": {"text": "x" * (256 * KIB)}}, "payload"),
        ({"payload": ["not", "an", "object"]}, "payload"),
        ({"metadata": {"blob": "y" * (64 * KIB)}}, "metadata"),
        ({"references": [{"n": n} for n in range(101)]}, "references"),
        ({"title": ""}, "title"),
        ({"title": "t" * 501}, "title"),
        ({"queue": LONG_ID}, "queue"),
        ({"idempotency_key": LONG_ID}, "idempotency_key"),
        ({"backend_profile": "no-such-backend"}, "backend_profile"),
        ({"workspace_ref": {"extra": 1}}, "workspace_ref.path"),
        ({"workspace_ref": {"path": "/w", "blob": "z" * (64 * KIB)}}, "workspace_ref"),
        ({"surprise": 1}, "surprise"),
        ({"dispatch": "yes"}, "dispatch"),
    ],
)
def test_a_bad_task_is_a_400_naming_the_field(change: dict[str, Any], field: str) -> None:
    before = _written()
    response = call(key_client(role="client"), "POST", "/queue/tasks", task_body(**change))
    assert error_of(response, 400)["details"]["field"] == field
    assert _written() == before


def test_a_missing_field_is_named() -> None:
    body = task_body()
    body.pop("title")
    assert (
        error_of(call(key_client(role="client"), "POST", "/queue/tasks", body), 400)["details"][
            "field"
        ]
        == "title"
    )


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("state=sleeping", "state"),
        ("changed_after=abc", "changed_after"),
        ("page=0", "page"),
        ("page_size=201", "page_size"),
        ("changed_after=3&page=2", "page"),
        ("limit=5", "limit"),
        ("changed_after=1&limit=501", "limit"),
        ("lane=" + LONG_ID, "lane"),
        ("sort=priority", "sort"),
    ],
)
def test_a_bad_list_query_is_a_400_naming_the_parameter(query: str, field: str) -> None:
    response = call(key_client(role="client"), "GET", f"/queue/tasks?{query}")
    assert error_of(response, 400)["details"]["field"] == field


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/retry", {"reason": "r"}, "idempotency_key"),
        ("/retry", {"idempotency_key": "k"}, "reason"),
        ("/retry", {"idempotency_key": "k", "reason": "r", "dry_run": "maybe"}, "dry_run"),
        ("/read", {}, "reader_id"),
        ("/read", {"reader_id": LONG_ID}, "reader_id"),
        ("/cancel", {"reason": "r" * 2001}, "reason"),
        ("/cancel", {"why": "r"}, "why"),
        (
            "/attempts/{attempt}/failure",
            {"failure_kind": "oops", "failure_message": "m"},
            "failure_kind",
        ),
        ("/attempts/{attempt}/activate", {"run_id": "mine"}, "run_id"),
        (f"/attempts/{LONG_ID}/activate", {}, "attempt_id"),
    ],
)
def test_bad_task_actions_are_a_400_naming_the_field(
    path: str, body: dict[str, Any], field: str
) -> None:
    filed = file_task()
    schedule()
    finish(run_of(filed.id), status="failed")
    api = key_client(role="client")
    reserved = call(
        api, "POST", f"/queue/tasks/{filed.id}/retry", {"idempotency_key": "k-0", "reason": "r"}
    ).json()["attempt"]["attempt_id"]
    before = _written()
    response = call(api, "POST", f"/queue/tasks/{filed.id}" + path.format(attempt=reserved), body)
    assert error_of(response, 400)["details"]["field"] == field
    assert _written() == before


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/queue/tasks/{task}/attempts?after_retry_index=x", "after_retry_index"),
        ("/queue/tasks/{task}/attempts?limit=0", "limit"),
        ("/queue/stats?queue=" + LONG_ID, "queue"),
        ("/queue/commander?reader_id=" + LONG_ID, "reader_id"),
        ("/queue/commander?unknown=1", "unknown"),
        (f"/queue/tasks/{LONG_ID}", "id"),
    ],
)
def test_bad_read_parameters_are_a_400_naming_them(path: str, field: str) -> None:
    filed = file_task()
    response = call(key_client(role="client"), "GET", path.format(task=filed.id))
    assert error_of(response, 400)["details"]["field"] == field
