"""The approvals API (SPEC §9.3): a run's approvals, a runner recording one, a person
answering one.

- `GET /runs/{id}/approvals` — the run's approvals, oldest first (any key that sees the run).
- `POST /runs/{id}/approvals` — a runner records what its backend asked (fenced like every
  runner write); the same `request_key` again returns the record it has (200), decided or
  not, so a restarted runner never makes a second one.
- `GET /runs/{id}/approvals/{approval_id}` — one approval (what a waiting runner polls).
- `POST /runs/{id}/approvals/{approval_id}` `{"decision": "approve" | "deny", "reason"}` —
  a client or operator answers: 200 with the approval; the same answer again is a replay
  (200); another one a 409 `approval_decided`.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agentrun import api, conf
from agentrun.auth import IsAuthenticatedKey, IsClientOrOperator, IsRunnerOrOperator, request_key
from agentrun.schema import items_of
from agentrun.validation import (
    KIB,
    BoundedJSONObjectField,
    IdField,
    StrictSerializer,
    validate_path_id,
)
from runs import selectors
from runs.api.serializers import RunnerWriteIn
from runs.control_models import Approval, ApprovalKind
from runs.services import approvals

MAX_TTL_S = 7 * 24 * 3600


class ApprovalOut(serializers.ModelSerializer[Approval]):
    class Meta:
        model = Approval
        fields = api.row_fields(Approval, hide={"tenant_id", "request_key"})


class ApprovalRequestIn(RunnerWriteIn):
    command_id = IdField()
    request_key = IdField()
    kind = serializers.ChoiceField(choices=ApprovalKind.choices)
    summary = serializers.CharField(max_length=4 * KIB)
    details = BoundedJSONObjectField(max_bytes=64 * KIB, required=False, default=dict)
    # Read per request (a callable default), so the deployment's setting applies.
    ttl_s = serializers.IntegerField(min_value=1, max_value=MAX_TTL_S, default=conf.approval_ttl_s)

    def request(self) -> approvals.ApprovalRequest:
        return api.as_dataclass(approvals.ApprovalRequest, self.validated_data)


class ApprovalAnswerIn(StrictSerializer):
    decision = serializers.ChoiceField(choices=["approve", "deny"])
    reason = serializers.CharField(
        max_length=4 * KIB, required=False, allow_null=True, allow_blank=True
    )


def _run(request: Request, run_id: str) -> Any:
    validate_path_id(run_id)
    return selectors.get_run_for(scope=api.request_scope(request), run_id=run_id)


class RunApprovalsView(APIView):
    def get_permissions(self) -> list[Any]:
        role = IsRunnerOrOperator if self.request.method == "POST" else IsAuthenticatedKey
        return [IsAuthenticatedKey(), role()]

    @extend_schema(operation_id="v1_runs_approvals_list", responses=items_of(ApprovalOut))
    def get(self, request: Request, pk: str) -> Response:
        items = selectors.approvals_of(run=_run(request, pk))
        return Response({"items": ApprovalOut(items, many=True).data})

    @extend_schema(
        operation_id="v1_runs_approvals_request",
        request=ApprovalRequestIn,
        responses={201: ApprovalOut, 200: ApprovalOut},
    )
    def post(self, request: Request, pk: str) -> Response:
        validate_path_id(pk)
        run_id = selectors.writable_run_id(scope=api.request_scope(request), run_id=pk)
        body = api.body(ApprovalRequestIn, request)
        result = approvals.request_approval(run_id=run_id, **body.fence(), request=body.request())
        return api.created_or_replayed(result.approval, ApprovalOut, result.changed)


class ApprovalView(APIView):
    def get_permissions(self) -> list[Any]:
        role = IsClientOrOperator if self.request.method == "POST" else IsAuthenticatedKey
        return [IsAuthenticatedKey(), role()]

    @extend_schema(responses=ApprovalOut)
    def get(self, request: Request, pk: str, approval_id: str) -> Response:
        validate_path_id(approval_id, field="approval_id")
        approval = selectors.approval_of(run=_run(request, pk), approval_id=approval_id)
        return Response(ApprovalOut(approval).data)

    @extend_schema(
        operation_id="v1_runs_approvals_answer", request=ApprovalAnswerIn, responses=ApprovalOut
    )
    def post(self, request: Request, pk: str, approval_id: str) -> Response:
        validate_path_id(approval_id, field="approval_id")
        run = _run(request, pk)
        data = api.body(ApprovalAnswerIn, request).validated_data
        result = approvals.answer_approval(
            run_id=run.id,
            approval_id=approval_id,
            decision=data["decision"],
            reason=data.get("reason"),
            decided_by=request_key(request).id,
        )
        return Response(ApprovalOut(result.approval).data, status=status.HTTP_200_OK)
