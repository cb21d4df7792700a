"""The Celery app. Tasks live in each app's `tasks.py`; the beat schedule in one module."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentrun.settings")

app = Celery("agentrun")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
