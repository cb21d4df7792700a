"""The OpenAPI document: generated without warnings, valid, and naming every API route."""

from __future__ import annotations

import re

import pytest
from django.urls import URLPattern, URLResolver, get_resolver
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.validation import validate_schema


def _shape(path: str) -> str:
    """A path with its parameters blanked and regex anchors dropped, to compare shapes."""
    path = re.sub(r"\(\?P<\w+>[^)]*\)|\{\w+\}|<[^>]+>", "{}", path)
    return path.replace("^", "").replace("$", "").replace("\\.", ".")


def _api_routes(patterns: list, prefix: str = "") -> set[str]:
    routes: set[str] = set()
    for pattern in patterns:
        route = prefix + str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            routes |= _api_routes(pattern.url_patterns, route)
        elif isinstance(pattern, URLPattern) and route.startswith("api/v1/"):
            routes.add(_shape("/" + route))
    return routes


@pytest.mark.django_db
def test_the_schema_validates_and_documents_every_api_route() -> None:
    schema = SchemaGenerator().get_schema(request=None, public=True)
    validate_schema(schema)
    documented = {_shape(path) for path in schema["paths"]}
    routes = _api_routes(get_resolver().url_patterns)
    assert len(routes) > 20
    missing = sorted(r for r in routes if r not in documented)
    assert not missing, missing
    assert schema["components"]["securitySchemes"]["ApiKey"]["scheme"] == "bearer"


def test_the_schema_is_served_without_a_key(client) -> None:
    response = client.get("/api/schema", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200


@pytest.mark.django_db
def test_the_schema_generates_without_a_single_warning(tmp_path) -> None:
    from django.core.management import call_command

    call_command("spectacular", "--fail-on-warn", "--validate", "--file", str(tmp_path / "s.yml"))
    assert "/api/v1/runs" in (tmp_path / "s.yml").read_text()
