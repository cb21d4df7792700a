"""Fixtures of the outbox tests: the real Kafka-protocol broker and outbox settings.

Every test relays to its own topic, so tests sharing the session's broker never see each
other's messages. On-commit wake-ups are off unless a test turns them on: the relay runs
where the test says: its own threads, a real Celery worker or a `relay_outbox` process.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pytest_django.fixtures import Settings as SettingsWrapper

from outbox.kafka import discard_producer
from tests.outbox.builders import use_outbox
from tests.support.kafka_broker import KafkaBroker, kafka_broker  # noqa: F401  (fixture)


@pytest.fixture
def outbox_topic(settings: SettingsWrapper, kafka_broker: KafkaBroker) -> Iterator[str]:  # noqa: F811
    """The outbox on, relaying to a fresh topic of the session's broker."""
    yield use_outbox(settings, kafka_broker)
    discard_producer()


@pytest.fixture
def outbox_off(settings: SettingsWrapper) -> None:
    settings.AGENTRUN_KAFKA_BOOTSTRAP_SERVERS = ""
