"""Views of the outbox API: the operator status (SPEC §3 `GET /outbox/status`)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agentrun.auth import IsOperator
from agentrun.errors import invalid
from outbox.api.serializers import OutboxStatusSerializer
from outbox.selectors import outbox_status


class OutboxStatusView(APIView):
    """Backlog, retries, oldest pending record and first error of the Kafka outbox."""

    permission_classes = [IsOperator]

    @extend_schema(responses=OutboxStatusSerializer)
    def get(self, request: Request) -> Response:
        if request.query_params:
            name = sorted(request.query_params)[0]
            raise invalid(f"{name}: unknown query parameter", field=name)
        return Response(OutboxStatusSerializer(outbox_status()).data)
