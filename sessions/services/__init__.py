"""Writes of the sessions app.

- `projection`: the session row as a projection of its runs, written from inside the runs
  services' transactions (create or check on run creation, turn and steer commands,
  claims, finishes, cancels, thread reports, event appends).
- `admission`: turn admission and steering, serialised per session.
- `lifecycle`: upsert, mark read, storage refresh and eviction, GC of expired storage.
"""
