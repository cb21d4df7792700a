"""Kafka, in one module: the outbox settings, producer configuration, topic creation and
delivery with confluent-kafka.

- The producer is idempotent with `acks=all`: librdkafka's own retries neither duplicate
  nor reorder messages of a partition, and a success report means every in-sync replica
  has the message. Messages are keyed by the partition key, so one key is one partition.
- `message.timeout.ms` is half the relay lease, so every message gets a definitive report
  (acknowledged or failed) while its claim is still live, with half the lease left to
  record the outcome.
- One producer per thread is kept between batches (a Celery prefork child, or the thread
  that claims and produces in a `relay_outbox` loop; its settle thread only waits for the
  reports, `Sending.wait`). After any failure it is purged and closed, so the next batch
  starts on a fresh producer id: an idempotent producer that has seen a timeout or a
  broker that lost its state (`UNKNOWN_PRODUCER_ID`) is not reused.
- The topic is created on first use per process (AdminClient; an existing topic is fine),
  before the relay claims anything; the producer never creates one itself.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

from confluent_kafka import KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from django.db import connection

from agentrun import conf

logger = logging.getLogger("outbox.kafka")
# librdkafka's own log lines (connection failures, retries): noisy while a broker is down,
# so they get a logger of their own that deployments can turn down.
client_logger = logging.getLogger("outbox.kafka.client")
_local = threading.local()
_ensured_topics: set[tuple[str, str]] = set()


def outbox_enabled() -> bool:
    """The outbox is on exactly when bootstrap servers are configured."""
    return bool(conf.kafka_bootstrap_servers())


def outbox_topic() -> str:
    return conf.kafka_topic()


def delivery_timeout_ms() -> int:
    """`message.timeout.ms`: half the relay lease (0 would mean "never time out")."""
    return max(1, conf.outbox_lease_ms() // 2)


def producer_config() -> dict[str, Any]:
    return {
        "bootstrap.servers": conf.kafka_bootstrap_servers(),
        "client.id": "agentrun-outbox",
        "enable.idempotence": True,
        "acks": "all",
        # Topics are created by `ensure_topics` with the configured partitions; a metadata
        # request must not create one with the broker's defaults (a key would then map to
        # another partition than its earlier records).
        "allow.auto.create.topics": False,
        "linger.ms": 5,
        "message.timeout.ms": delivery_timeout_ms(),
        "message.max.bytes": conf.kafka_message_max_bytes(),
        "logger": client_logger,
        "error_cb": _log_client_error,
    }


class OutgoingMessage(NamedTuple):
    """One message to produce. A tuple, not a frozen dataclass: a relay batch makes a
    thousand, and a frozen dataclass's `__init__` costs about three times as much."""

    topic: str
    key: str
    value: bytes
    headers: dict[str, Any] | list[tuple[str, str | bytes | None]]  # values: str or bytes


@dataclass(frozen=True)
class DeliveryFailure:
    code: str
    message: str
    retriable: bool = True
    fatal: bool = False

    @classmethod
    def of(cls, error: KafkaError) -> DeliveryFailure:
        return cls(error.name(), error.str(), bool(error.retriable()), bool(error.fatal()))

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def deliver(messages: list[OutgoingMessage]) -> list[DeliveryFailure | None]:
    """Produce `messages` in order and wait for every delivery report.

    Returns one entry per message: None when Kafka acknowledged it, else the failure. Side
    effects: network I/O only, so no database transaction may be open (house rule 7).
    """
    if not messages:
        return []
    sending = send(messages)
    try:
        sending.producer.flush(report_timeout())
    except KafkaException as error:  # a fatal producer error surfaces from flush()
        sending.fail_unreported(_failure_from(error))
    results = sending.results()
    if any(result is not None for result in results):
        discard_producer()
    return results


def report_timeout() -> float:
    """Seconds to wait for a batch's reports: 1.5 x `message.timeout.ms`, still inside the
    lease (twice `message.timeout.ms`)."""
    return delivery_timeout_ms() * 1.5 / 1000


@dataclass
class Sending:
    """A batch of messages queued on a producer, and the delivery reports received so far
    (index -> None when acknowledged, else the failure)."""

    producer: Producer
    reports: dict[int, DeliveryFailure | None]
    count: int

    def wait(self) -> list[DeliveryFailure | None]:
        """Serve delivery callbacks until every message of the batch has its report or the
        report timeout passes; returns the outcomes. Safe on another thread than the one
        producing (librdkafka producers are thread-safe; callbacks run on the polling
        thread). Network I/O only: no transaction may be open."""
        assert not connection.in_atomic_block, "Kafka I/O with a transaction open"
        deadline = time.monotonic() + report_timeout()
        while len(self.reports) < self.count and (left := deadline - time.monotonic()) > 0:
            try:
                self.producer.poll(min(left, 0.1))
            except KafkaException as error:
                self.fail_unreported(_failure_from(error))
            except RuntimeError as error:  # discarded (closed) after a failure meanwhile
                self.fail_unreported(DeliveryFailure("_PRODUCER_CLOSED", str(error)))
        return self.results()

    def fail_unreported(self, failure: DeliveryFailure) -> None:
        for index in range(self.count):
            self.reports.setdefault(index, failure)

    def results(self) -> list[DeliveryFailure | None]:
        missing = DeliveryFailure(
            "_NO_REPORT", f"no delivery report within {report_timeout():.0f}s"
        )
        return [self.reports.get(index, missing) for index in range(self.count)]


def send(messages: list[OutgoingMessage]) -> Sending:
    """Queue `messages` in order on this thread's producer; their reports come later
    (`Sending.wait`). Network I/O only: no transaction may be open (house rule 7)."""
    assert not connection.in_atomic_block, "Kafka I/O with a transaction open"
    producer = _producer()
    return Sending(producer, _produce_all(producer, messages), len(messages))


def _produce_all(
    producer: Producer, messages: list[OutgoingMessage]
) -> dict[int, DeliveryFailure | None]:
    """Queue every message; returns the reports dict that delivery callbacks fill in.

    After a message is refused locally (too large, say), later messages of its key are not
    sent either: a later record must not reach Kafka before an earlier one.
    """
    reports: dict[int, DeliveryFailure | None] = {}
    refused_keys: set[tuple[str, str]] = set()
    for index, message in enumerate(messages):
        key = (message.topic, message.key)
        if key in refused_keys:
            reports[index] = DeliveryFailure("_NOT_SENT", "an earlier message of its key failed")
            continue
        refused = _produce(producer, message, _reporter(reports, index))
        if refused is not None:
            reports[index] = refused
            refused_keys.add(key)
    return reports


def _reporter(
    reports: dict[int, DeliveryFailure | None], index: int
) -> Callable[[KafkaError | None, Message], None]:
    """The delivery callback of one message (served by flush() on this thread)."""

    def on_delivery(error: KafkaError | None, message: Message) -> None:
        reports[index] = None if error is None else DeliveryFailure.of(error)

    return on_delivery


def _produce(
    producer: Producer, message: OutgoingMessage, on_delivery: Callable[..., None]
) -> DeliveryFailure | None:
    """Queue one message; None means "queued, its report will come"."""
    for _ in range(50):
        try:
            producer.produce(
                message.topic,
                key=message.key.encode(),
                value=message.value,
                headers=message.headers,
                on_delivery=on_delivery,
            )
            return None
        except BufferError:  # the local queue is full: serve reports, then try again
            producer.poll(0.1)
        except KafkaException as error:  # e.g. MSG_SIZE_TOO_LARGE, or a fatal producer
            return _failure_from(error)
        except TypeError as error:  # a header value that is not a string or bytes
            return DeliveryFailure("_INVALID_MESSAGE", str(error), retriable=False)
    return DeliveryFailure("_QUEUE_FULL", "the producer queue stayed full")


def _failure_from(error: KafkaException) -> DeliveryFailure:
    inner = error.args[0] if error.args else None
    if isinstance(inner, KafkaError):
        return DeliveryFailure.of(inner)
    return DeliveryFailure("_PRODUCER", str(error))


def _producer() -> Producer:
    config = producer_config()
    fingerprint = tuple(sorted((k, v) for k, v in config.items() if isinstance(v, (str, int))))
    if getattr(_local, "fingerprint", None) != fingerprint:
        discard_producer()
        _local.producer = Producer(config)
        _local.fingerprint = fingerprint
    producer: Producer = _local.producer
    return producer


def discard_producer(only: Producer | None = None) -> None:
    """Drop this thread's producer (purging what it still holds) and the topic cache; with
    `only`, just when that is still this thread's producer (a pipelined relay learns of a
    failure after it produced the next batch, maybe on a new producer already)."""
    producer = getattr(_local, "producer", None)
    if only is not None and producer is not only:
        return
    _local.producer = _local.fingerprint = None
    _ensured_topics.clear()
    if producer is not None:
        producer.purge()
        producer.flush(0)  # serve the purged messages' reports
        # Destroy it now rather than when its last reference goes (a pipelined relay's
        # settled batch may still hold one): a producer left alive reconnects when the
        # broker comes back.
        producer.close()


def ensure_topics(topics: set[str]) -> None:
    """Create the topics on first use in this process. Failures are logged, not raised:
    producing to a missing topic fails and the records are retried. The relay calls this
    before it claims, so a slow broker never eats into a claim's lease.

    Any answer from the broker settles a topic for this process (created, already there, or
    refused, e.g. where topics are provisioned by the platform team); only a broker that
    could not be reached is asked again by the next batch.
    """
    servers = conf.kafka_bootstrap_servers()
    missing = sorted(topic for topic in topics if (servers, topic) not in _ensured_topics)
    if not missing:
        return
    admin = AdminClient({"bootstrap.servers": servers, "logger": client_logger})  # type: ignore[dict-item]
    timeout = min(delivery_timeout_ms(), 5_000) / 1000
    futures = admin.create_topics([_new_topic(t) for t in missing], request_timeout=timeout)
    for topic, future in futures.items():
        try:
            future.result(timeout=timeout + 1)
        except TimeoutError:
            logger.warning("Kafka topic %s: no answer to create_topics", topic)
            continue
        except KafkaException as exc:
            error = exc.args[0]
            if error.code() != KafkaError.TOPIC_ALREADY_EXISTS:
                logger.warning("could not create Kafka topic %s: %s", topic, error.str())
                if error.code() < 0:  # a local error: the broker did not answer
                    continue
        _ensured_topics.add((servers, topic))


def _new_topic(topic: str) -> NewTopic:
    return NewTopic(
        topic,
        num_partitions=conf.kafka_topic_partitions(),
        replication_factor=conf.kafka_topic_replication(),
        config={"max.message.bytes": str(conf.kafka_message_max_bytes())},
    )


def _log_client_error(error: KafkaError) -> None:
    """Client-level errors (a broker down, say). Delivery failures are recorded on the
    records themselves, so only a fatal error is worth more than a debug line."""
    level = logging.ERROR if error.fatal() else logging.DEBUG
    client_logger.log(level, "Kafka client error: %s", error.str())
