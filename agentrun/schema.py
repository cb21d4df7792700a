"""OpenAPI document extensions: how drf-spectacular describes our API key auth."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class ApiKeyScheme(OpenApiAuthenticationExtension):
    target_class = "agentrun.auth.ApiKeyAuthentication"
    name = "ApiKey"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "An agentrun API key: `Authorization: Bearer ar_<role>_…`. "
            "Create one with `manage.py create_api_key`.",
        }
