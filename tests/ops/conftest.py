"""Operator tests: quiet settings (no broker wake-ups, the outbox on without Kafka) and an
admin client logged in as a superuser."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from pytest_django.fixtures import Settings as SettingsWrapper

from tests.ops.world import quiet_settings


@pytest.fixture(autouse=True)
def quiet(settings: SettingsWrapper) -> None:
    quiet_settings(settings)


@pytest.fixture
def staff(db: None) -> Client:
    """A client logged in as a superuser (staff, every permission)."""
    client = Client()
    client.force_login(User.objects.create_superuser("ops", "ops@example.com", "pw"))
    return client
