"""queues: the work queue (tasks, attempts, the scheduler). Not `queue`: that would shadow
the standard library's module.

The top domain layer, under `ops` only (SPEC §9.1). `queues.projection` is its projection
module: a task's run ending, written in the run's transaction. `queues.services` files,
schedules, retries and reconciles tasks (the scheduler admits queued session turns through
`admit_turn_locked`); `queues.locks`, `queues.selectors`, `queues.versions` its locks,
reads and change-feed versions; `queues.wakeup` wakes the scheduler.
"""
