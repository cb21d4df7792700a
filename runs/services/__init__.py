"""Writes of the runs app, one module per action family.

- `runs`: create, claim, heartbeat, finish (the run lifecycle and the lease protocol)
- `commands`: create, ack, finish
- `events`: append (and the locked append every other service uses)
- `cancel`: cancel run, cancel command (staged cancel requests)
- `runners`: register runner, runner jobs

Every public service is a plain function with keyword-only arguments that opens exactly
one `transaction.atomic()` and takes its locks first: the run row (`runs.locks.lock_run`),
then command rows. Nothing in here does network or subprocess I/O.
"""
