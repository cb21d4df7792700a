"""The Celery app. Tasks live in each app's `tasks.py`; the beat schedule in one module.

It also registers the default broker's transport alias (`agentrun.broker`) with kombu, by
name only (the transport module is imported when a connection is first made), and logs
one line per finished batch (`agentrun.logs.log_task_result`).
"""

import os

from celery import Celery, signals
from kombu.transport import TRANSPORT_ALIASES

from agentrun.logs import log_task_result

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentrun.settings")
TRANSPORT_ALIASES.setdefault("agentrun-sqla", "agentrun.broker:Transport")

app = Celery("agentrun")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
signals.task_postrun.connect(log_task_result, weak=False)
