"""A bare Celery app for cell 11: the broker under test comes from the caller (the bench
process) or the environment (its worker), with nothing of agentrun's task set around it.
Importing `agentrun` registers the `agentrun-sqla` transport alias."""

from __future__ import annotations

import ast
import os
from typing import Any

from celery import Celery

import agentrun  # noqa: F401  (the transport alias, DJANGO_SETTINGS_MODULE)

app = Celery("bench-broker", include=["bench.broker_tasks"])


def configure(url: str, options: dict[str, Any]) -> None:
    app.conf.broker_url, app.conf.broker_transport_options = url, options
    app._pool = None  # Celery caches its connection and producer pools on first use
    app.amqp._producer_pool = None


configure(
    os.environ.get("CELERY_BROKER_URL", "memory://"),
    ast.literal_eval(os.environ.get("AGENTRUN_BENCH_BROKER_OPTIONS", "{}")),
)
