"""The Celery app. Tasks live in each app's `tasks.py`; the beat schedule in one module.

It also registers the default broker's transport alias (`agentrun.broker`) with kombu, by
name only (the transport module is imported when a connection is first made), and logs
one line per finished batch (`agentrun.logs.log_task_result`). In a worker, a thread's
database connection is kept from task to task, checked between them
(`agentrun.worker_connections`), instead of the Django fixup's close after every task.
"""

import os

from celery import Celery, signals
from kombu.transport import TRANSPORT_ALIASES

from agentrun import worker_connections
from agentrun.logs import log_task_result

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentrun.settings")
TRANSPORT_ALIASES.setdefault("agentrun-sqla", "agentrun.broker:Transport")

app = Celery("agentrun")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
signals.task_postrun.connect(log_task_result, weak=False)


def _keep_worker_connections(**_: object) -> None:
    # Connected after the Django fixup's own worker_init receiver (made with `app`), so its
    # worker fixup exists and is installed when this replaces its close.
    worker_connections.install(app)


signals.worker_init.connect(_keep_worker_connections, weak=False)
