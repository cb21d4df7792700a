"""The default Celery broker: kombu's SQLAlchemy transport on agentrun's own PostgreSQL.

With `CELERY_BROKER_URL` unset the broker is the database agentrun already needs, so the
embedded defaults (`make run`) run no service besides the embedded PostgreSQL and a
message is a committed row: a consumer cannot read it before its writer has finished,
which is the race that killed workers on kombu's filesystem transport (a file read before
its writer filled it: `JSONDecodeError`, an unrecoverable error for the worker). The
message is taken under a row lock and hidden in the same transaction, so a burst from many
producers is serialised by PostgreSQL, not by file renames.

Two things kombu's transport lacks, added here:
- the polling interval as a setting (`AGENTRUN_BROKER_POLL_MS`); kombu would pass a
  `polling_interval` transport option on to `create_engine`, which refuses it;
- pruning: kombu keeps every delivered message (`visible = false`) forever; a consumer
  that finds its queue empty deletes delivered messages older than a minute, at most once
  every `PRUNE_EVERY_S`, so the table stays a few rows long under any load.

The alias `agentrun-sqla` is registered with kombu by `agentrun.celery`; the settings
build the URL `agentrun-sqla+postgresql+psycopg://…` from `DATABASE_URL`.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from typing import Any

from kombu.transport import sqlalchemy as kombu_sqla
from kombu.transport.virtual import Empty

PRUNE_EVERY_S = 30.0
PRUNE_OLDER_THAN = timedelta(minutes=1)


class Channel(kombu_sqla.Channel):
    _pruned_at = 0.0

    def _get(self, queue: Any, timeout: Any = None) -> Any:
        try:
            return super()._get(queue)  # type: ignore[no-untyped-call]
        except Empty:
            self._prune_delivered()
            raise

    def _prune_delivered(self) -> None:
        now = time.monotonic()
        if now - Channel._pruned_at < PRUNE_EVERY_S:
            return
        Channel._pruned_at = now
        # kombu stamps `sent_at` (naive, local time) when it hides a delivered message.
        cutoff = datetime.now() - PRUNE_OLDER_THAN  # noqa: DTZ005
        message = self.message_cls
        self.session.query(message).filter(message.visible.is_(False)).filter(
            message.sent_at < cutoff
        ).delete(synchronize_session=False)
        self.session.commit()


class Transport(kombu_sqla.Transport):
    Channel = Channel

    def __init__(self, client: Any, **kwargs: Any) -> None:
        super().__init__(client, **kwargs)  # type: ignore[no-untyped-call]
        from django.conf import settings

        self.polling_interval = settings.AGENTRUN_BROKER_POLL_MS / 1000
