"""Writes of the runs app, one module per action family.

- `lifecycle`: create, claim, heartbeat, finish (the run lifecycle and the lease protocol)
- `terminal`: ending a run (its status, open commands, claim and thread)
- `command_lifecycle`: create, ack, finish commands
- `event_log`: append events (and the locked append every other service uses)
- `cancellation`: cancel run, cancel command (staged cancel requests)
- `runners`: register runner, runner jobs
- `reaper`: fail runs whose lease expired or whose runner job is gone (`fail_run_locked`
  with an `InfraFailure`, which stale session turns and the doctor use too)
- `approvals`: approval requests and decisions
- `quotas`: tenant token quotas (set or clear)
- `fencing` (pure: is a runner write stale, the refusal payloads) and `refusals` (recording
  a refused write)

Module names are not the API's action names (`cancel`, `commands`, `events`), so a view
never imports a module under the name of one of its actions.

Every public service is a plain function with keyword-only arguments that opens exactly
one `transaction.atomic(durable=True)` (it is outermost: a caller already inside a
transaction uses the `*_locked` twin) and takes its locks first: the run row
(`runs.locks.lock_run`), then command rows. Writes to other apps go only through the
projection tier (`sessions.projection`, `queues.projection`, `dispatch.intents`,
`outbox.record`, `webhooks.record`), in lock order. Nothing in here does network or subprocess I/O.
"""
