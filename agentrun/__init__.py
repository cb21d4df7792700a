"""agentrun: the durable control plane for coding-agent runs.

The project package holds settings, URLs, the Celery app and the cross-cutting helpers
(locks, ids, hashing, redaction, errors, auth, pagination) that every app reuses. It is
also a Django app of its own: it owns the API key model and `create_api_key`.
"""

from agentrun.celery import app as celery_app

__all__ = ["celery_app"]
