"""sessions: conversations spanning runs, one turn at a time.

Above `runs`, `dispatch` and `outbox`, below `queues` and `compat_openai` (SPEC §9.1).
`sessions.projection` is its projection module: how run writes show up on the session
row, in the run's transaction. `sessions.services` admits, steers, cancels and collects
sessions (`admit_turn_locked` is the twin the queue scheduler calls under the admission
lock); `sessions.turns` holds the plain admission types and `sessions.turn_queue` the one
door into the work queue; `sessions.locks`, `sessions.selectors`, `sessions.versions` its
locks, reads and change-feed versions; `sessions.session_writes` collects a transaction's
session projection so the row is written once (`sessions.sql`, its one raw UPDATE);
`sessions.streams` the session stream.
"""
