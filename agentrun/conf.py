"""Typed access to the `AGENTRUN_*` settings: `conf.dispatch_batch_size() -> int`, ...

`agentrun/settings.py` parses the environment once, but `django.conf.settings` types every
attribute as `Any`, so apps cast (`int(settings.X)` in some, nothing in others) and a typo
in a setting's name fails only when the line runs. Each accessor here names one setting and
gives it one type: a `Setting` row (the setting's name and its cast) for a plain value, a
function where reading it takes more; `tests/test_conf.py` calls every one, so a misspelt
name fails there.

Accessors read `django.conf.settings` on every call, never at import: a test's `settings`
fixture or `override_settings` takes effect at once, as a deployment's settings module
does. A read costs an attribute lookup; nothing here is cached.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from django.conf import settings

T = TypeVar("T")


@dataclass(frozen=True)
class Setting(Generic[T]):
    """One setting read as one type, at call time: `conf.kafka_topic()`."""

    name: str
    cast: Callable[[Any], T]

    def __call__(self) -> T:
        return self.cast(getattr(settings, self.name))


def _text(value: Any) -> str:
    """An unset text setting reads as ""."""
    return str(value or "")


def _text_set(value: Any) -> frozenset[str]:
    """A list setting read as a set of texts."""
    return frozenset(str(item) for item in value or ())


def _optional_text(value: Any) -> str | None:
    return str(value) if value else None


# The project.


data_dir = Setting("AGENTRUN_DATA_DIR", Path)
# Connections a process's pool holds at most (0: no pool).
db_pool_size = Setting("AGENTRUN_DB_POOL_SIZE", int)
# True when no `DATABASE_URL` was given and the embedded PostgreSQL serves.
database_embedded = Setting("AGENTRUN_DATABASE_EMBEDDED", bool)
# The URL runners call back on.
api_url = Setting("AGENTRUN_API_URL", _text)
source_commit = Setting("AGENTRUN_SOURCE_COMMIT", _text)
default_lease_ms = Setting("AGENTRUN_DEFAULT_LEASE_MS", int)
max_lease_ms = Setting("AGENTRUN_MAX_LEASE_MS", int)
long_poll_max_seconds = Setting("AGENTRUN_LONG_POLL_MAX_SECONDS", int)
stream_heartbeat_s = Setting("AGENTRUN_STREAM_HEARTBEAT_S", float)
stream_send_timeout_s = Setting("AGENTRUN_STREAM_SEND_TIMEOUT_S", float)
stream_retry_ms = Setting("AGENTRUN_STREAM_RETRY_MS", int)
stream_ticket_ttl_s = Setting("AGENTRUN_STREAM_TICKET_TTL_S", int)
stream_allowed_origins = Setting("AGENTRUN_STREAM_ALLOWED_ORIGINS", _text_set)
session_storage_root = Setting("AGENTRUN_SESSION_STORAGE_ROOT", Path)


# Runner dispatch and its launchers.


dispatch_batch_size = Setting("AGENTRUN_DISPATCH_BATCH_SIZE", int)
dispatch_lease_ms = Setting("AGENTRUN_DISPATCH_LEASE_MS", int)
dispatch_backoff_base_ms = Setting("AGENTRUN_DISPATCH_BACKOFF_BASE_MS", int)
dispatch_backoff_cap_ms = Setting("AGENTRUN_DISPATCH_BACKOFF_CAP_MS", int)
dispatch_max_attempts = Setting("AGENTRUN_DISPATCH_MAX_ATTEMPTS", int)
dispatch_capacity_wait_ms = Setting("AGENTRUN_DISPATCH_CAPACITY_WAIT_MS", int)
dispatch_wake_on_commit = Setting("AGENTRUN_DISPATCH_WAKE_ON_COMMIT", bool)
# Whether a worker consuming the dispatch queue claims on `LISTEN` (dispatch/listener.py).
dispatch_listen = Setting("AGENTRUN_DISPATCH_LISTEN", bool)
# The default launcher kind (`local`, `kubernetes`, or an extra one).
launcher = Setting("AGENTRUN_LAUNCHER", _text)


def extra_launchers() -> dict[str, str]:
    """Launcher kind → dotted path of its class."""
    return {str(name): str(path) for name, path in settings.AGENTRUN_EXTRA_LAUNCHERS.items()}


local_runner_command = Setting("AGENTRUN_LOCAL_RUNNER_COMMAND", _optional_text)
runner_image = Setting("AGENTRUN_RUNNER_IMAGE", _text)
kubernetes_namespace = Setting("AGENTRUN_KUBERNETES_NAMESPACE", _text)
kubernetes_job_ttl_s = Setting("AGENTRUN_KUBERNETES_JOB_TTL_S", int)


# Maintenance: reaper and reconciliation.


maintenance_batch_size = Setting("AGENTRUN_MAINTENANCE_BATCH_SIZE", int)
lease_reap_grace_ms = Setting("AGENTRUN_LEASE_REAP_GRACE_MS", int)
reconcile_grace_ms = Setting("AGENTRUN_RECONCILE_GRACE_MS", int)
# How long an approval waits for a person when the runner names no `ttl_s`.
approval_ttl_s = Setting("AGENTRUN_APPROVAL_TTL_S", int)


# The work queue.


queue_batch_size = Setting("AGENTRUN_QUEUE_BATCH_SIZE", int)
queue_wake_on_commit = Setting("AGENTRUN_QUEUE_WAKE_ON_COMMIT", bool)


def queue_concurrency() -> object:
    """As configured (JSON): `queues.services.scheduler` checks its shape and reports a
    bad one by name, so it is not cast here."""
    return settings.AGENTRUN_QUEUE_CONCURRENCY


queue_session_turns_queue = Setting("AGENTRUN_QUEUE_SESSION_TURNS_QUEUE", _text)
queue_session_turn_priority = Setting("AGENTRUN_QUEUE_SESSION_TURN_PRIORITY", int)


# Kafka and the outbox.


# Empty when the outbox is off.
kafka_bootstrap_servers = Setting("AGENTRUN_KAFKA_BOOTSTRAP_SERVERS", _text)
kafka_topic = Setting("AGENTRUN_KAFKA_TOPIC", _text)
kafka_topic_partitions = Setting("AGENTRUN_KAFKA_TOPIC_PARTITIONS", int)
# -1: the broker's default.
kafka_topic_replication = Setting("AGENTRUN_KAFKA_TOPIC_REPLICATION", int)
# The CloudEvents `source` of every message.
kafka_source = Setting("AGENTRUN_KAFKA_SOURCE", _text)
kafka_message_max_bytes = Setting("AGENTRUN_KAFKA_MESSAGE_MAX_BYTES", int)
outbox_batch_size = Setting("AGENTRUN_KAFKA_OUTBOX_BATCH_SIZE", int)
outbox_lease_ms = Setting("AGENTRUN_KAFKA_OUTBOX_LEASE_MS", int)
outbox_backoff_base_ms = Setting("AGENTRUN_KAFKA_OUTBOX_BACKOFF_BASE_MS", int)
outbox_backoff_cap_ms = Setting("AGENTRUN_KAFKA_OUTBOX_BACKOFF_CAP_MS", int)
outbox_retention_days = Setting("AGENTRUN_KAFKA_OUTBOX_RETENTION_DAYS", int)
outbox_wake_on_commit = Setting("AGENTRUN_KAFKA_OUTBOX_WAKE_ON_COMMIT", bool)
# How stale `/metrics`' backlog gauges may be: one database read per interval.
metrics_backlog_refresh_s = Setting("AGENTRUN_METRICS_BACKLOG_REFRESH_S", float)
# Celery delivery (settings.py says why): late acks, prefetch, RabbitMQ queue type.
celery_acks_late = Setting("AGENTRUN_CELERY_ACKS_LATE", bool)
celery_prefetch_multiplier = Setting("AGENTRUN_CELERY_PREFETCH_MULTIPLIER", int)
celery_queue_type = Setting("AGENTRUN_CELERY_QUEUE_TYPE", _text)
# How often an idle consumer polls the database broker (agentrun/broker.py).
broker_poll_ms = Setting("AGENTRUN_BROKER_POLL_MS", int)
# How often a worker and beat write their heartbeat (ops/heartbeats.py).
heartbeat_interval_s = Setting("AGENTRUN_HEARTBEAT_INTERVAL_S", float)
# When a heartbeat counts as stale for /readyz.
heartbeat_stale_s = Setting("AGENTRUN_HEARTBEAT_STALE_S", float)
# `up`'s first restart delay of a dead child (ops/supervisor.py).
supervisor_restart_base_s = Setting("AGENTRUN_SUPERVISOR_RESTART_BASE_S", float)


# Webhooks (issue 21).


webhook_allow_private = Setting("AGENTRUN_WEBHOOK_ALLOW_PRIVATE", bool)
webhook_allow_http = Setting("AGENTRUN_WEBHOOK_ALLOW_HTTP", bool)
webhook_batch_size = Setting("AGENTRUN_WEBHOOK_BATCH_SIZE", int)
webhook_concurrency = Setting("AGENTRUN_WEBHOOK_CONCURRENCY", int)
webhook_timeout_s = Setting("AGENTRUN_WEBHOOK_TIMEOUT_S", float)
webhook_max_response_bytes = Setting("AGENTRUN_WEBHOOK_MAX_RESPONSE_BYTES", int)
webhook_lease_ms = Setting("AGENTRUN_WEBHOOK_LEASE_MS", int)
webhook_backoff_base_ms = Setting("AGENTRUN_WEBHOOK_BACKOFF_BASE_MS", int)
webhook_backoff_cap_ms = Setting("AGENTRUN_WEBHOOK_BACKOFF_CAP_MS", int)
webhook_disable_after_s = Setting("AGENTRUN_WEBHOOK_DISABLE_AFTER_S", int)
webhook_secret_grace_s = Setting("AGENTRUN_WEBHOOK_SECRET_GRACE_S", int)
webhook_wake_on_commit = Setting("AGENTRUN_WEBHOOK_WAKE_ON_COMMIT", bool)


# Security (issue 16): launch profiles, runner environment, runner key lifetime.


def launch_profiles() -> dict[str, dict[str, Any]]:
    """Launch profile name → {launcher, image, namespace, service_account_name, …}, as the
    operator configured them; `default` is always there (empty: the deployment's defaults)."""
    configured = settings.AGENTRUN_LAUNCH_PROFILES
    profiles = {str(name): dict(value) for name, value in configured.items()}
    profiles.setdefault("default", {})
    return profiles


def runner_env_passthrough() -> list[str]:
    """Names of server environment variables an operator lets through to local runners."""
    return [str(name) for name in settings.AGENTRUN_RUNNER_ENV_PASSTHROUGH]


runner_key_ttl_s = Setting("AGENTRUN_RUNNER_KEY_TTL_S", int)


# Tenancy.


# The most of a limited profile's runner slots one tenant may hold, in percent.
tenant_runner_share_percent = Setting("AGENTRUN_TENANT_RUNNER_SHARE_PERCENT", int)
