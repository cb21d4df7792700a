"""The usage API (SPEC §9.4): sums of a run's `token_usage` events, the operator's usage
by tenant and time, and the operator-set tenant quotas.

- `GET /runs/{id}/usage` — any key that sees the run (a runner reads its run's, to know
  how much of the budget is left).
- `GET /usage?tenant_id=&since=` — operator.
- `GET, PUT, DELETE /quotas/{tenant_id}` `{"max_tokens_per_day": N}` — operator.
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agentrun import api
from agentrun.api import CountsOut
from agentrun.auth import IsAuthenticatedKey, IsOperator
from agentrun.errors import not_found
from agentrun.validation import IdField, StrictSerializer, validate_path_id
from runs import selectors, usage
from runs.control_models import TenantQuota
from runs.services import quotas


class UsageOut(CountsOut):
    events = serializers.IntegerField()
    counted = tuple(usage.USAGE_FIELDS)
    counted_after = "events"
    by_model = serializers.DictField(child=serializers.DictField(child=serializers.IntegerField()))


class RunUsageOut(UsageOut):
    run_id = serializers.CharField()


class TenantUsageOut(UsageOut):
    tenant_id = serializers.CharField(allow_null=True)
    since = serializers.DateTimeField(allow_null=True)


class UsageQuery(StrictSerializer):
    tenant_id = IdField(required=False)
    since = serializers.DateTimeField(required=False)


class QuotaIn(StrictSerializer):
    max_tokens_per_day = serializers.IntegerField(min_value=1, max_value=2**62)


class QuotaOut(serializers.ModelSerializer[TenantQuota]):
    class Meta:
        model = TenantQuota
        fields = ["tenant_id", "max_tokens_per_day", "updated_at"]


class RunUsageView(APIView):
    permission_classes = [IsAuthenticatedKey]

    @extend_schema(responses=RunUsageOut)
    def get(self, request: Request, pk: str) -> Response:
        validate_path_id(pk)
        run = selectors.get_run_for(scope=api.request_scope(request), run_id=pk)
        return Response(RunUsageOut(usage.run_usage(run=run)).data)


class TenantUsageView(APIView):
    permission_classes = [IsAuthenticatedKey, IsOperator]

    @extend_schema(parameters=[UsageQuery], responses=TenantUsageOut)
    def get(self, request: Request) -> Response:
        query = api.query(UsageQuery, request)
        found = usage.tenant_usage(tenant_id=query.get("tenant_id"), since=query.get("since"))
        return Response(TenantUsageOut(found).data)


class QuotaView(APIView):
    permission_classes = [IsAuthenticatedKey, IsOperator]

    @extend_schema(responses=QuotaOut)
    def get(self, request: Request, tenant_id: str) -> Response:
        validate_path_id(tenant_id, field="tenant_id")
        return Response(QuotaOut(usage.tenant_quota(tenant_id=tenant_id)).data)

    @extend_schema(request=QuotaIn, responses=QuotaOut)
    def put(self, request: Request, tenant_id: str) -> Response:
        validate_path_id(tenant_id, field="tenant_id")
        data = api.body(QuotaIn, request).validated_data
        quota = quotas.set_tenant_quota(tenant_id=tenant_id, **data)
        return Response(QuotaOut(quota).data)

    @extend_schema(request=None, responses={204: None})
    def delete(self, request: Request, tenant_id: str) -> Response:
        validate_path_id(tenant_id, field="tenant_id")
        if not quotas.clear_tenant_quota(tenant_id=tenant_id):
            raise not_found("quota", tenant_id)
        return Response(status=status.HTTP_204_NO_CONTENT)
