"""Fault tests: the test process sends no on-commit wake-ups (each test enqueues the work it
means the worker to do, on its own Redis database), and children get the test database."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pytest_django.fixtures import Settings as SettingsWrapper

from tests.dispatch.helpers import celery_broker
from tests.support.kafka_broker import kafka_broker  # noqa: F401  (fixture)


@pytest.fixture(autouse=True)
def quiet_wakeups(settings: SettingsWrapper) -> Iterator[None]:
    settings.AGENTRUN_DISPATCH_WAKE_ON_COMMIT = False
    settings.AGENTRUN_QUEUE_WAKE_ON_COMMIT = False
    settings.AGENTRUN_KAFKA_OUTBOX_WAKE_ON_COMMIT = False
    settings.AGENTRUN_KAFKA_BOOTSTRAP_SERVERS = ""
    with celery_broker("memory://localhost/"):
        yield
