"""Views of the webhooks API (SPEC §9.5): validate, call one service or selector, serialize.

Endpoints are a client's (own tenant) and an operator's (every tenant; it names the tenant
when it registers one). Another tenant's endpoint is a 404.
"""

from __future__ import annotations

from datetime import datetime

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from agentrun import api
from agentrun.auth import IsClientOrOperator, request_key
from webhooks import selectors
from webhooks.api import serializers as s
from webhooks.services import endpoints


def _with_secret(registered: endpoints.Registered, code: int) -> Response:
    data = {**s.EndpointOut(registered.endpoint).data, "secret": registered.secret}
    return Response(data, status=code)


class WebhookEndpointViewSet(api.ObjectViewSet):
    permission_classes = [IsClientOrOperator]

    @extend_schema(responses=s.EndpointOut(many=True))
    def list(self, request: Request) -> Response:
        api.query(s.NoQuery, request)  # any parameter is a 400 naming it
        rows = selectors.endpoints_for(scope=api.request_scope(request))
        return Response(s.EndpointOut(rows, many=True).data)

    @extend_schema(request=s.EndpointCreateIn, responses={201: s.EndpointWithSecretOut})
    def create(self, request: Request) -> Response:
        data = api.body(s.EndpointCreateIn, request).validated_data
        tenant_id = api.tenant_for_write(request_key(request), data.get("tenant_id"))
        registered = endpoints.create_endpoint(
            tenant_id=tenant_id,
            url=data["url"],
            event_types=data["event_types"],
            description=data["description"],
        )
        return _with_secret(registered, status.HTTP_201_CREATED)

    @extend_schema(responses=s.EndpointOut)
    def retrieve(self, request: Request, pk: str) -> Response:
        endpoint = selectors.get_endpoint_for(scope=api.request_scope(request), endpoint_id=pk)
        return Response(s.EndpointOut(endpoint).data)

    @extend_schema(request=s.EndpointUpdateIn, responses=s.EndpointOut)
    def partial_update(self, request: Request, pk: str) -> Response:
        scope = api.request_scope(request)
        selectors.get_endpoint_for(scope=scope, endpoint_id=pk)  # 404 before the body's 400
        changes = dict(api.body(s.EndpointUpdateIn, request).validated_data)
        endpoint = endpoints.update_endpoint(scope=scope, endpoint_id=pk, changes=changes)
        return Response(s.EndpointOut(endpoint).data)

    @extend_schema(responses={204: None})
    def destroy(self, request: Request, pk: str) -> Response:
        endpoints.delete_endpoint(scope=api.request_scope(request), endpoint_id=pk)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(parameters=[s.DeliveryListQuery], responses=s.DeliveryPageOut)
    @action(detail=True, methods=["get"])
    def deliveries(self, request: Request, pk: str) -> Response:
        endpoint = selectors.get_endpoint_for(scope=api.request_scope(request), endpoint_id=pk)
        query = api.query(s.DeliveryListQuery, request)
        page = selectors.deliveries_page(
            endpoint=endpoint, limit=query["limit"], before_seq=query.get("before_seq")
        )
        return Response(s.DeliveryPageOut(page).data)

    @extend_schema(request=s.ReplayIn, responses=s.ReplayOut)
    @action(detail=True, methods=["post"])
    def replay(self, request: Request, pk: str) -> Response:
        scope = api.request_scope(request)
        selectors.get_endpoint_for(scope=scope, endpoint_id=pk)
        after = api.body(s.ReplayIn, request).validated_data["after"]
        is_time = isinstance(after, datetime)
        replayed = endpoints.replay_deliveries(
            scope=scope,
            endpoint_id=pk,
            after_seq=None if is_time else after,
            after_time=after if is_time else None,
        )
        data = {
            "replayed": len(replayed),
            "first_seq": replayed[0] if replayed else None,
            "last_seq": replayed[-1] if replayed else None,
            "truncated": len(replayed) >= endpoints.MAX_REPLAY,
        }
        return Response(s.ReplayOut(data).data)

    @extend_schema(request=None, responses=s.EndpointWithSecretOut)
    @action(detail=True, methods=["post"], url_path="rotate-secret")
    def rotate_secret(self, request: Request, pk: str) -> Response:
        registered = endpoints.rotate_secret(scope=api.request_scope(request), endpoint_id=pk)
        return _with_secret(registered, status.HTTP_200_OK)
