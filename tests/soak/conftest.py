"""Soak test set-up: the session's Kafka broker, and no on-commit wake-ups from this
process (the load processes and the relay process do the work)."""

from __future__ import annotations

from tests.faults.conftest import quiet_wakeups  # noqa: F401  (autouse fixture)
from tests.support.kafka_broker import kafka_broker  # noqa: F401  (fixture)
