"""`GET /api/v1/dispatch/status`: the dispatch backlog, for operators."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agentrun.auth import IsOperator
from dispatch.api.serializers import DispatchStatusOut
from dispatch.selectors import dispatch_status


class DispatchStatusView(APIView):
    permission_classes = [IsOperator]

    @extend_schema(responses=DispatchStatusOut, operation_id="dispatch_status")
    def get(self, request: Request) -> Response:
        return Response(DispatchStatusOut(dispatch_status()).data)
