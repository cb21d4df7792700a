"""runs: runs, their commands, events, leases and cancels: the bottom domain layer.

Layers (SPEC §9.1): agentrun < runs < dispatch, outbox < sessions, webhooks < queues,
compat_openai < ops; the runner stands apart. `runs.models` (and `runs.control_models`:
cancel requests, approvals, tenant quotas), `runs.locks` (the run row lock every write
takes first) and `runs.versions` are its foundation; `runs.phases` spells every
`backend_status` phase; `runs.services` the write paths (lifecycle, commands, the event log
and its fence, cancellation, terminal, the reaper, approvals, runners and runner jobs);
`runs.selectors` the reads; `runs.sql` its raw statements; `runs.waiting` the long-poll
(its route in `runs.api.long_poll`) and `runs.streams` the run stream. Its services write
other apps' rows only through their projection modules (`sessions.projection`,
`queues.projection`, `dispatch.intents`, `outbox.record`, `webhooks.record`), in the run's
transaction; from other apps it imports only these, `outbox.cloudevents` and the runner's
CLI for the `manage.py runner` shim (`tests/test_projection_layers.py`).
"""
