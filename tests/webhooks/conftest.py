"""Webhook test settings: loopback targets and plain http allowed (the receiver is a local
HTTP server), no on-commit wake-ups (each test relays where it says), short backoff."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pytest_django.fixtures import Settings as SettingsWrapper

from tests.webhooks.receiver import Receiver


@pytest.fixture(autouse=True)
def webhook_settings(settings: SettingsWrapper) -> None:
    settings.AGENTRUN_WEBHOOK_ALLOW_PRIVATE = True
    settings.AGENTRUN_WEBHOOK_ALLOW_HTTP = True
    settings.AGENTRUN_WEBHOOK_WAKE_ON_COMMIT = False
    settings.AGENTRUN_WEBHOOK_BACKOFF_BASE_MS = 50
    settings.AGENTRUN_WEBHOOK_BACKOFF_CAP_MS = 400
    settings.AGENTRUN_WEBHOOK_TIMEOUT_S = 5.0
    settings.AGENTRUN_KAFKA_BOOTSTRAP_SERVERS = ""


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    started = Receiver().start()
    yield started
    started.stop()
