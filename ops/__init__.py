"""ops: the operations console, the only package that composes every app.

The doctor (`ops.doctor`), the status collector (`ops.status`) and its admin dashboard
(`ops.dashboard`), the `/metrics` view with its backlog gauges (`ops.metrics`), the doctor's
beat task, and the `up`, `seed_demo`, `agentrun_doctor` and `agentrun_status` commands. Each
of them reads or repairs across runs, sessions, queues, dispatch, outbox and webhooks at
once, which no domain app may do, so they sit on top of every app. Nothing imports `ops`:
the project reaches it only by name (INSTALLED_APPS, `include("ops.urls")`, Celery
autodiscovery), and `tests/test_layers.py` fails if anything else does.
"""
