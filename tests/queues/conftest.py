"""Queue test set-up: no on-commit wake-ups. The scheduler runs where a test calls it (its
own threads, or the step function), and no message is left in a developer's broker."""

from __future__ import annotations

import pytest
from pytest_django.fixtures import Settings as SettingsWrapper


@pytest.fixture(autouse=True)
def no_wake_ups(settings: SettingsWrapper) -> None:
    settings.AGENTRUN_QUEUE_WAKE_ON_COMMIT = False
    settings.AGENTRUN_DISPATCH_WAKE_ON_COMMIT = False
    settings.AGENTRUN_QUEUE_CONCURRENCY = {}
