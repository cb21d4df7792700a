"""The Kafka message of an event: a CloudEvents 1.0 structured JSON envelope and headers.

Consumers get everything in the value (id = event id, so they dedupe by `id`; `subject` is
the run; `data` carries the run, session and command ids, the per-run `seq` and the
payload) and the routing facts again as headers, so a consumer can filter or detect a gap
(`seq` per run, `outbox_seq` globally) without parsing the value. The partition key keeps
one session's events (or one run's, when it has no session) in one partition, prefixed by
the tenant so tenants never share a key. The value goes to Kafka as the stored jsonb's text
(UTF-8 JSON; keys in jsonb's order), sent by the relay without re-encoding.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from runs.models import Event, Run

CONTENT_TYPE = "application/cloudevents+json; charset=UTF-8"
EVENT_TYPE_PREFIX = "agentrun.event."


def partition_key_for(run: Run) -> str:
    """`<tenant>:<session id>` when the run belongs to a session, else `<tenant>:<run id>`."""
    return f"{run.tenant_id}:{run.session_id or run.id}"


def command_id_of(payload: Any) -> str | None:
    """The command an event is about: payload `command_id`, else `target_command_id`."""
    if not isinstance(payload, dict):
        return None
    for name in ("command_id", "target_command_id"):
        value = payload.get(name)
        if isinstance(value, str) and value:
            return value
    return None


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def cloud_event(*, run: Run, event: Event, partition_key: str, source: str) -> dict[str, Any]:
    """The structured-mode CloudEvent (`partitionkey` is the partitioning extension)."""
    return {
        "specversion": "1.0",
        "id": event.id,
        "source": source,
        "type": f"{EVENT_TYPE_PREFIX}{event.type}",
        "subject": run.id,
        "time": rfc3339(event.created_at),
        "datacontenttype": "application/json",
        "partitionkey": partition_key,
        "data": {
            "tenant_id": run.tenant_id,
            "run_id": run.id,
            "session_id": run.session_id,
            "command_id": command_id_of(event.payload),
            "seq": event.seq,
            "type": event.type,
            "payload": event.payload,
        },
    }


def message_headers(*, run: Run, event: Event) -> dict[str, str]:
    """Kafka headers, stored as JSON text values and sent as UTF-8 bytes. The record's
    `outbox_seq` header is added by the statement that draws it (`outbox.locks`)."""
    return {
        "content-type": CONTENT_TYPE,
        "event_id": event.id,
        "event_type": event.type,
        "run_id": run.id,
        "seq": str(event.seq),
    }
