"""Typed access to the `AGENTRUN_*` settings: `conf.dispatch_batch_size() -> int`, ...

`agentrun/settings.py` parses the environment once, but `django.conf.settings` types every
attribute as `Any`, so apps cast (`int(settings.X)` in some, nothing in others) and a typo
in a setting's name fails only when the line runs. Each accessor here names one setting and
gives it one type; `tests/test_conf.py` calls every one, so a misspelt name fails there.

Accessors read `django.conf.settings` on every call, never at import: a test's `settings`
fixture or `override_settings` takes effect at once, as a deployment's settings module
does. A read costs an attribute lookup; nothing here is cached.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings


def _int(name: str) -> int:
    return int(getattr(settings, name))


def _str(name: str) -> str:
    return str(getattr(settings, name) or "")


def _bool(name: str) -> bool:
    return bool(getattr(settings, name))


# The project.


def data_dir() -> Path:
    return Path(settings.AGENTRUN_DATA_DIR)


def db_pool_size() -> int:
    """Connections a process's pool holds at most (0: no pool)."""
    return _int("AGENTRUN_DB_POOL_SIZE")


def database_embedded() -> bool:
    """True when no `DATABASE_URL` was given and the embedded PostgreSQL serves."""
    return _bool("AGENTRUN_DATABASE_EMBEDDED")


def api_url() -> str:
    """The URL runners call back on."""
    return _str("AGENTRUN_API_URL")


def source_commit() -> str:
    return _str("AGENTRUN_SOURCE_COMMIT")


def default_lease_ms() -> int:
    return _int("AGENTRUN_DEFAULT_LEASE_MS")


def max_lease_ms() -> int:
    return _int("AGENTRUN_MAX_LEASE_MS")


def long_poll_max_seconds() -> int:
    return _int("AGENTRUN_LONG_POLL_MAX_SECONDS")


def session_storage_root() -> Path:
    return Path(settings.AGENTRUN_SESSION_STORAGE_ROOT)


# Runner dispatch and its launchers.


def dispatch_batch_size() -> int:
    return _int("AGENTRUN_DISPATCH_BATCH_SIZE")


def dispatch_lease_ms() -> int:
    return _int("AGENTRUN_DISPATCH_LEASE_MS")


def dispatch_backoff_base_ms() -> int:
    return _int("AGENTRUN_DISPATCH_BACKOFF_BASE_MS")


def dispatch_backoff_cap_ms() -> int:
    return _int("AGENTRUN_DISPATCH_BACKOFF_CAP_MS")


def dispatch_max_attempts() -> int:
    return _int("AGENTRUN_DISPATCH_MAX_ATTEMPTS")


def dispatch_capacity_wait_ms() -> int:
    return _int("AGENTRUN_DISPATCH_CAPACITY_WAIT_MS")


def dispatch_wake_on_commit() -> bool:
    return _bool("AGENTRUN_DISPATCH_WAKE_ON_COMMIT")


def launcher() -> str:
    """The default launcher kind (`local`, `kubernetes`, or an extra one)."""
    return _str("AGENTRUN_LAUNCHER")


def extra_launchers() -> dict[str, str]:
    """Launcher kind → dotted path of its class."""
    return {str(name): str(path) for name, path in settings.AGENTRUN_EXTRA_LAUNCHERS.items()}


def local_runner_command() -> str | None:
    return _str("AGENTRUN_LOCAL_RUNNER_COMMAND") or None


def runner_image() -> str:
    return _str("AGENTRUN_RUNNER_IMAGE")


def kubernetes_namespace() -> str:
    return _str("AGENTRUN_KUBERNETES_NAMESPACE")


# Maintenance: reaper and reconciliation.


def maintenance_batch_size() -> int:
    return _int("AGENTRUN_MAINTENANCE_BATCH_SIZE")


def lease_reap_grace_ms() -> int:
    return _int("AGENTRUN_LEASE_REAP_GRACE_MS")


def reconcile_grace_ms() -> int:
    return _int("AGENTRUN_RECONCILE_GRACE_MS")


# The work queue.


def queue_batch_size() -> int:
    return _int("AGENTRUN_QUEUE_BATCH_SIZE")


def queue_wake_on_commit() -> bool:
    return _bool("AGENTRUN_QUEUE_WAKE_ON_COMMIT")


def queue_concurrency() -> object:
    """As configured (JSON): `queues.services.scheduler` checks its shape and reports a
    bad one by name, so it is not cast here."""
    return settings.AGENTRUN_QUEUE_CONCURRENCY


def queue_session_turns_queue() -> str:
    return _str("AGENTRUN_QUEUE_SESSION_TURNS_QUEUE")


def queue_session_turn_priority() -> int:
    return _int("AGENTRUN_QUEUE_SESSION_TURN_PRIORITY")


# Kafka and the outbox.


def kafka_bootstrap_servers() -> str:
    """Empty when the outbox is off."""
    return _str("AGENTRUN_KAFKA_BOOTSTRAP_SERVERS")


def kafka_topic() -> str:
    return _str("AGENTRUN_KAFKA_TOPIC")


def kafka_topic_partitions() -> int:
    return _int("AGENTRUN_KAFKA_TOPIC_PARTITIONS")


def kafka_topic_replication() -> int:
    """-1: the broker's default."""
    return _int("AGENTRUN_KAFKA_TOPIC_REPLICATION")


def kafka_source() -> str:
    """The CloudEvents `source` of every message."""
    return _str("AGENTRUN_KAFKA_SOURCE")


def kafka_message_max_bytes() -> int:
    return _int("AGENTRUN_KAFKA_MESSAGE_MAX_BYTES")


def outbox_batch_size() -> int:
    return _int("AGENTRUN_KAFKA_OUTBOX_BATCH_SIZE")


def outbox_lease_ms() -> int:
    return _int("AGENTRUN_KAFKA_OUTBOX_LEASE_MS")


def outbox_backoff_base_ms() -> int:
    return _int("AGENTRUN_KAFKA_OUTBOX_BACKOFF_BASE_MS")


def outbox_backoff_cap_ms() -> int:
    return _int("AGENTRUN_KAFKA_OUTBOX_BACKOFF_CAP_MS")


def outbox_retention_days() -> int:
    return _int("AGENTRUN_KAFKA_OUTBOX_RETENTION_DAYS")


def outbox_wake_on_commit() -> bool:
    return _bool("AGENTRUN_KAFKA_OUTBOX_WAKE_ON_COMMIT")


def metrics_backlog_refresh_s() -> float:
    """How stale `/metrics`' backlog gauges may be: one database read per interval."""
    return float(settings.AGENTRUN_METRICS_BACKLOG_REFRESH_S)


def broker_poll_ms() -> int:
    """How often an idle consumer polls the database broker (agentrun/broker.py)."""
    return _int("AGENTRUN_BROKER_POLL_MS")


def heartbeat_interval_s() -> float:
    """How often a worker and beat write their heartbeat (ops/heartbeats.py)."""
    return float(settings.AGENTRUN_HEARTBEAT_INTERVAL_S)


def heartbeat_stale_s() -> float:
    """When a heartbeat counts as stale for /readyz."""
    return float(settings.AGENTRUN_HEARTBEAT_STALE_S)


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


def runner_key_ttl_s() -> int:
    return _int("AGENTRUN_RUNNER_KEY_TTL_S")


# Tenancy.


def tenant_runner_share_percent() -> int:
    """The most of a limited profile's runner slots one tenant may hold, in percent."""
    return _int("AGENTRUN_TENANT_RUNNER_SHARE_PERCENT")
