"""Test set-up: a real PostgreSQL (DATABASE_URL, or the embedded one), real threads."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from rest_framework.test import APIClient

from runs.waiting import stop_run_change_listener
from tests import builders


@pytest.fixture(autouse=True)
def backend_profiles(request: pytest.FixtureRequest) -> None:
    """Every test that touches the database sees the seeded backend profiles (transactional
    tests flush every table, seed rows included, after each test)."""
    marker = request.node.get_closest_marker("django_db")
    wants_tx = "transactional_db" in request.fixturenames or bool(
        marker and marker.kwargs.get("transaction")
    )
    if marker is None and not wants_tx and "db" not in request.fixturenames:
        return
    request.getfixturevalue("transactional_db" if wants_tx else "db")
    builders.ensure_backend_profiles()


@pytest.fixture(scope="session", autouse=True)
def _run_change_listener_stops(django_db_setup: None) -> Iterator[None]:
    """The long-poll listener holds a connection to the test database: close it before
    pytest-django drops that database."""
    yield
    stop_run_change_listener()


@pytest.fixture
def client_api(db: None) -> APIClient:
    return builders.key_client(role="client", tenant_id="tenant-a")


@pytest.fixture
def operator_api(db: None) -> APIClient:
    return builders.key_client(role="operator", tenant_id="ops")


@pytest.fixture(autouse=True)
def _fresh_throttle_counters() -> Iterator[None]:
    """Wrong-key counters live in the process's cache: one test's refusals must not
    throttle the next test's requests (agentrun/throttle.py)."""
    from django.core.cache import cache

    cache.clear()
    yield
