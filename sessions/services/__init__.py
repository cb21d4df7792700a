"""Writes of the sessions app.

- `admission`: turn admission (`admit_turn`, and `admit_turn_locked` for a caller already
  holding the session's admission lock), serialised per session.
- `steering`: steer and cancel a session's active turn.
- `lifecycle`: upsert, mark read, storage refresh and eviction, GC of expired storage.
- `stale`: replacing a turn whose runner lease expired.

The session row as a projection of its runs is not a service: it is `sessions.projection`,
written from inside the runs services' transactions.
"""
