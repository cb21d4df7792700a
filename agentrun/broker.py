"""The default Celery broker: kombu's SQLAlchemy transport on agentrun's own PostgreSQL.

With `CELERY_BROKER_URL` unset the broker is the database agentrun already needs, so the
embedded defaults (`make run`) run no service besides the embedded PostgreSQL and a
message is a committed row: a consumer cannot read it before its writer has finished,
which is the race that killed workers on kombu's filesystem transport (a file read before
its writer filled it: `JSONDecodeError`, an unrecoverable error for the worker). The
message is taken under a row lock and hidden in the same transaction, so a burst from many
producers is serialised by PostgreSQL, not by file renames.

What kombu's transport lacks, added here:
- the polling interval as a setting (`AGENTRUN_BROKER_POLL_MS`); kombu would pass a
  `polling_interval` transport option on to `create_engine`, which refuses it;
- commits without waiting for the WAL flush (`synchronous_commit=off`, see
  `_engine_from_config`) and a small connection pool per process;
- one statement per publish and per delivery (kombu's ORM path takes three to five
  round trips), the delivery with `FOR UPDATE SKIP LOCKED`;
- pruning: kombu keeps every delivered message (`visible = false`) forever; a consumer
  that finds its queue empty deletes delivered messages older than a minute, at most once
  every `PRUNE_EVERY_S`, so the table stays a few rows long under any load.

The alias `agentrun-sqla` is registered with kombu by `agentrun.celery`; the settings
build the URL `agentrun-sqla+postgresql+psycopg://…` from `DATABASE_URL`.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from kombu.transport import sqlalchemy as kombu_sqla
from kombu.transport.virtual import Empty
from kombu.utils.json import dumps, loads
from sqlalchemy import create_engine, delete, func, insert, select, update

from agentrun import conf

PRUNE_EVERY_S = 30.0
PRUNE_OLDER_THAN_S = 60
# Transport options kombu reads itself; the rest are create_engine's (as kombu does).
NOT_ENGINE_OPTIONS = (
    "queue_tablename", "message_tablename", "callback", "errback", "max_retries",
    "interval_start", "interval_step", "interval_max", "retry_errors", "polling_interval",
)  # fmt: skip


class Channel(kombu_sqla.Channel):
    _pruned_at = 0.0

    def _engine_from_config(self) -> Any:
        # A message is a wake-up: the work it announces is a committed row of its own
        # (a dispatch intent, an outbox record, a queue task) that beat's batches find
        # anyway. So the broker's commits need not wait for the WAL flush; this halves a
        # publish and a delivery, and a crash loses at most a wake-up, never work.
        options = dict(self.connection.client.transport_options)
        for name in NOT_ENGINE_OPTIONS:
            options.pop(name, None)
        options.setdefault("connect_args", {"options": "-c synchronous_commit=off"})
        options.setdefault("pool_size", 2)  # a publisher or a consumer needs one at a time
        options.setdefault("max_overflow", 3)
        options.setdefault("pool_pre_ping", True)  # the database restarted under us
        return create_engine(self.connection.client.hostname, **options)

    def _queue_id(self, queue: str) -> int:
        """The queue's row id, looked up (or created) once per channel."""
        ids: dict[str, int] = self.__dict__.setdefault("_queue_ids", {})
        if queue not in ids:
            ids[queue] = int(self._get_or_create(queue).id)  # type: ignore[no-untyped-call]
        return ids[queue]

    def _put(self, queue: Any, payload: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        # One INSERT and a commit (kombu's ORM path looks the queue up on every publish).
        table = self.message_cls.__table__
        body = dumps(payload)  # type: ignore[no-untyped-call]  # kombu's: dates, uuids
        values = {"queue_id": self._queue_id(queue), "payload": body, "visible": True}
        self.session.execute(insert(table).values(**values, version=1))
        self.session.commit()

    def _get(self, queue: str, timeout: Any = None) -> Any:
        # Take the oldest visible message and hide it in one statement; SKIP LOCKED lets
        # several consumers take different messages at once instead of queueing on one.
        table = self.message_cls.__table__
        oldest = (
            select(table.c.id)
            .where(table.c.queue_id == self._queue_id(queue), table.c.visible.is_(True))
            .order_by(table.c.id)
            .limit(1)
            .with_for_update(skip_locked=True)
            .scalar_subquery()
        )
        take = (
            update(table)
            .where(table.c.id == oldest)
            .values(visible=False, timestamp=func.localtimestamp())
            .returning(table.c.payload)
        )
        try:
            row = self.session.execute(take).first()
        finally:
            self.session.commit()
        if row is None:
            self._prune_delivered()
            raise Empty()
        return loads(row[0])  # type: ignore[no-untyped-call]

    def _prune_delivered(self) -> None:
        now = time.monotonic()
        if now - Channel._pruned_at < PRUNE_EVERY_S:
            return
        Channel._pruned_at = now
        # `timestamp` is when `_get` hid the message, by the server's clock.
        table = self.message_cls.__table__
        cutoff = func.localtimestamp() - timedelta(seconds=PRUNE_OLDER_THAN_S)
        self.session.execute(
            delete(table).where(table.c.visible.is_(False), table.c.timestamp < cutoff)
        )
        self.session.commit()


class Transport(kombu_sqla.Transport):
    Channel = Channel

    def __init__(self, client: Any, **kwargs: Any) -> None:
        super().__init__(client, **kwargs)  # type: ignore[no-untyped-call]

        self.polling_interval = conf.broker_poll_ms() / 1000
