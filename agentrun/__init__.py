"""agentrun: the durable control plane for coding-agent runs.

The project package holds settings, URLs, the Celery app and the cross-cutting helpers
(locks, ids, hashing, redaction, errors, auth, pagination, metrics counters, the admin base
classes, the leased-batch claim/settle both relays share, the raw-statement round trip and
row statements, the deferred row inserts and the collecting block they share with the
session writes, the worker's LISTEN drains) that every app reuses. It is also a Django app
of its own: it owns the API key model and `create_api_key`. It is the foundation, so it
imports no app (not even inside a function): the URLconf and Celery reach the apps by
dotted name, and the operations console that composes them all is `ops`.
`tests/test_layers.py` holds it to that.

Layers (SPEC §9.1): agentrun < runs < dispatch, outbox < sessions, webhooks (above
outbox) < queues, compat_openai (above sessions) < ops; the runner (`runner`) stands apart
as an API client. `tests/test_layers.py` and `tests/test_projection_layers.py` fence them.
"""

from agentrun.celery import app as celery_app

__all__ = ["celery_app"]
