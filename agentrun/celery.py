"""The Celery app. Tasks live in each app's `tasks.py`; the beat schedule in one module.

It also registers the default broker's transport alias (`agentrun.broker`) with kombu, by
name only (the transport module is imported when a connection is first made), and logs
one line per finished batch (`agentrun.logs.log_task_result`). In a worker, a thread's
database connection is kept from task to task, checked between them
(`agentrun.worker_connections`), instead of the Django fixup's close after every task,
and the objects of its start-up are frozen out of the garbage collector's full passes.
"""

import gc
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


def _freeze_startup_heap(**_: object) -> None:
    """Move everything the worker made while starting (Django, the apps, Celery: some
    100,000 objects) out of the collector's reach. Python's full collection scans every
    tracked object (~30 ms for those alone), holding the GIL, and a busy worker allocates
    enough to run them: each stalled all the pool's threads at once (a 100 ms dip to half
    the rate in every Celery drain of bench cell 3; 3,590-3,761 -> 3,956-4,036 items/s
    without it). Those objects live as long as the process anyway (`gc.freeze`, as
    CPython's documentation suggests for a server's start-up state)."""
    gc.collect()
    gc.freeze()


# In the worker's own process, where a thread pool runs its tasks, and in each child of a
# prefork pool.
signals.worker_ready.connect(_freeze_startup_heap, weak=False)
signals.worker_process_init.connect(_freeze_startup_heap, weak=False)
