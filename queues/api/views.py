"""Views of the work-queue API (SPEC §3): validate, call one service or selector, serialize.

Tasks are a client's (own tenant) and an operator's (every tenant) surface; runner keys
have no business here. Another tenant's task is a 404.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiParameter, PolymorphicProxySerializer, extend_schema
from rest_framework import viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from agentrun import api
from agentrun.auth import IsClientOrOperator, request_key
from agentrun.validation import validate_path_id
from queues import selectors
from queues.api import serializers as s
from queues.models import QueueTask
from queues.services import attempt_retries, tasks
from runs.usage import check_tenant_quota

ATTEMPT = r"attempts/(?P<attempt_id>[^/]+)"
ATTEMPT_ID = OpenApiParameter("attempt_id", str, OpenApiParameter.PATH)
# A page of the backlog, or with `changed_after` a page of the change feed.
LIST_OR_FEED = PolymorphicProxySerializer(
    component_name="QueueTaskListOrFeed",
    serializers=[s.TaskPageOut, s.TaskFeedOut],
    resource_type_field_name=None,
)


def _feed(scope: QuerySet[QueueTask], query: dict[str, Any]) -> selectors.FeedPage:
    """The change-feed form of the list (`changed_after` given)."""
    return selectors.task_feed(
        tasks=scope,
        reader_id=query.get("reader_id"),
        changed_after=query["changed_after"],
        limit=query.get("limit", 100),
    )


class QueueTaskViewSet(api.ObjectViewSet):
    permission_classes = [IsClientOrOperator]

    @extend_schema(parameters=[s.TaskListQuery], responses={200: LIST_OR_FEED})
    def list(self, request: Request) -> Response:
        query = api.query(s.TaskListQuery, request)
        scope = selectors.filtered(
            selectors.tasks_for(scope=api.request_scope(request)),
            queue=query.get("queue"),
            state=query.get("state"),
            lane=query.get("lane"),
        )
        if "changed_after" in query:
            return Response(s.TaskFeedOut(_feed(scope, query)).data)
        page = selectors.list_tasks(
            tasks=scope,
            reader_id=query.get("reader_id"),
            page=query.get("page", 1),
            page_size=query.get("page_size", 50),
        )
        return Response(s.TaskPageOut(page).data)

    @extend_schema(request=s.TaskCreateIn, responses={201: s.TaskOut, 200: s.TaskOut})
    def create(self, request: Request) -> Response:
        body = api.body(s.TaskCreateIn, request)
        tenant_id = api.tenant_for_write(request_key(request), body.validated_data.get("tenant_id"))
        check_tenant_quota(tenant_id=tenant_id)  # 429 `quota_exceeded` past the tenant's quota
        result = tasks.create_task(tenant_id=tenant_id, spec=body.spec())
        return api.created_or_replayed(result.task, s.TaskOut, result.created)

    @extend_schema(parameters=[s.TaskQuery], responses=s.TaskOut)
    def retrieve(self, request: Request, pk: str) -> Response:
        query = api.query(s.TaskQuery, request)
        task = selectors.get_task_for(
            scope=api.request_scope(request), task_id=pk, reader_id=query.get("reader_id")
        )
        return Response(s.TaskOut(task).data)

    @extend_schema(request=s.TaskCancelIn, responses=s.TaskCancelOut)
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str) -> Response:
        outcome = tasks.cancel_task(task_id=pk, **api.cancel_arguments(s.TaskCancelIn, request))
        return Response(s.TaskCancelOut(outcome).data)

    @extend_schema(request=s.TaskReadIn, responses=s.TaskReadCursorOut)
    @action(detail=True, methods=["post"])
    def read(self, request: Request, pk: str) -> Response:
        data = api.body(s.TaskReadIn, request).validated_data
        cursor = tasks.mark_task_read(task_id=pk, scope=api.request_scope(request), **data)
        return Response(s.TaskReadCursorOut(cursor).data)

    @extend_schema(parameters=[s.AttemptsQuery], responses=s.AttemptPageOut)
    @action(detail=True, methods=["get"])
    def attempts(self, request: Request, pk: str) -> Response:
        query = api.query(s.AttemptsQuery, request)
        task = selectors.get_task_for(scope=api.request_scope(request), task_id=pk)
        items = selectors.attempts_of(task=task, **query)
        page = {"task_id": task.id, "items": items, "count": len(items)}
        return Response(s.AttemptPageOut(page).data)

    @extend_schema(request=s.RetryIn, responses={201: s.ReservationOut, 200: s.ReservationOut})
    @action(detail=True, methods=["post"])
    def retry(self, request: Request, pk: str) -> Response:
        data = api.body(s.RetryIn, request).validated_data
        reservation = attempt_retries.reserve_retry(
            task_id=pk, scope=api.request_scope(request), **data
        )
        return api.created_or_replayed(reservation, s.ReservationOut, reservation.created)

    @extend_schema(request=s.ActivateIn, responses=s.ActivationOut, parameters=[ATTEMPT_ID])
    @action(detail=True, methods=["post"], url_path=f"{ATTEMPT}/activate")
    def activate(self, request: Request, pk: str, attempt_id: str) -> Response:
        api.body(s.ActivateIn, request)
        activation = attempt_retries.activate_retry(
            task_id=pk,
            attempt_id=validate_path_id(attempt_id, field="attempt_id"),
            scope=api.request_scope(request),
        )
        return Response(s.ActivationOut(activation).data)

    @extend_schema(request=s.AttemptFailureIn, responses=s.AttemptOut, parameters=[ATTEMPT_ID])
    @action(detail=True, methods=["post"], url_path=f"{ATTEMPT}/failure")
    def failure(self, request: Request, pk: str, attempt_id: str) -> Response:
        data = api.body(s.AttemptFailureIn, request).validated_data
        attempt = attempt_retries.record_attempt_failure(
            task_id=pk,
            attempt_id=validate_path_id(attempt_id, field="attempt_id"),
            scope=api.request_scope(request),
            **data,
        )
        return Response(s.AttemptOut(attempt).data)


class QueueViewSet(viewsets.ViewSet):
    """Whole-queue views: stats and the commander snapshot, scoped like the tasks."""

    permission_classes = [IsClientOrOperator]

    @extend_schema(parameters=[s.QueueQuery], responses=s.QueueStatsOut)
    @action(detail=False, methods=["get"])
    def stats(self, request: Request) -> Response:
        queue = api.query(s.QueueQuery, request).get("queue")
        scope = selectors.in_queue(selectors.tasks_for(scope=api.request_scope(request)), queue)
        stats = selectors.queue_stats(tasks=scope, queue=queue)
        return Response(s.QueueStatsOut(stats).data)

    @extend_schema(parameters=[s.CommanderQuery], responses=s.CommanderOut)
    @action(detail=False, methods=["get"])
    def commander(self, request: Request) -> Response:
        query = api.query(s.CommanderQuery, request)
        queue, reader_id = query.get("queue"), query.get("reader_id")
        scope = selectors.in_queue(selectors.tasks_for(scope=api.request_scope(request)), queue)
        stats = selectors.queue_stats(tasks=scope, queue=queue)
        items = selectors.commander(tasks=scope, reader_id=reader_id)
        snapshot = {"queue": queue, "reader_id": reader_id, "stats": stats, "items": items}
        return Response(s.CommanderOut({**snapshot, "generated_at": stats["generated_at"]}).data)
