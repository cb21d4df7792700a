"""dispatch: durable runner dispatch intents and the launchers that start runners.

Above `runs`, beside `outbox`, below `sessions` (SPEC §9.1). `dispatch.intents` is its
projection module: `runs` records and fences intents there, in the run's transaction.
`dispatch.services` claims, launches, retries and reconciles them; `dispatch.launchers`
start `python -m runner run` locally or as a Kubernetes Job; `dispatch.locks` and
`dispatch.selectors` hold its locks and reads; `dispatch.sql` the settle's one raw
statement; `dispatch.wakeup` wakes the dispatcher over Celery and `dispatch.listener` on a
worker's LISTEN.
"""
