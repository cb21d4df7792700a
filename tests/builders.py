"""Small builders for tests. State is made through the real services wherever possible."""

from __future__ import annotations

import importlib
from typing import Any

from rest_framework.test import APIClient

from agentrun.auth import issue_api_key
from agentrun.models import ApiKey
from runs.models import Backend, Run
from runs.services.lifecycle import RunSpec, claim_run, create_run

_seed = importlib.import_module("runs.migrations.0002_seed_backend_profiles")


def ensure_backend_profiles() -> None:
    """Transactional tests flush tables, seed data included: put the profiles back."""
    if not Backend.objects.exists():
        _seed.seed_profiles(_AppsShim(), None)


class _AppsShim:
    def get_model(self, app_label: str, model_name: str) -> type[Backend]:
        return Backend


def run_spec(**overrides: Any) -> RunSpec:
    values: dict[str, Any] = {
        "project_id": "proj-1",
        "workspace_ref": {"path": "/work/repo"},
        "provider_id": "openai",
        "backend_profile": "scripted",
        "execution_policy": {"sandbox": "workspace-write"},
    }
    values.update(overrides)
    return RunSpec(**values)


def make_run(*, tenant_id: str = "tenant-a", run_id: str | None = None, **spec: Any) -> Run:
    return create_run(tenant_id=tenant_id, spec=run_spec(**spec), run_id=run_id).run


def make_claimed_run(
    *, runner_id: str = "runner-1", lease_ms: int = 60_000, tenant_id: str = "tenant-a"
) -> Run:
    run = make_run(tenant_id=tenant_id)
    return claim_run(run_id=run.id, runner_id=runner_id, lease_ms=lease_ms)


def api_client(api_key_secret: str | None) -> APIClient:
    client = APIClient()
    if api_key_secret is not None:
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {api_key_secret}")
    return client


def key_client(*, role: str, tenant_id: str = "tenant-a", run_id: str | None = None) -> APIClient:
    """An API client authenticated with a new key of that role."""
    issued = issue_api_key(tenant_id=tenant_id, role=role, run_id=run_id)
    client = api_client(issued.secret)
    client.api_key = issued.api_key  # type: ignore[attr-defined]
    return client


def key_of(client: APIClient) -> ApiKey:
    return client.api_key  # type: ignore[attr-defined, no-any-return]
