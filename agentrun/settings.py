"""Settings, read from the environment.

PostgreSQL is the only database (the design relies on SKIP LOCKED, advisory locks,
LISTEN/NOTIFY, sequences and jsonb). Importing this module starts nothing: with
`DATABASE_URL` unset the database is a placeholder (`agentrun.unconfigured_db`) whose first
connection fails with what to do, so `manage.py --help`, `check` and mypy need no server.
`manage.py up`, `make run` and `make test` start the embedded PostgreSQL explicitly
(`python -m agentrun.embedded_db exec -- COMMAND`), which then sets `DATABASE_URL`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from agentrun.celery_schedule import BEAT_SCHEDULE
from agentrun.database_config import default_database
from agentrun.env import env_bool, env_float, env_int
from agentrun.task_queues import TASK_ROUTES

BASE_DIR = Path(__file__).resolve().parent.parent


DEBUG = env_bool("DEBUG", False)
# `AGENTRUN_ENV=production` makes a missing SECRET_KEY a start-up error; anything else (the
# default, `local`) keeps `make run` zero-config with a fallback key for local runs only.
AGENTRUN_ENV = os.environ.get("AGENTRUN_ENV", "local").strip().lower()
SECRET_KEY = os.environ.get("SECRET_KEY", "")
if not SECRET_KEY:
    if AGENTRUN_ENV == "production":
        raise ImproperlyConfigured(
            "SECRET_KEY is not set: AGENTRUN_ENV=production needs a secret key of its own "
            "(e.g. SECRET_KEY=$(python -c 'import secrets; print(secrets.token_urlsafe(50))'))"
        )
    SECRET_KEY = "agentrun-local-development-key-not-for-production"
ALLOWED_HOSTS = [h for h in os.environ.get("ALLOWED_HOSTS", "*").split(",") if h]

AGENTRUN_DATA_DIR = Path(os.environ.get("AGENTRUN_DATA_DIR", BASE_DIR / ".agentrun"))
DATABASE_URL = os.environ.get("DATABASE_URL", "")
# Set by `agentrun.embedded_db exec` beside the DATABASE_URL it exports (banner, status).
AGENTRUN_DATABASE_EMBEDDED = env_bool("AGENTRUN_DATABASE_EMBEDDED", False)
# Connections come from a bounded pool per process (Django's native psycopg pool): a request
# borrows one for its queries and gives it back at its end, so a process never holds more
# than AGENTRUN_DB_POOL_SIZE (plus the one long-poll listener, runs/waiting.py), whatever the
# number of requests or threads. A request that finds the pool empty waits up to
# AGENTRUN_DB_POOL_TIMEOUT_S, then answers 503 `database_busy` with Retry-After
# (agentrun/middleware.py). AGENTRUN_DB_POOL_SIZE=0 turns the pool off (a connection per
# request, closed at its end: no persistent connections, which pile up under ASGI).
AGENTRUN_DB_POOL_SIZE = env_int("AGENTRUN_DB_POOL_SIZE", 10)
AGENTRUN_DB_POOL_TIMEOUT_S = float(os.environ.get("AGENTRUN_DB_POOL_TIMEOUT_S") or 3)
# Server-side limits for every connection of the app role (0 turns one off). Long-polls are
# not affected: they wait outside any transaction, on an autocommit LISTEN connection, and a
# wait for a notification is not a statement. The statement timeout bounds a runaway query
# or a lock wait; the idle-in-transaction timeout ends a stuck or stopped process's
# transaction, so it cannot hold row locks or pin the xmin horizon (vacuum) for long.
AGENTRUN_DB_STATEMENT_TIMEOUT_MS = env_int("AGENTRUN_DB_STATEMENT_TIMEOUT_MS", 60_000)
AGENTRUN_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS = env_int(
    "AGENTRUN_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS", 30_000
)
DATABASES = {
    "default": default_database(
        url=DATABASE_URL,
        pool_size=AGENTRUN_DB_POOL_SIZE,
        pool_timeout_s=AGENTRUN_DB_POOL_TIMEOUT_S,
        statement_timeout_ms=AGENTRUN_DB_STATEMENT_TIMEOUT_MS,
        idle_in_transaction_timeout_ms=AGENTRUN_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS,
    )
}

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",  # OpClass in index expressions (the run search index)
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "agentrun",
    "runs",
    "sessions.apps.AgentSessionsConfig",
    "queues",
    "dispatch",
    "outbox",
    "webhooks",  # signed, ordered deliveries from the outbox (issue 21)
    "compat_openai",  # /openai/v1: the OpenAI Agents API surface over sessions (issue 22)
    "ops",  # the operations console, on top of every app
]

AUTHENTICATION_BACKENDS = ["agentrun.throttle.ThrottledModelBackend"]  # failed logins throttled

MIDDLEWARE = [
    # Every middleware is sync-and-async capable, so the ASGI handler runs the async
    # long-poll view on the event loop, not in a thread blocked for the wait.
    "agentrun.middleware.RouteLatencyMiddleware",  # outermost: the latency a client sees
    "agentrun.middleware.LogContextMiddleware",
    "agentrun.middleware.JsonErrorMiddleware",  # the JSON envelope outside /admin/
    "django.middleware.security.SecurityMiddleware",
    "agentrun.middleware.StaticFilesMiddleware",  # /static/ always (whitenoise, async-capable)
    # Sessions, CSRF, the user and messages: the admin's and the console's, not /api/'s.
    "agentrun.middleware.BrowserSessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "agentrun.middleware.BrowserCsrfViewMiddleware",
    "agentrun.middleware.BrowserAuthenticationMiddleware",
    "agentrun.middleware.BrowserMessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "agentrun.urls"
WSGI_APPLICATION = "agentrun.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True
STATIC_URL = "static/"
STATIC_ROOT = AGENTRUN_DATA_DIR / "static"
# whitenoise serves STATIC_ROOT, which `manage.py up` fills (`collectstatic`) before its
# server starts, as a production deployment does; the finders are its fallback, so a server
# started without collectstatic still serves the admin's CSS and JS.
WHITENOISE_USE_FINDERS = True
# Event payloads may be up to 1 MiB and a batch carries many; the serializers enforce the
# per-field limits, this only bounds one request body.
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("AGENTRUN_MAX_REQUEST_BYTES", 16 * 1024 * 1024)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["agentrun.auth.ApiKeyAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["agentrun.auth.IsAuthenticatedKey"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["agentrun.parsers.DepthLimitedJSONParser"],
    "DEFAULT_SCHEMA_CLASS": "agentrun.schema.AgentRunAutoSchema",
    "EXCEPTION_HANDLER": "agentrun.errors.exception_handler",
    "UNAUTHENTICATED_USER": None,
}

SPECTACULAR_SETTINGS = {
    "TITLE": "agentrun API",
    "DESCRIPTION": "The durable control plane for coding-agent runs.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    # PATCH bodies are validated whole (no partial update), so they keep their required keys.
    "COMPONENT_SPLIT_PATCH": False,
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "agentrun.schema.document_errors",  # error envelopes, strict request bodies
    ],
    "ENUM_NAME_OVERRIDES": {
        "CommandTypeEnum": "runs.models.CommandType",
        "EventTypeEnum": "runs.models.EventType",
        "FailureKindEnum": "runs.models.FailureKind",
        "RunnerEventTypeEnum": "runs.models.RUNNER_EVENT_TYPE_CHOICES",
    },
}

# Celery: with no broker configured, the broker is agentrun's own PostgreSQL (kombu's
# SQLAlchemy transport, `agentrun.broker`): no service to run, no file-read race. Redis
# (`redis://…`) and RabbitMQ (`amqp://…`) work with CELERY_BROKER_URL; their client
# libraries are in requirements.txt.
# `agentrun-sqla` is that transport's alias (registered by agentrun.celery).
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL") or (
    "agentrun-sqla+postgresql+psycopg://" + (DATABASE_URL or "postgres:///").partition("://")[2]
)
# How often an idle consumer on the database broker polls each queue; on-commit wake-ups
# wait at most this long. 100 ms x 5 queues is 50 index reads a second per worker.
AGENTRUN_BROKER_POLL_MS = env_int("AGENTRUN_BROKER_POLL_MS", 100)
# Worker and beat heartbeats (ops.heartbeats): written every interval; `/readyz` is not
# ready once the newest of either kind is older than the stale limit.
AGENTRUN_HEARTBEAT_INTERVAL_S = env_float("AGENTRUN_HEARTBEAT_INTERVAL_S", 5.0)
AGENTRUN_HEARTBEAT_STALE_S = env_float(
    "AGENTRUN_HEARTBEAT_STALE_S", 2 * AGENTRUN_HEARTBEAT_INTERVAL_S
)
# `up`'s first restart of a dead child waits this long (doubling per recent death, up to
# 10 s): a child that dies at once does not spin.
AGENTRUN_SUPERVISOR_RESTART_BASE_S = env_float("AGENTRUN_SUPERVISOR_RESTART_BASE_S", 0.5)
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_BEAT_SCHEDULE = BEAT_SCHEDULE
CELERY_TASK_ROUTES = TASK_ROUTES
# Delivery (issue 23; RabbitMQ is the production broker, README "Running at scale"). Every
# task is one bounded batch that is safe to redo (SKIP LOCKED claims, fenced settles), so a
# message is acknowledged after its task ran: a worker killed mid-batch leaves it
# unacknowledged and the broker gives it to another worker (RabbitMQ at once, when the
# connection drops; Redis only after its visibility timeout).
AGENTRUN_CELERY_ACKS_LATE = env_bool("AGENTRUN_CELERY_ACKS_LATE", True)
CELERY_TASK_ACKS_LATE = AGENTRUN_CELERY_ACKS_LATE
CELERY_TASK_REJECT_ON_WORKER_LOST = AGENTRUN_CELERY_ACKS_LATE  # the prefork pool's case
# Messages a worker process reserves beyond the one it runs: 1, so a long batch never sits
# on wake-ups an idle worker could take.
AGENTRUN_CELERY_PREFETCH_MULTIPLIER = env_int("AGENTRUN_CELERY_PREFETCH_MULTIPLIER", 1)
CELERY_WORKER_PREFETCH_MULTIPLIER = AGENTRUN_CELERY_PREFETCH_MULTIPLIER
# RabbitMQ queue type: `quorum` (replicated, durable, poison-message aware) by default on
# an amqp:// broker; Celery then turns off global QoS itself. Other brokers ignore it.
AGENTRUN_CELERY_QUEUE_TYPE = os.environ.get("AGENTRUN_CELERY_QUEUE_TYPE") or (
    "quorum" if CELERY_BROKER_URL.startswith(("amqp://", "amqps://", "pyamqp://")) else "classic"
)
CELERY_TASK_DEFAULT_QUEUE_TYPE = AGENTRUN_CELERY_QUEUE_TYPE
CELERY_TASK_CREATE_MISSING_QUEUE_TYPE = AGENTRUN_CELERY_QUEUE_TYPE
if CELERY_BROKER_URL.startswith(("amqp://", "amqps://", "pyamqp://")):
    # Publisher confirms: a wake-up is sent once the broker has it, not once it left us.
    CELERY_BROKER_TRANSPORT_OPTIONS = {"confirm_publish": True}

# Runs and leases.
AGENTRUN_DEFAULT_LEASE_MS = env_int("AGENTRUN_DEFAULT_LEASE_MS", 60_000)
AGENTRUN_MAX_LEASE_MS = env_int("AGENTRUN_MAX_LEASE_MS", 15 * 60_000)
AGENTRUN_LONG_POLL_MAX_SECONDS = 30
# Streams (SPEC §9.2): a comment heartbeat while idle; a reader that takes nothing for the
# send timeout is disconnected; the reconnect hint; how long a browser's stream ticket lives.
AGENTRUN_STREAM_HEARTBEAT_S = env_float("AGENTRUN_STREAM_HEARTBEAT_S", 15.0)
AGENTRUN_STREAM_SEND_TIMEOUT_S = env_float("AGENTRUN_STREAM_SEND_TIMEOUT_S", 30.0)
AGENTRUN_STREAM_RETRY_MS = env_int("AGENTRUN_STREAM_RETRY_MS", 2000)
AGENTRUN_STREAM_TICKET_TTL_S = env_int("AGENTRUN_STREAM_TICKET_TTL_S", 300)
# Web origins whose pages may open streams (CORS on the stream routes only; comma-separated).
AGENTRUN_STREAM_ALLOWED_ORIGINS = [
    o.strip() for o in os.environ.get("AGENTRUN_STREAM_ALLOWED_ORIGINS", "").split(",") if o.strip()
]

# Runner dispatch (dispatch app): launchers, claim batches, backoff, capacity, reaping.
AGENTRUN_LAUNCHER = os.environ.get("AGENTRUN_LAUNCHER", "local")  # or "kubernetes"
# More launchers, as `name=dotted.path.Class` pairs separated by commas; each class is
# built with no arguments and must follow `dispatch.launchers.base.Launcher`.
AGENTRUN_EXTRA_LAUNCHERS = {
    name.strip(): path.strip()
    for name, _, path in (
        pair.partition("=")
        for pair in os.environ.get("AGENTRUN_EXTRA_LAUNCHERS", "").split(",")
        if pair.strip()
    )
}
AGENTRUN_API_URL = os.environ.get("AGENTRUN_API_URL", "http://127.0.0.1:8000")
# The local runner's command line; `{run_id}`, `{python}`, `{manage_py}` are replaced.
# Unset: `python manage.py runner --run RUN_ID`.
AGENTRUN_LOCAL_RUNNER_COMMAND = os.environ.get("AGENTRUN_LOCAL_RUNNER_COMMAND") or None
AGENTRUN_RUNNER_IMAGE = os.environ.get("AGENTRUN_RUNNER_IMAGE", "agentrun-runner:latest")
AGENTRUN_KUBERNETES_NAMESPACE = os.environ.get("AGENTRUN_KUBERNETES_NAMESPACE", "agentrun")
# A finished runner Job (and, through its owner reference, its key Secret) is deleted this
# long after it ended; a launch profile's `ttl_seconds_after_finished` overrides it.
AGENTRUN_KUBERNETES_JOB_TTL_S = env_int("AGENTRUN_KUBERNETES_JOB_TTL_S", 3600)
AGENTRUN_SOURCE_COMMIT = os.environ.get("AGENTRUN_SOURCE_COMMIT", "")
AGENTRUN_DISPATCH_BATCH_SIZE = env_int("AGENTRUN_DISPATCH_BATCH_SIZE", 50)
AGENTRUN_DISPATCH_LEASE_MS = env_int("AGENTRUN_DISPATCH_LEASE_MS", 60_000)
AGENTRUN_DISPATCH_BACKOFF_BASE_MS = env_int("AGENTRUN_DISPATCH_BACKOFF_BASE_MS", 1_000)
AGENTRUN_DISPATCH_BACKOFF_CAP_MS = env_int("AGENTRUN_DISPATCH_BACKOFF_CAP_MS", 5 * 60_000)
AGENTRUN_DISPATCH_MAX_ATTEMPTS = env_int("AGENTRUN_DISPATCH_MAX_ATTEMPTS", 5)
AGENTRUN_DISPATCH_CAPACITY_WAIT_MS = env_int("AGENTRUN_DISPATCH_CAPACITY_WAIT_MS", 2_000)
AGENTRUN_DISPATCH_WAKE_ON_COMMIT = env_bool("AGENTRUN_DISPATCH_WAKE_ON_COMMIT", True)
AGENTRUN_DISPATCH_LISTEN = env_bool("AGENTRUN_DISPATCH_LISTEN", True)
AGENTRUN_MAINTENANCE_BATCH_SIZE = env_int("AGENTRUN_MAINTENANCE_BATCH_SIZE", 100)
AGENTRUN_LEASE_REAP_GRACE_MS = env_int("AGENTRUN_LEASE_REAP_GRACE_MS", 5_000)
AGENTRUN_RECONCILE_GRACE_MS = env_int("AGENTRUN_RECONCILE_GRACE_MS", 60_000)
# How long an approval waits for a person before it resolves `expired` (SPEC §9.3).
AGENTRUN_APPROVAL_TTL_S = env_int("AGENTRUN_APPROVAL_TTL_S", 3600)

LOG_FORMAT = os.environ.get("AGENTRUN_LOG_FORMAT", "text")
LOG_LEVEL = os.environ.get("LOG_LEVEL", "INFO").upper()
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"context": {"()": "agentrun.logs.ContextFilter"}},
    "formatters": {
        "json": {"()": "agentrun.logs.JsonFormatter"},
        "text": {
            "()": "agentrun.logs.RedactingTextFormatter",
            "format": "%(asctime)s %(levelname)s %(name)s %(message)s",
        },
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "filters": ["context"],
            "formatter": "json" if LOG_FORMAT == "json" else "text",
        }
    },
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    # Celery's own per-task lines (beat's "Sending due task", the worker's "received" and
    # "succeeded") would be thousands an hour of idle ticks: below WARNING they show only
    # with LOG_LEVEL=DEBUG. `agentrun.tasks` logs one line per batch instead: INFO when it
    # did work, DEBUG when empty (agentrun.logs.log_task_result). Task errors stay ERROR.
    "loggers": {
        name: {"level": "DEBUG" if LOG_LEVEL == "DEBUG" else "WARNING"}
        for name in ("celery.beat", "celery.app.trace", "celery.worker.strategy")
    },
}

# Sessions: `local` session storage lives under this root; gc_sessions deletes only there.
AGENTRUN_SESSION_STORAGE_ROOT = Path(
    os.environ.get("AGENTRUN_SESSION_STORAGE_ROOT", AGENTRUN_DATA_DIR / "sessions")
)

# Work queue (queues app). AGENTRUN_QUEUE_CONCURRENCY is a JSON object of queue name →
# the most tasks of that queue running at once, e.g. '{"nightly": 2}'; a queue it does not
# name is unlimited. Queued session turns (`when_busy=enqueue`) go to the session-turns
# queue, in the session's lane, at the session-turn priority.
AGENTRUN_QUEUE_CONCURRENCY = json.loads(os.environ.get("AGENTRUN_QUEUE_CONCURRENCY") or "{}")
AGENTRUN_QUEUE_BATCH_SIZE = env_int("AGENTRUN_QUEUE_BATCH_SIZE", 50)
AGENTRUN_QUEUE_WAKE_ON_COMMIT = env_bool("AGENTRUN_QUEUE_WAKE_ON_COMMIT", True)
AGENTRUN_QUEUE_SESSION_TURNS_QUEUE = os.environ.get(
    "AGENTRUN_QUEUE_SESSION_TURNS_QUEUE", "session-turns"
)
AGENTRUN_QUEUE_SESSION_TURN_PRIORITY = env_int("AGENTRUN_QUEUE_SESSION_TURN_PRIORITY", 100)

# Event outbox (outbox app). With no bootstrap servers the outbox is off: no records are
# written and the relay does nothing. The relay lease bounds one batch's produce: each
# message gets its delivery report within half the lease (`message.timeout.ms`).
AGENTRUN_KAFKA_BOOTSTRAP_SERVERS = os.environ.get("AGENTRUN_KAFKA_BOOTSTRAP_SERVERS", "")
AGENTRUN_KAFKA_TOPIC = os.environ.get("AGENTRUN_KAFKA_TOPIC", "agentrun.events")
AGENTRUN_KAFKA_TOPIC_PARTITIONS = env_int("AGENTRUN_KAFKA_TOPIC_PARTITIONS", 12)
AGENTRUN_KAFKA_TOPIC_REPLICATION = env_int("AGENTRUN_KAFKA_TOPIC_REPLICATION", -1)  # broker's
AGENTRUN_KAFKA_SOURCE = os.environ.get("AGENTRUN_KAFKA_SOURCE", "urn:agentrun:control-plane")
# Events carry up to 1 MiB of payload; the envelope and JSON escaping need headroom.
AGENTRUN_KAFKA_MESSAGE_MAX_BYTES = env_int("AGENTRUN_KAFKA_MESSAGE_MAX_BYTES", 4 * 1024 * 1024)
# Records per relay batch (at most outbox.locks.MAX_CLAIM): a batch costs two statements and
# one flush whatever its size, so larger batches relay a backlog faster (bench cell 7).
AGENTRUN_KAFKA_OUTBOX_BATCH_SIZE = env_int("AGENTRUN_KAFKA_OUTBOX_BATCH_SIZE", 1_000)
AGENTRUN_KAFKA_OUTBOX_LEASE_MS = env_int("AGENTRUN_KAFKA_OUTBOX_LEASE_MS", 60_000)
AGENTRUN_KAFKA_OUTBOX_BACKOFF_BASE_MS = env_int("AGENTRUN_KAFKA_OUTBOX_BACKOFF_BASE_MS", 1_000)
AGENTRUN_KAFKA_OUTBOX_BACKOFF_CAP_MS = env_int("AGENTRUN_KAFKA_OUTBOX_BACKOFF_CAP_MS", 300_000)
AGENTRUN_KAFKA_OUTBOX_RETENTION_DAYS = env_int("AGENTRUN_KAFKA_OUTBOX_RETENTION_DAYS", 7)
# Off when only `relay_outbox --loop` relays (no Celery workers): commits then enqueue nothing.
AGENTRUN_KAFKA_OUTBOX_WAKE_ON_COMMIT = env_bool("AGENTRUN_KAFKA_OUTBOX_WAKE_ON_COMMIT", True)

# Webhooks (issue 21, webhooks/). Private, loopback, link-local and metadata targets are
# refused unless allowed (tests and a private deployment); plain http only when allowed.
AGENTRUN_WEBHOOK_ALLOW_PRIVATE = env_bool("AGENTRUN_WEBHOOK_ALLOW_PRIVATE", False)
AGENTRUN_WEBHOOK_ALLOW_HTTP = env_bool("AGENTRUN_WEBHOOK_ALLOW_HTTP", False)
# Deliveries per relay batch, and how many keys a batch sends to at once.
AGENTRUN_WEBHOOK_BATCH_SIZE = env_int("AGENTRUN_WEBHOOK_BATCH_SIZE", 500)
AGENTRUN_WEBHOOK_CONCURRENCY = env_int("AGENTRUN_WEBHOOK_CONCURRENCY", 16)
# One request's total time (connect, TLS, send, response), and the response bytes read.
AGENTRUN_WEBHOOK_TIMEOUT_S = float(os.environ.get("AGENTRUN_WEBHOOK_TIMEOUT_S") or 10)
AGENTRUN_WEBHOOK_MAX_RESPONSE_BYTES = env_int("AGENTRUN_WEBHOOK_MAX_RESPONSE_BYTES", 4_096)
AGENTRUN_WEBHOOK_LEASE_MS = env_int("AGENTRUN_WEBHOOK_LEASE_MS", 120_000)
AGENTRUN_WEBHOOK_BACKOFF_BASE_MS = env_int("AGENTRUN_WEBHOOK_BACKOFF_BASE_MS", 1_000)
AGENTRUN_WEBHOOK_BACKOFF_CAP_MS = env_int("AGENTRUN_WEBHOOK_BACKOFF_CAP_MS", 600_000)
# An endpoint that has failed without a success for this long is disabled.
AGENTRUN_WEBHOOK_DISABLE_AFTER_S = env_int("AGENTRUN_WEBHOOK_DISABLE_AFTER_S", 3 * 24 * 3600)
# After a rotation the old secret still signs (a second signature) for this long.
AGENTRUN_WEBHOOK_SECRET_GRACE_S = env_int("AGENTRUN_WEBHOOK_SECRET_GRACE_S", 24 * 3600)
AGENTRUN_WEBHOOK_WAKE_ON_COMMIT = env_bool("AGENTRUN_WEBHOOK_WAKE_ON_COMMIT", True)

# /metrics: its backlog gauges are read from the database at most this often (ops/metrics.py).
AGENTRUN_METRICS_BACKLOG_REFRESH_S = float(
    os.environ.get("AGENTRUN_METRICS_BACKLOG_REFRESH_S") or 10
)
# Security (issue 16). Launch profiles are the only launch options a client can name
# (`dispatch: {"launch_profile": NAME}`): name → {launcher, image, namespace,
# service_account_name}; `default` (when not given: the default launcher) serves `{}`.
AGENTRUN_LAUNCH_PROFILES = json.loads(os.environ.get("AGENTRUN_LAUNCH_PROFILES") or "{}")
# Extra variable names the local launcher copies from the server's environment into a
# runner's (comma-separated); everything else a runner gets is set explicitly.
AGENTRUN_RUNNER_ENV_PASSTHROUGH = [
    name.strip()
    for name in os.environ.get("AGENTRUN_RUNNER_ENV_PASSTHROUGH", "").split(",")
    if name.strip()
]
# A run-scoped runner key stops working this long after it was issued, even if its run is
# still live (it is revoked at once when the run ends).
AGENTRUN_RUNNER_KEY_TTL_S = env_int("AGENTRUN_RUNNER_KEY_TTL_S", 7 * 24 * 3600)
# Tenancy (issue 16). The most of a limited backend profile's runner slots
# (`capacity.max_concurrent_runs`) one tenant may hold, in percent (at least one slot). Below
# this ceiling, while several tenants have runs or intents on the profile, each gets a fair
# share (the limit divided among them, rounded up); a tenant alone may use every slot.
AGENTRUN_TENANT_RUNNER_SHARE_PERCENT = env_int("AGENTRUN_TENANT_RUNNER_SHARE_PERCENT", 100)
